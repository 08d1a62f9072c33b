"""Writes dopt IR with non-splat constants above the folders' size limit
(65536 elements) for canonicalize.mlir: too large to write by hand."""

N = 65537  # one element over the limit


def dense_i8(n):
    """A non-splat i8 constant of n elements, as hex."""
    return "0x" + bytes(i % 251 for i in range(n)).hex().upper()


print(f"""func.func @large_non_splat() -> (tensor<{N}x1xi8>, tensor<1x{N}xi8>, tensor<{N}xi8>, tensor<{N}xi8>) {{
  %c = dopt.constant {{value = dense<"{dense_i8(N)}"> : tensor<{N}xi8>}} : () -> tensor<{N}xi8>
  %0 = dopt.reshape %c {{shape = array<i64: {N}, 1>}} : (tensor<{N}xi8>) -> tensor<{N}x1xi8>
  %1 = dopt.transpose %0 {{perm = array<i64: 1, 0>}} : (tensor<{N}x1xi8>) -> tensor<1x{N}xi8>
  %2 = dopt.neg %c : (tensor<{N}xi8>) -> tensor<{N}xi8>
  %3 = dopt.slice %c {{starts = array<i64: {N - 1}>, ends = array<i64: -1>, steps = array<i64: -1>}} : (tensor<{N}xi8>) -> tensor<{N}xi8>
  return %0, %1, %2, %3 : tensor<{N}x1xi8>, tensor<1x{N}xi8>, tensor<{N}xi8>, tensor<{N}xi8>
}}""")
