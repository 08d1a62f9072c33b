//===- TensorProto.cpp - onnx.TensorProto wire-format reader/writer -------===//
//
// A decoder for the protobuf wire format of onnx.TensorProto, enough for
// tensors with inline data; no libprotobuf. Field numbers (onnx.proto):
//   dims=1 data_type=2 segment=3 float_data=4 int32_data=5 string_data=6
//   int64_data=7 name=8 raw_data=9 double_data=10 uint64_data=11
//   doc_string=12 external_data=13 data_location=14 metadata_props=16
//
//===----------------------------------------------------------------------===//

#include "distopt/Runtime/Tensor.h"

#include "FileUtil.h"
#include "Protobuf.h"

#include <cstring>

namespace distopt::runtime {

namespace {

using pb::WireType;
using pb::Varint;
using pb::Fixed64;
using pb::LengthDelimited;
using pb::Fixed32;

class WireReader {
public:
  WireReader(const unsigned char *p, size_t n) : p(p), n(n) {}
  bool done() const { return pos >= n; }
  /// Marks the start of a field (its tag), for error messages.
  void beginField() { fieldStart = pos; }
  size_t offset() const { return pos; }

  bool varint(uint64_t &v, std::string &error) {
    v = 0;
    size_t start = pos;
    for (int shift = 0; shift < 70; shift += 7) {
      if (pos >= n) {
        error = "truncated varint at byte " + std::to_string(start);
        return false;
      }
      unsigned char b = p[pos++];
      if (shift == 63 && (b & 0x7e)) {
        error = "varint overflows 64 bits at byte " + std::to_string(start);
        return false;
      }
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80))
        return true;
    }
    error = "varint longer than 10 bytes at byte " + std::to_string(start);
    return false;
  }
  bool fixed(size_t width, uint64_t &v, std::string &error) {
    if (n - pos < width) {
      error = "truncated fixed" + std::to_string(width * 8) + " at byte " +
              std::to_string(pos);
      return false;
    }
    v = 0;
    for (size_t i = 0; i < width; ++i)
      v |= uint64_t(p[pos + i]) << (8 * i);
    pos += width;
    return true;
  }
  bool bytes(const unsigned char *&data, size_t &length, std::string &error) {
    uint64_t len;
    if (!varint(len, error))
      return false;
    if (len > n - pos) {
      error = "truncated: length-delimited field at byte " +
              std::to_string(fieldStart) + " needs " + std::to_string(len) +
              " bytes, " + std::to_string(n - pos) + " left";
      return false;
    }
    data = p + pos;
    length = static_cast<size_t>(len);
    pos += length;
    return true;
  }
  bool skip(int wireType, std::string &error) {
    uint64_t v;
    const unsigned char *d;
    size_t len;
    switch (wireType) {
    case Varint:
      return varint(v, error);
    case Fixed64:
      return fixed(8, v, error);
    case LengthDelimited:
      return bytes(d, len, error);
    case Fixed32:
      return fixed(4, v, error);
    default:
      error = "unsupported wire type " + std::to_string(wireType) +
              " at byte " + std::to_string(pos);
      return false;
    }
  }

private:
  const unsigned char *p;
  size_t n;
  size_t pos = 0;
  size_t fieldStart = 0;
};

struct Decoded {
  std::vector<int64_t> dims;
  int64_t dataType = 0;
  bool hasDataType = false;
  std::vector<uint32_t> floatData;
  std::vector<int64_t> int32Data; // Kept wide to range-check.
  std::vector<int64_t> int64Data;
  std::vector<uint64_t> doubleData;
  std::vector<uint64_t> uint64Data;
  size_t stringCount = 0;
  bool hasRaw = false;
  const unsigned char *raw = nullptr;
  size_t rawLength = 0;
  std::string name;
  int64_t dataLocation = 0;
  bool hasExternalData = false;
};

const char *fieldName(uint64_t field) {
  switch (field) {
  case 1:
    return "dims";
  case 4:
    return "float_data";
  case 5:
    return "int32_data";
  case 7:
    return "int64_data";
  case 10:
    return "double_data";
  case 11:
    return "uint64_data";
  default:
    return "?";
  }
}

