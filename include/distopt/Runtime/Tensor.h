//===- Tensor.h - host tensors, dtypes, .npy and TensorProto I/O -*- C++
//-*-===//
//
// The runtime's C++ API for tensors on the host: element types, a dense
// row-major Tensor with a 64-byte-aligned buffer, and readers/writers for
// NumPy `.npy` files and ONNX `TensorProto` (`.pb`) files. No LLVM/MLIR, no
// libprotobuf: both formats are decoded here.
//
// Nothing here throws on bad input: every reader returns false and fills
// `error` with a message that names what was wrong (the caller prefixes the
// file or input name).
//
//===----------------------------------------------------------------------===//
#ifndef DISTOPT_RUNTIME_TENSOR_H
#define DISTOPT_RUNTIME_TENSOR_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace distopt::runtime {

/// Alignment (bytes) of every buffer the runtime allocates.
constexpr size_t kBufferAlignment = 64;

/// Element types the runtime moves around. float16/bfloat16 are stored as
/// their 16-bit patterns; bool is one byte (0 or 1).
enum class DType : int32_t {
  Float32,
  Float64,
  Float16,
  BFloat16,
  Int8,
  Int16,
  Int32,
  Int64,
  UInt8,
  Bool,
  UInt16,
  UInt32,
  UInt64,
};

/// All dtypes, in enum order.
const std::vector<DType> &allDTypes();
/// The manifest spelling: "float32", "float64", "float16", "bfloat16", "int8",
/// "int16", "int32", "int64", "uint8", "bool", "uint16", "uint32", "uint64".
const char *dtypeName(DType dtype);
/// Parses a manifest spelling; false if unknown.
bool parseDType(std::string_view name, DType &dtype);
/// Bytes per element.
size_t dtypeSize(DType dtype);
/// The ONNX TensorProto.DataType value (FLOAT=1, ..., BFLOAT16=16).
int32_t onnxDataType(DType dtype);
/// Maps an ONNX TensorProto.DataType to a dtype; false if unsupported.
bool dtypeFromOnnx(int32_t onnxType, DType &dtype);
/// Name of an ONNX TensorProto.DataType value ("FLOAT", "UINT16", ...), or
/// "<n>" for values outside the enum.
std::string onnxDataTypeName(int32_t onnxType);
/// The .npy `descr` the runtime writes ("<f4", "|b1", bfloat16 -> "<V2" as
/// ml_dtypes does).
const char *npyDescr(DType dtype);

/// Formats a shape as "[2, 16]" (and "[]" for a scalar).
std::string shapeToString(const std::vector<int64_t> &shape);
/// Number of elements of `shape`; false if a dimension is negative or the
/// product (times `elemSize`) overflows int64.
bool checkedNumElements(const std::vector<int64_t> &shape, size_t elemSize,
                        int64_t &numElements);

/// Frees memory from alignedAlloc.
struct AlignedFree {
  void operator()(void *p) const;
};
/// Allocates `bytes` (at least 1) aligned to kBufferAlignment; zeroed when
/// `zero`. Returns null on failure.
void *alignedAlloc(size_t bytes, bool zero);

/// A dense, row-major (C order) host tensor owning a 64-byte-aligned buffer.
/// Movable, not copyable (use clone()). data() is never null, even when the
/// tensor is empty.
class Tensor {
public:
  Tensor() = default;
  Tensor(Tensor &&) = default;
  Tensor &operator=(Tensor &&) = default;
  Tensor(const Tensor &) = delete;
  Tensor &operator=(const Tensor &) = delete;

  /// Allocates a zeroed tensor. Fails (returns false, sets `error`) on a
  /// negative dimension, size overflow, or allocation failure.
  static bool create(DType dtype, std::vector<int64_t> shape, Tensor &out,
                     std::string &error);
  /// Like create() but aborts with a message on failure (for tests/tools
  /// with trusted shapes).
  static Tensor zeros(DType dtype, std::vector<int64_t> shape);
  /// A tensor holding a copy of `bytes` (must be numElements*elemSize long).
  static Tensor fromBytes(DType dtype, std::vector<int64_t> shape,
                          const void *bytes, size_t length);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numElements() const { return numElements_; }
  size_t elementSize() const { return dtypeSize(dtype_); }
  size_t byteSize() const {
    return static_cast<size_t>(numElements_) * elementSize();
  }
  void *data() { return data_.get(); }
  const void *data() const { return data_.get(); }
  template <typename T> T *dataAs() { return static_cast<T *>(data()); }
  template <typename T> const T *dataAs() const {
    return static_cast<const T *>(data());
  }
  /// True once created (a default-constructed Tensor is invalid).
  bool valid() const { return data_ != nullptr; }

