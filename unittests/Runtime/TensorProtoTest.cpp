//===- TensorProtoTest.cpp - onnx.TensorProto reader and writer -----------===//

#include "distopt/Runtime/Tensor.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace distopt::runtime;
using namespace distopt::runtime::test;

namespace {
#include "Fixtures.inc"

Tensor decodeOk(const std::string &b, std::string *name = nullptr) {
  return decodedBy(
      [&](const void *data, size_t size, Tensor &t, std::string &error) {
        return decodeTensorProto(data, size, t, error, name);
      },
      b);
}

std::string decodeError(const std::string &b) {
  return refusalBy(
      [](const void *data, size_t size, Tensor &t, std::string &error) {
        return decodeTensorProto(data, size, t, error);
      },
      b);
}

/// Hand-built protobuf pieces.
std::string varint(uint64_t v) {
  std::string s;
  while (v >= 0x80) {
    s += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  s += static_cast<char>(v);
  return s;
}
std::string tag(int field, int wire) { return varint((field << 3) | wire); }
std::string fixed32(uint32_t v) {
  return std::string(reinterpret_cast<char *>(&v), 4);
}
std::string fixed64(uint64_t v) {
  return std::string(reinterpret_cast<char *>(&v), 8);
}
std::string lengthDelimited(int field, const std::string &payload) {
  return tag(field, 2) + varint(payload.size()) + payload;
}
std::string dims(std::initializer_list<int64_t> ds) {
  std::string s;
  for (int64_t d : ds)
    s += tag(1, 0) + varint(static_cast<uint64_t>(d));
  return s;
}
std::string dataType(int t) { return tag(2, 0) + varint(t); }
float asFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint32_t floatBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
} // namespace

TEST(TensorProto, DecodesWhatOnnxWrites) {
  std::string name;
  Tensor x = decodeOk(bytes(pb_f32_2x3_raw), &name);
  EXPECT_EQ(name, "x");
  EXPECT_EQ(x.dtype(), DType::Float32);
  EXPECT_EQ(x.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values<float>(x), (std::vector<float>{0, 1, 2, 3, 4, 5}));

  Tensor f = decodeOk(bytes(pb_f32_2x2_float_data), &name);
  EXPECT_EQ(name, "f");
  EXPECT_EQ(values<float>(f), (std::vector<float>{1, -2, 3.5, 4}));

  Tensor i64 = decodeOk(bytes(pb_i64_3_int64_data));
  EXPECT_EQ(i64.dtype(), DType::Int64);
  EXPECT_EQ(values<int64_t>(i64),
            (std::vector<int64_t>{-7, 0, int64_t(1) << 40}));

  Tensor i32 = decodeOk(bytes(pb_i32_3_int32_data));
  EXPECT_EQ(values<int32_t>(i32),
            (std::vector<int32_t>{-1, INT32_MAX, INT32_MIN}));

  Tensor i8 = decodeOk(bytes(pb_i8_2_int32_data));
  EXPECT_EQ(i8.dtype(), DType::Int8);
  EXPECT_EQ(values<int8_t>(i8), (std::vector<int8_t>{-128, 5}));

  Tensor b = decodeOk(bytes(pb_bool_3_int32_data));
  EXPECT_EQ(b.dtype(), DType::Bool);
  EXPECT_EQ(values<uint8_t>(b), (std::vector<uint8_t>{1, 0, 1}));

  Tensor h = decodeOk(bytes(pb_f16_2_int32_data));
  EXPECT_EQ(h.dtype(), DType::Float16);
  EXPECT_EQ(values<uint16_t>(h), (std::vector<uint16_t>{0x3c00, 0xc000}));

  Tensor g = decodeOk(bytes(pb_bf16_2_int32_data));
  EXPECT_EQ(g.dtype(), DType::BFloat16);
  EXPECT_EQ(values<uint16_t>(g), (std::vector<uint16_t>{0x3f80, 0xc000}));

  Tensor d = decodeOk(bytes(pb_f64_2_double_data));
  EXPECT_EQ(values<double>(d), (std::vector<double>{0.25, -1e300}));

  Tensor r = decodeOk(bytes(pb_i16_2x2_raw));
  EXPECT_EQ(values<int16_t>(r), (std::vector<int16_t>{1, -2, 3, -4}));

  Tensor s = decodeOk(bytes(pb_i64_scalar_raw), &name);
  EXPECT_EQ(name, "");
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(values<int64_t>(s), (std::vector<int64_t>{42}));

  Tensor e = decodeOk(bytes(pb_f32_0_raw));
  EXPECT_EQ(e.shape(), (std::vector<int64_t>{0}));

  EXPECT_EQ(values<uint8_t>(decodeOk(bytes(pb_bool_2_raw))),
            (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(values<uint8_t>(decodeOk(bytes(pb_u8_3_raw))),
            (std::vector<uint8_t>{1, 2, 255}));

  EXPECT_EQ(values<uint16_t>(decodeOk(bytes(pb_u16_raw))),
            (std::vector<uint16_t>{1, 65535}));
  EXPECT_EQ(values<uint16_t>(decodeOk(bytes(pb_u16_2_int32_data))),
            (std::vector<uint16_t>{7, 65535}));
  Tensor u32 = decodeOk(bytes(pb_u32_2_uint64_data));
  EXPECT_EQ(u32.dtype(), DType::UInt32);
  EXPECT_EQ(values<uint32_t>(u32), (std::vector<uint32_t>{0, UINT32_MAX}));
  Tensor u64 = decodeOk(bytes(pb_u64_2_uint64_data));
  EXPECT_EQ(u64.dtype(), DType::UInt64);
  EXPECT_EQ(values<uint64_t>(u64),
            (std::vector<uint64_t>{uint64_t(1) << 63, UINT64_MAX}));
}

TEST(TensorProto, EncodesTheBytesOnnxWrites) {
  const std::string cases[][2] = {
      {bytes(pb_f32_2x3_raw), "x"}, {bytes(pb_i64_scalar_raw), ""},
      {bytes(pb_f32_0_raw), "e"},   {bytes(pb_bool_2_raw), "bb"},
      {bytes(pb_u8_3_raw), "u"},    {bytes(pb_i16_2x2_raw), "r"}};
  for (const auto &c : cases) {
    Tensor t = decodeOk(c[0]);
    EXPECT_EQ(encodeTensorProto(t.dtype(), t.shape(), t.data(), c[1]), c[0])
        << c[1];
  }
}

TEST(TensorProto, RoundTripEveryDType) {
  TempDir dir;
  for (DType d : allDTypes())
    for (std::vector<int64_t> shape :
         {std::vector<int64_t>{}, {0}, {5}, {2, 3}, {2, 0, 2}}) {
      Tensor t = Tensor::zeros(d, shape);
      unsigned char *p = static_cast<unsigned char *>(t.data());
      for (size_t i = 0; i < t.byteSize(); ++i)
        p[i] = d == DType::Bool ? i % 2 : static_cast<unsigned char>(3 * i + 1);
      std::string name = std::string("t_") + dtypeName(d);
      std::string got;
      Tensor back = decodeOk(encodeTensorProto(d, shape, t.data(), name), &got);
      EXPECT_TRUE(back.equals(t)) << name << shapeToString(shape);
      EXPECT_EQ(got, name);
      std::string error;
      ASSERT_TRUE(writeTensorProto(dir / (name + ".pb"), t, error, name));
      ASSERT_TRUE(readTensorProto(dir / (name + ".pb"), back, error, &got))
          << error;
      EXPECT_TRUE(back.equals(t));
      ASSERT_TRUE(readTensorFile(dir / (name + ".pb"), back, error)) << error;
      EXPECT_TRUE(back.equals(t));
    }
}

TEST(TensorProto, UnpackedRepeatedFieldsAndUnknownFields) {
  // dims packed, float_data unpacked (wire type 5), plus doc_string (12) and
  // an unknown field 99 of each wire type, all skipped.
  std::string b = lengthDelimited(1, varint(2) + varint(1)) + dataType(1) +
                  tag(4, 5) + fixed32(floatBits(1.5f)) + tag(4, 5) +
                  fixed32(floatBits(-3.0f)) + lengthDelimited(12, "doc") +
                  tag(99, 0) + varint(300) + tag(99, 1) + fixed64(7) +
                  tag(99, 5) + fixed32(7) + lengthDelimited(99, "zz");
  Tensor t = decodeOk(b);
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(values<float>(t), (std::vector<float>{1.5f, -3.0f}));

  // int64_data as plain varints (negative: ten-byte two's complement).
  b = dims({3}) + dataType(7) + tag(7, 0) + varint(uint64_t(-5)) + tag(7, 0) +
      varint(9) + lengthDelimited(7, varint(11));
  EXPECT_EQ(values<int64_t>(decodeOk(b)), (std::vector<int64_t>{-5, 9, 11}));

  // int32_data unpacked with a sign-extended negative, for int16.
  b = dims({2}) + dataType(5) + tag(5, 0) + varint(uint64_t(int64_t(-300))) +
      tag(5, 0) + varint(300);
  EXPECT_EQ(values<int16_t>(decodeOk(b)), (std::vector<int16_t>{-300, 300}));

  // double_data unpacked (wire type 1).
  double v = 2.5;
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  b = dims({1}) + dataType(11) + tag(10, 1) + fixed64(bits);
  EXPECT_EQ(values<double>(decodeOk(b)), (std::vector<double>{2.5}));

  // Fields in any order; dims last.
  b = dataType(6) + lengthDelimited(5, varint(4) + varint(5)) + dims({2});
  EXPECT_EQ(values<int32_t>(decodeOk(b)), (std::vector<int32_t>{4, 5}));
  (void)asFloat;
}

TEST(TensorProto, Errors) {
  auto has = [](const std::string &error, const std::string &part) {
    return error.find(part) != std::string::npos;
  };
  std::string e;
  e = decodeError(bytes(pb_external));
  EXPECT_TRUE(has(e, "TensorProto 'w' uses external data")) << e;
  e = decodeError(dims({1}) + dataType(1) + tag(14, 0) + varint(1));
  EXPECT_TRUE(has(e, "external data")) << e;
  e = decodeError(bytes(pb_string));
  EXPECT_TRUE(has(e, "strings (string_data)")) << e;
  e = decodeError(bytes(pb_c64_raw));
  EXPECT_TRUE(has(e, "unsupported data_type COMPLEX64 (14)")) << e;
  e = decodeError(bytes(pb_u32_out_of_range));
  EXPECT_TRUE(has(e, "uint64_data[0] = 4294967296 is out of range for uint32"))
      << e;
  // A uint32 tensor's values are in uint64_data, not int32_data.
  e = decodeError(dims({1}) + dataType(12) + lengthDelimited(5, varint(1)));
  EXPECT_TRUE(has(e, "holds int32_data, expected raw_data or uint64_data"))
      << e;
  e = decodeError(dims({2}) + dataType(17));
  EXPECT_TRUE(has(e, "FLOAT8E4M3FN")) << e;
  e = decodeError(dims({2}));
  EXPECT_TRUE(has(e, "has no data_type")) << e;
  e = decodeError(dims({2, 2}) + dataType(1) + lengthDelimited(4, fixed32(0)));
  EXPECT_TRUE(has(e, "float_data has 1 elements, dims [2, 2] need 4")) << e;
  e = decodeError(dims({3}) + dataType(1) + lengthDelimited(9, "12345678"));
  EXPECT_TRUE(has(e, "raw_data has 8 bytes, dims [3] of float32 need 12")) << e;
  e = decodeError(dims({2}) + dataType(1));
  EXPECT_TRUE(has(e, "float_data has 0 elements")) << e;
  e = decodeError(dims({1}) + dataType(1) + lengthDelimited(9, "1234") +
                  lengthDelimited(4, fixed32(0)));
  EXPECT_TRUE(has(e, "both raw_data and float_data")) << e;
  e = decodeError(dims({1}) + dataType(7) + lengthDelimited(4, fixed32(0)));
  EXPECT_TRUE(has(e, "INT64 holds float_data, expected raw_data or int64_data"))
      << e;
  e = decodeError(dims({1}) + dataType(3) + lengthDelimited(5, varint(200)));
  EXPECT_TRUE(has(e, "int32_data[0] = 200 is out of range for int8")) << e;
  e = decodeError(dims({1}) + dataType(9) + lengthDelimited(5, varint(2)));
  EXPECT_TRUE(has(e, "out of range for bool")) << e;
  e = decodeError(dims({-1}) + dataType(1));
  EXPECT_TRUE(has(e, "invalid dims [-1]")) << e;
  e = decodeError(dims({INT64_MAX, 4}) + dataType(1));
  EXPECT_TRUE(has(e, "size overflow")) << e;
  // Wire-level damage.
  e = decodeError(dims({2}) + "\x90");
  EXPECT_TRUE(has(e, "invalid TensorProto: truncated varint at byte 2")) << e;
  e = decodeError(dims({1}) + dataType(1) + tag(9, 2) + varint(100) + "abc");
  EXPECT_TRUE(has(
      e, "truncated: length-delimited field at byte 4 needs 100 bytes, 3 left"))
      << e;
  e = decodeError(tag(2, 2) + varint(1) + "x");
  EXPECT_TRUE(has(e, "has wire type 2, expected 0")) << e;
  e = decodeError(tag(4, 0) + varint(1));
  EXPECT_TRUE(has(e, "field float_data has wire type 0")) << e;
  e = decodeError(tag(20, 3));
  EXPECT_TRUE(has(e, "unsupported wire type 3")) << e;
  e = decodeError(std::string("\x00", 1));
  EXPECT_TRUE(has(e, "field number 0")) << e;
  e = decodeError(dims({1}) + dataType(1) + tag(4, 5) + "ab");
  EXPECT_TRUE(has(e, "truncated fixed32")) << e;
  e = decodeError(std::string(11, '\xff'));
  EXPECT_TRUE(has(e, "varint")) << e;
  e = decodeError(lengthDelimited(4, "abc") + dataType(1));
  EXPECT_TRUE(has(e, "in packed float_data: truncated fixed32")) << e;

  TempDir dir;
  Tensor t;
  EXPECT_FALSE(readTensorProto(dir / "none.pb", t, e));
  EXPECT_EQ(e, "cannot open: No such file or directory");
  EXPECT_FALSE(readTensorProto(dir.path(), t, e));
  EXPECT_EQ(e, "cannot read: is a directory");
}