/// Reads a repeated numeric field, packed (wire type 2) or not.
/// `element` is Varint, Fixed32 or Fixed64.
template <typename T>
bool readRepeated(WireReader &r, int wireType, WireType element, uint64_t field,
                  std::vector<T> &out, std::string &error) {
  auto readOne = [&](WireReader &rr) {
    uint64_t v;
    bool ok = element == Varint
                  ? rr.varint(v, error)
                  : rr.fixed(element == Fixed32 ? 4 : 8, v, error);
    if (ok)
      out.push_back(static_cast<T>(v));
    return ok;
  };
  if (wireType == LengthDelimited) {
    const unsigned char *d;
    size_t len;
    if (!r.bytes(d, len, error))
      return false;
    WireReader packed(d, len);
    while (!packed.done())
      if (!readOne(packed)) {
        error = std::string("in packed ") + fieldName(field) + ": " + error;
        return false;
      }
    return true;
  }
  if (wireType != element) {
    error = std::string("field ") + fieldName(field) + " has wire type " +
            std::to_string(wireType);
    return false;
  }
  return readOne(r);
}

bool parse(const unsigned char *p, size_t n, Decoded &d, std::string &error) {
  WireReader r(p, n);
  while (!r.done()) {
    size_t at = r.offset();
    r.beginField();
    uint64_t tag;
    if (!r.varint(tag, error))
      return false;
    uint64_t field = tag >> 3;
    int wt = static_cast<int>(tag & 7);
    if (field == 0) {
      error = "field number 0 at byte " + std::to_string(at);
      return false;
    }
    auto expect = [&](int want) {
      if (wt == want)
        return true;
      error = "field " + std::to_string(field) + " at byte " +
              std::to_string(at) + " has wire type " + std::to_string(wt) +
              ", expected " + std::to_string(want);
      return false;
    };
    uint64_t v;
    switch (field) {
    case 1:
      if (!readRepeated(r, wt, Varint, field, d.dims, error))
        return false;
      break;
    case 2:
      if (!expect(Varint) || !r.varint(v, error))
        return false;
      d.dataType = static_cast<int32_t>(v);
      d.hasDataType = true;
      break;
    case 4:
      if (!readRepeated(r, wt, Fixed32, field, d.floatData, error))
        return false;
      break;
    case 5:
      if (!readRepeated(r, wt, Varint, field, d.int32Data, error))
        return false;
      break;
    case 6: {
      const unsigned char *s;
      size_t len;
      if (!expect(LengthDelimited) || !r.bytes(s, len, error))
        return false;
      ++d.stringCount;
      break;
    }
    case 7:
      if (!readRepeated(r, wt, Varint, field, d.int64Data, error))
        return false;
      break;
    case 8: {
      const unsigned char *s;
      size_t len;
      if (!expect(LengthDelimited) || !r.bytes(s, len, error))
        return false;
      d.name.assign(reinterpret_cast<const char *>(s), len);
      break;
    }
    case 9:
      if (!expect(LengthDelimited) || !r.bytes(d.raw, d.rawLength, error))
        return false;
      d.hasRaw = true;
      break;
    case 10:
      if (!readRepeated(r, wt, Fixed64, field, d.doubleData, error))
        return false;
      break;
    case 11:
      if (!readRepeated(r, wt, Varint, field, d.uint64Data, error))
        return false;
      break;
    case 13:
      d.hasExternalData = true;
      if (!r.skip(wt, error))
        return false;
      break;
    case 14:
      if (!expect(Varint) || !r.varint(v, error))
        return false;
      d.dataLocation = static_cast<int64_t>(v);
      break;
    default:
      if (!r.skip(wt, error))
        return false;
    }
  }
  return true;
}

template <typename T>
void storeInts(const std::vector<int64_t> &src, void *dst) {
  T *out = static_cast<T *>(dst);
  for (size_t i = 0; i < src.size(); ++i)
    out[i] = static_cast<T>(src[i]);
}

} // namespace

