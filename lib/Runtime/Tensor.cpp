//===- Tensor.cpp - dtypes, host tensors, format detection ----------------===//

#include "distopt/Runtime/Tensor.h"

#include "FileUtil.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace distopt::runtime {

namespace {
struct DTypeInfo {
  DType dtype;
  const char *name;
  size_t size;
  int32_t onnx;
  const char *npy;
};
// ONNX TensorProto.DataType: FLOAT=1 UINT8=2 INT8=3 UINT16=4 INT16=5 INT32=6
// INT64=7 STRING=8 BOOL=9 FLOAT16=10 DOUBLE=11 UINT32=12 UINT64=13
// COMPLEX64=14 COMPLEX128=15 BFLOAT16=16.
constexpr DTypeInfo kDTypes[] = {
    {DType::Float32, "float32", 4, 1, "<f4"},
    {DType::Float64, "float64", 8, 11, "<f8"},
    {DType::Float16, "float16", 2, 10, "<f2"},
    {DType::BFloat16, "bfloat16", 2, 16, "<V2"},
    {DType::Int8, "int8", 1, 3, "|i1"},
    {DType::Int16, "int16", 2, 5, "<i2"},
    {DType::Int32, "int32", 4, 6, "<i4"},
    {DType::Int64, "int64", 8, 7, "<i8"},
    {DType::UInt8, "uint8", 1, 2, "|u1"},
    {DType::Bool, "bool", 1, 9, "|b1"},
    {DType::UInt16, "uint16", 2, 4, "<u2"},
    {DType::UInt32, "uint32", 4, 12, "<u4"},
    {DType::UInt64, "uint64", 8, 13, "<u8"},
};

const DTypeInfo &info(DType dtype) {
  return kDTypes[static_cast<int32_t>(dtype)];
}
} // namespace

const std::vector<DType> &allDTypes() {
  static const std::vector<DType> all = [] {
    std::vector<DType> v;
    for (const DTypeInfo &i : kDTypes)
      v.push_back(i.dtype);
    return v;
  }();
  return all;
}

const char *dtypeName(DType dtype) { return info(dtype).name; }

bool parseDType(std::string_view name, DType &dtype) {
  for (const DTypeInfo &i : kDTypes)
    if (name == i.name) {
      dtype = i.dtype;
      return true;
    }
  return false;
}

size_t dtypeSize(DType dtype) { return info(dtype).size; }

int32_t onnxDataType(DType dtype) { return info(dtype).onnx; }

bool dtypeFromOnnx(int32_t onnxType, DType &dtype) {
  for (const DTypeInfo &i : kDTypes)
    if (i.onnx == onnxType) {
      dtype = i.dtype;
      return true;
    }
  return false;
}

std::string onnxDataTypeName(int32_t onnxType) {
  static const char *const names[] = {
      "UNDEFINED",      "FLOAT",      "UINT8",
      "INT8",           "UINT16",     "INT16",
      "INT32",          "INT64",      "STRING",
      "BOOL",           "FLOAT16",    "DOUBLE",
      "UINT32",         "UINT64",     "COMPLEX64",
      "COMPLEX128",     "BFLOAT16",   "FLOAT8E4M3FN",
      "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ",
      "UINT4",          "INT4",       "FLOAT4E2M1",
      "FLOAT8E8M0",     "UINT2",      "INT2"};
  if (onnxType >= 0 &&
      onnxType < static_cast<int32_t>(sizeof(names) / sizeof(names[0])))
    return names[onnxType];
  return "<" + std::to_string(onnxType) + ">";
}

const char *npyDescr(DType dtype) { return info(dtype).npy; }

std::string shapeToString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

bool checkedNumElements(const std::vector<int64_t> &shape, size_t elemSize,
                        int64_t &numElements) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return false;
    if (d != 0 && n > INT64_MAX / d)
      return false;
    n *= d;
  }
  if (elemSize != 0 && n > INT64_MAX / static_cast<int64_t>(elemSize))
    return false;
  numElements = n;
  return true;
}