  Tensor clone() const;
  /// Same dtype, shape and bytes.
  bool equals(const Tensor &other) const;

private:
  DType dtype_ = DType::Float32;
  std::vector<int64_t> shape_;
  int64_t numElements_ = 0;
  std::unique_ptr<void, AlignedFree> data_;
};

//===----------------------------------------------------------------------===//
// NumPy .npy (format versions 1.0, 2.0 and 3.0)
//===----------------------------------------------------------------------===//

/// Decodes an in-memory .npy image. Accepts little- and big-endian data
/// (big-endian is byte-swapped), '|' and '=' byte orders, and Fortran order
/// (converted to C order). Rejects object/structured/string dtypes,
/// truncated data and trailing bytes.
bool decodeNpy(const void *bytes, size_t length, Tensor &out,
               std::string &error);
/// Reads a .npy file; the error does not repeat the path.
bool readNpy(const std::string &path, Tensor &out, std::string &error);

/// A .npy file mapped read-only, its data used in place: for data sets
/// larger than memory (the train mode's --data). Only little-endian (or
/// byte-order-free) C-order files map; open() says why not otherwise.
class MappedNpy {
public:
  MappedNpy() = default;
  MappedNpy(const MappedNpy &) = delete;
  MappedNpy &operator=(const MappedNpy &) = delete;
  ~MappedNpy();
  /// Maps `path`; false with `error` (not repeating the path) when it is
  /// not a well-formed .npy file or its data cannot be used in place
  /// (`mappable` then says whether reading it whole would work).
  bool open(const std::string &path, std::string &error, bool &mappable);
  DType dtype() const { return dtype_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  const void *data() const { return data_; }

private:
  void *base_ = nullptr;
  size_t length_ = 0;
  const void *data_ = nullptr;
  DType dtype_ = DType::Float32;
  std::vector<int64_t> shape_;
};
/// Encodes a tensor given by parts as a .npy image (version 1.0, or 2.0 when
/// the header needs it; header padded so the data starts on a 64-byte
/// boundary, as NumPy does).
std::string encodeNpy(DType dtype, const std::vector<int64_t> &shape,
                      const void *data);
std::string encodeNpyHeader(DType dtype, const std::vector<int64_t> &shape);
/// Writes a .npy file atomically (writes `<path>.tmp.<pid>`, then renames).
bool writeNpy(const std::string &path, DType dtype,
              const std::vector<int64_t> &shape, const void *data,
              std::string &error);
bool writeNpy(const std::string &path, const Tensor &tensor,
              std::string &error);

//===----------------------------------------------------------------------===//
// ONNX TensorProto (.pb)
//===----------------------------------------------------------------------===//

/// Decodes a serialized onnx.TensorProto: dims, data_type, name and one of
/// raw_data / float_data / int32_data / int64_data / double_data (packed or
/// not). Rejects string tensors, external data, unsupported data types and
/// element counts that do not match dims. `name` (optional) receives field 8.
bool decodeTensorProto(const void *bytes, size_t length, Tensor &out,
                       std::string &error, std::string *name = nullptr);
bool readTensorProto(const std::string &path, Tensor &out, std::string &error,
                     std::string *name = nullptr);
/// Serializes as onnx.TensorProto with dims, data_type, name (when not
/// empty) and raw_data, in that order (the bytes onnx.numpy_helper.from_array
/// produces).
std::string encodeTensorProto(DType dtype, const std::vector<int64_t> &shape,
                              const void *data, const std::string &name = "");
bool writeTensorProto(const std::string &path, const Tensor &tensor,
                      std::string &error, const std::string &name = "");
/// Serializes as onnx.TensorProto whose data lives in an external file
/// (ONNX's external-data convention: dims, data_type, name, external_data
/// entries location, offset and length, data_location EXTERNAL).
std::string encodeExternalTensorProto(DType dtype,
                                      const std::vector<int64_t> &shape,
                                      const std::string &name,
                                      const std::string &location,
                                      int64_t offset, int64_t length);

//===----------------------------------------------------------------------===//
// Either format
//===----------------------------------------------------------------------===//

enum class TensorFileFormat { Npy, TensorProto };

/// Picks the format of `path`: by extension (".npy", ".pb"), else by content
/// (the .npy magic "\x93NUMPY"; anything else is taken as a TensorProto).
/// Fails only if the file cannot be opened for sniffing.
bool detectTensorFileFormat(const std::string &path, TensorFileFormat &format,
                            std::string &error);
/// Reads a .npy or .pb file (see detectTensorFileFormat).
bool readTensorFile(const std::string &path, Tensor &out, std::string &error);

} // namespace distopt::runtime

#endif // DISTOPT_RUNTIME_TENSOR_H