bool decodeTensorProto(const void *bytes, size_t length, Tensor &out,
                       std::string &error, std::string *name) {
  Decoded d;
  std::string why;
  if (!parse(static_cast<const unsigned char *>(bytes), length, d, why)) {
    error = "invalid TensorProto: " + why;
    return false;
  }
  std::string label =
      d.name.empty() ? "TensorProto" : "TensorProto '" + d.name + "'";
  if (d.dataLocation == 1 || d.hasExternalData) {
    error = label + " uses external data (data_location=EXTERNAL), which is "
                    "not supported; store the data inline";
    return false;
  }
  if (!d.hasDataType || d.dataType == 0) {
    error = label + " has no data_type";
    return false;
  }
  if (d.dataType == 8 || d.stringCount) {
    error = label + " holds strings (string_data), which are not supported";
    return false;
  }
  DType dtype;
  if (!dtypeFromOnnx(static_cast<int32_t>(d.dataType), dtype)) {
    error = label + " has unsupported data_type " +
            onnxDataTypeName(static_cast<int32_t>(d.dataType)) + " (" +
            std::to_string(d.dataType) + ")";
    return false;
  }
  int64_t numElements;
  if (!checkedNumElements(d.dims, dtypeSize(dtype), numElements)) {
    error = label + " has invalid dims " + shapeToString(d.dims) +
            " (negative dimension or size overflow)";
    return false;
  }
  size_t numel = static_cast<size_t>(numElements);
  size_t byteSize = numel * dtypeSize(dtype);
  struct Field {
    const char *name;
    size_t count;
  } typed[] = {{"float_data", d.floatData.size()},
               {"int32_data", d.int32Data.size()},
               {"int64_data", d.int64Data.size()},
               {"double_data", d.doubleData.size()},
               {"uint64_data", d.uint64Data.size()}};
  const char *expected;
  switch (dtype) {
  case DType::Float32:
    expected = "float_data";
    break;
  case DType::Float64:
    expected = "double_data";
    break;
  case DType::Int64:
    expected = "int64_data";
    break;
  case DType::UInt32:
  case DType::UInt64:
    expected = "uint64_data";
    break;
  default:
    expected = "int32_data";
  }
  size_t typedCount = 0;
  for (const Field &f : typed) {
    if (!f.count)
      continue;
    if (d.hasRaw) {
      error = label + " holds both raw_data and " + f.name;
      return false;
    }
    if (std::strcmp(f.name, expected) != 0) {
      error = label + " of data_type " +
              onnxDataTypeName(static_cast<int32_t>(d.dataType)) + " holds " +
              f.name + ", expected raw_data or " + expected;
      return false;
    }
    typedCount = f.count;
  }
  if (d.hasRaw ? d.rawLength != byteSize : typedCount != numel) {
    if (d.hasRaw)
      error = label + ": raw_data has " + std::to_string(d.rawLength) +
              " bytes, dims " + shapeToString(d.dims) + " of " +
              dtypeName(dtype) + " need " + std::to_string(byteSize);
    else
      error = label + ": " + expected + " has " + std::to_string(typedCount) +
              " elements, dims " + shapeToString(d.dims) + " need " +
              std::to_string(numel);
    return false;
  }
  Tensor t;
  if (!Tensor::create(dtype, d.dims, t, error)) {
    error = label + ": " + error;
    return false;
  }
  if (d.hasRaw) {
    if (d.rawLength)
      std::memcpy(t.data(), d.raw, d.rawLength);
  } else if (numel) {
    switch (dtype) {
    case DType::Float32:
      std::memcpy(t.data(), d.floatData.data(), numel * 4);
      break;
    case DType::Float64:
      std::memcpy(t.data(), d.doubleData.data(), numel * 8);
      break;
    case DType::Int64:
      std::memcpy(t.data(), d.int64Data.data(), numel * 8);
      break;
    case DType::UInt64:
      std::memcpy(t.data(), d.uint64Data.data(), numel * 8);
      break;
    case DType::UInt32:
      for (size_t i = 0; i < numel; ++i) {
        if (d.uint64Data[i] > UINT32_MAX) {
          error = label + ": uint64_data[" + std::to_string(i) +
                  "] = " + std::to_string(d.uint64Data[i]) +
                  " is out of range for uint32";
          return false;
        }
        static_cast<uint32_t *>(t.data())[i] =
            static_cast<uint32_t>(d.uint64Data[i]);
      }
      break;
    default: {
      // int32_data holds int32/int16/int8/uint16/uint8/bool values and the bit
      // patterns of float16/bfloat16; check each fits.
      int64_t lo = INT32_MIN, hi = INT32_MAX;
      switch (dtype) {
      case DType::Int16:
        lo = INT16_MIN, hi = INT16_MAX;
        break;
      case DType::Int8:
        lo = INT8_MIN, hi = INT8_MAX;
        break;
      case DType::UInt8:
        lo = 0, hi = 255;
        break;
      case DType::UInt16:
        lo = 0, hi = 65535;
        break;
      case DType::Bool:
        lo = 0, hi = 1;
        break;
      case DType::Float16:
      case DType::BFloat16:
        lo = 0, hi = 65535;
        break;
      default:
        break;
      }
      for (size_t i = 0; i < numel; ++i) {
        // Varints of negative int32 values are sign-extended to 64 bits.
        int64_t v = static_cast<int32_t>(d.int32Data[i]);
        if (dtype == DType::Float16 || dtype == DType::BFloat16)
          v = static_cast<int64_t>(d.int32Data[i] & 0xffffffff);
        if (v < lo || v > hi) {
          error = label + ": int32_data[" + std::to_string(i) +
                  "] = " + std::to_string(v) + " is out of range for " +
                  dtypeName(dtype);
          return false;
        }
        d.int32Data[i] = v;
      }
      switch (dtype) {
      case DType::Int32:
        storeInts<int32_t>(d.int32Data, t.data());
        break;
      case DType::Int16:
        storeInts<int16_t>(d.int32Data, t.data());
        break;
      case DType::Float16:
      case DType::BFloat16:
      case DType::UInt16:
        storeInts<uint16_t>(d.int32Data, t.data());
        break;
      case DType::Int8:
        storeInts<int8_t>(d.int32Data, t.data());
        break;
      default:
        storeInts<uint8_t>(d.int32Data, t.data());
      }
    }
    }
  }
  if (name)
    *name = d.name;
  out = std::move(t);
  return true;
}