void AlignedFree::operator()(void *p) const { std::free(p); }

void *alignedAlloc(size_t bytes, bool zero) {
  size_t rounded =
      (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  if (rounded < bytes)
    return nullptr;
  if (rounded == 0)
    rounded = kBufferAlignment;
  void *p = std::aligned_alloc(kBufferAlignment, rounded);
  if (p && zero)
    std::memset(p, 0, rounded);
  return p;
}

bool Tensor::create(DType dtype, std::vector<int64_t> shape, Tensor &out,
                    std::string &error) {
  int64_t n;
  if (!checkedNumElements(shape, dtypeSize(dtype), n)) {
    error = "invalid shape " + shapeToString(shape) + " for " +
            dtypeName(dtype) + " (negative dimension or size overflow)";
    return false;
  }
  size_t bytes = static_cast<size_t>(n) * dtypeSize(dtype);
  void *p = alignedAlloc(bytes, /*zero=*/true);
  if (!p) {
    error = "cannot allocate " + std::to_string(bytes) + " bytes for shape " +
            shapeToString(shape);
    return false;
  }
  out.dtype_ = dtype;
  out.shape_ = std::move(shape);
  out.numElements_ = n;
  out.data_.reset(p);
  return true;
}

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  std::string error;
  if (!create(dtype, std::move(shape), t, error)) {
    std::fprintf(stderr, "distopt runtime: %s\n", error.c_str());
    std::abort();
  }
  return t;
}

Tensor Tensor::fromBytes(DType dtype, std::vector<int64_t> shape,
                         const void *bytes, size_t length) {
  Tensor t = zeros(dtype, std::move(shape));
  if (length != t.byteSize()) {
    std::fprintf(stderr,
                 "distopt runtime: Tensor::fromBytes: %zu bytes given, shape "
                 "%s of %s needs %zu\n",
                 length, shapeToString(t.shape()).c_str(), dtypeName(dtype),
                 t.byteSize());
    std::abort();
  }
  if (length)
    std::memcpy(t.data(), bytes, length);
  return t;
}

Tensor Tensor::clone() const {
  if (!valid())
    return Tensor();
  return fromBytes(dtype_, shape_, data(), byteSize());
}

bool Tensor::equals(const Tensor &other) const {
  if (valid() != other.valid())
    return false;
  if (!valid())
    return true;
  return dtype_ == other.dtype_ && shape_ == other.shape_ &&
         std::memcmp(data(), other.data(), byteSize()) == 0;
}

bool detectTensorFileFormat(const std::string &path, TensorFileFormat &format,
                            std::string &error) {
  auto endsWith = [&](const char *suffix) {
    size_t n = std::strlen(suffix);
    if (path.size() < n)
      return false;
    for (size_t i = 0; i < n; ++i) {
      char c = path[path.size() - n + i];
      if (c >= 'A' && c <= 'Z')
        c = static_cast<char>(c - 'A' + 'a');
      if (c != suffix[i])
        return false;
    }
    return true;
  };
  if (endsWith(".npy")) {
    format = TensorFileFormat::Npy;
    return true;
  }
  if (endsWith(".pb")) {
    format = TensorFileFormat::TensorProto;
    return true;
  }
  detail::ReadFile file;
  if (!file.open(path, error))
    return false;
  char magic[6] = {0};
  size_t got;
  if (!file.read(magic, sizeof(magic), got, error))
    return false;
  format = (got == 6 && std::memcmp(magic, "\x93NUMPY", 6) == 0)
               ? TensorFileFormat::Npy
               : TensorFileFormat::TensorProto;
  return true;
}

bool readTensorFile(const std::string &path, Tensor &out, std::string &error) {
  TensorFileFormat format;
  if (!detectTensorFileFormat(path, format, error))
    return false;
  if (format == TensorFileFormat::Npy)
    return readNpy(path, out, error);
  return readTensorProto(path, out, error);
}

} // namespace distopt::runtime