bool readTensorProto(const std::string &path, Tensor &out, std::string &error,
                     std::string *name) {
  std::string bytes;
  if (!detail::readWholeFile(path, bytes, error))
    return false;
  return decodeTensorProto(bytes.data(), bytes.size(), out, error, name);
}

namespace {
/// dims (field 1), data_type (2) and name (8, when not empty).
std::string tensorProtoHeader(DType dtype, const std::vector<int64_t> &shape,
                              const std::string &name) {
  std::string s;
  for (int64_t d : shape)
    pb::putVarintField(s, 1, static_cast<uint64_t>(d));
  pb::putVarintField(s, 2, static_cast<uint64_t>(onnxDataType(dtype)));
  if (!name.empty())
    pb::putBytesField(s, 8, name);
  return s;
}
} // namespace

std::string encodeTensorProto(DType dtype, const std::vector<int64_t> &shape,
                              const void *data, const std::string &name) {
  std::string s = tensorProtoHeader(dtype, shape, name);
  int64_t n = 0;
  checkedNumElements(shape, dtypeSize(dtype), n);
  size_t bytes = static_cast<size_t>(n) * dtypeSize(dtype);
  pb::putBytesField(s, 9,
                    std::string_view(static_cast<const char *>(data), bytes));
  return s;
}

std::string encodeExternalTensorProto(DType dtype,
                                      const std::vector<int64_t> &shape,
                                      const std::string &name,
                                      const std::string &location,
                                      int64_t offset, int64_t length) {
  std::string s = tensorProtoHeader(dtype, shape, name);
  auto entry = [&](const std::string &key, const std::string &value) {
    std::string e;
    pb::putBytesField(e, 1, key);
    pb::putBytesField(e, 2, value);
    pb::putBytesField(s, 13, e);
  };
  entry("location", location);
  entry("offset", std::to_string(offset));
  entry("length", std::to_string(length));
  pb::putVarintField(s, 14, 1); // data_location: EXTERNAL
  return s;
}

bool writeTensorProto(const std::string &path, const Tensor &tensor,
                      std::string &error, const std::string &name) {
  std::string bytes =
      encodeTensorProto(tensor.dtype(), tensor.shape(), tensor.data(), name);
  std::string_view part(bytes);
  return detail::writeFileAtomically(path, &part, 1, error);
}

} // namespace distopt::runtime
