//===- NpyTest.cpp - .npy reader and writer -------------------------------===//

#include "distopt/Runtime/Tensor.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace distopt::runtime;
using namespace distopt::runtime::test;

namespace {
#include "Fixtures.inc"

Tensor decodeOk(const std::string &bytes) {
  return decodedBy(decodeNpy, bytes);
}

std::string decodeError(const std::string &bytes) {
  return refusalBy(decodeNpy, bytes);
}

/// A tensor of `dtype` with distinct, valid bytes.
Tensor pattern(DType dtype, std::vector<int64_t> shape) {
  Tensor t = Tensor::zeros(dtype, std::move(shape));
  unsigned char *p = static_cast<unsigned char *>(t.data());
  for (size_t i = 0; i < t.byteSize(); ++i)
    p[i] = dtype == DType::Bool ? (i % 3 == 0)
                                : static_cast<unsigned char>(i * 7 + 1);
  return t;
}
} // namespace

TEST(Npy, DecodesFilesWrittenByNumPy) {
  Tensor f32 = decodeOk(bytes(npy_f32_2x3));
  EXPECT_EQ(f32.dtype(), DType::Float32);
  EXPECT_EQ(f32.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values<float>(f32), (std::vector<float>{0, 1, 2, 3, 4, 5}));

  Tensor f64 = decodeOk(bytes(npy_f64_3));
  EXPECT_EQ(values<double>(f64), (std::vector<double>{0.5, -1.25, 1e300}));

  Tensor f16 = decodeOk(bytes(npy_f16_2x2));
  EXPECT_EQ(f16.dtype(), DType::Float16);
  EXPECT_EQ(values<uint16_t>(f16),
            (std::vector<uint16_t>{0x3c00, 0xc000, 0x3800, 0x7bff}));

  Tensor bf16 = decodeOk(bytes(npy_bf16_3));
  EXPECT_EQ(bf16.dtype(), DType::BFloat16);
  EXPECT_EQ(values<uint16_t>(bf16),
            (std::vector<uint16_t>{0x3f80, 0xc000, 0x3f00}));

  EXPECT_EQ(values<int8_t>(decodeOk(bytes(npy_i8_4))),
            (std::vector<int8_t>{-128, -1, 0, 127}));
  EXPECT_EQ(values<int16_t>(decodeOk(bytes(npy_i16_3))),
            (std::vector<int16_t>{-32768, 7, 32767}));
  EXPECT_EQ(values<int32_t>(decodeOk(bytes(npy_i32_2x2))),
            (std::vector<int32_t>{-5, 6, INT32_MAX, INT32_MIN}));
  EXPECT_EQ(
      values<int64_t>(decodeOk(bytes(npy_i64_2))),
      (std::vector<int64_t>{-(int64_t(1) << 62), (int64_t(1) << 40) + 3}));
  EXPECT_EQ(values<uint8_t>(decodeOk(bytes(npy_u8_3))),
            (std::vector<uint8_t>{0, 200, 255}));
  EXPECT_EQ(values<uint16_t>(decodeOk(bytes(npy_u16_2))),
            (std::vector<uint16_t>{1, 65535}));
  EXPECT_EQ(values<uint32_t>(decodeOk(bytes(npy_u32_2))),
            (std::vector<uint32_t>{0, UINT32_MAX}));
  Tensor u64 = decodeOk(bytes(npy_u64_2));
  EXPECT_EQ(u64.dtype(), DType::UInt64);
  EXPECT_EQ(values<uint64_t>(u64),
            (std::vector<uint64_t>{uint64_t(1) << 63, UINT64_MAX}));

  Tensor b = decodeOk(bytes(npy_bool_2x2));
  EXPECT_EQ(b.dtype(), DType::Bool);
  EXPECT_EQ(values<uint8_t>(b), (std::vector<uint8_t>{1, 0, 0, 1}));

  Tensor scalar = decodeOk(bytes(npy_f32_scalar));
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(values<float>(scalar), (std::vector<float>{3.5f}));

  Tensor empty = decodeOk(bytes(npy_f32_0x3));
  EXPECT_EQ(empty.shape(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(empty.numElements(), 0);

  Tensor wide = decodeOk(bytes(npy_i8_12345x0));
  EXPECT_EQ(wide.shape(), (std::vector<int64_t>{12345, 0}));
}

TEST(Npy, FortranOrderIsConvertedToCOrder) {
  Tensor t = decodeOk(bytes(npy_f32_fortran_2x3));
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values<float>(t), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  Tensor t3 = decodeOk(bytes(npy_f32_fortran_2x3x4));
  EXPECT_EQ(t3.shape(), (std::vector<int64_t>{2, 3, 4}));
  std::vector<float> expected(24);
  for (int i = 0; i < 24; ++i)
    expected[i] = static_cast<float>(i);
  EXPECT_EQ(values<float>(t3), expected);
}

TEST(Npy, BigEndianIsSwapped) {
  Tensor t = decodeOk(bytes(npy_i32_bigendian_2x2));
  EXPECT_EQ(t.dtype(), DType::Int32);
  EXPECT_EQ(values<int32_t>(t), (std::vector<int32_t>{1, -2, 3, 70000}));
}

TEST(Npy, Versions2And3) {
  for (std::string b : {bytes(npy_f32_v2_2x3), bytes(npy_f32_v3_2x3)}) {
    Tensor t = decodeOk(b);
    EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(values<float>(t), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  }
}

TEST(Npy, EncodesTheBytesNumPyWrites) {
  struct Case {
    std::string expected;
  } cases[] = {
      {bytes(npy_f32_2x3)},   {bytes(npy_f64_3)},      {bytes(npy_f16_2x2)},
      {bytes(npy_bf16_3)},    {bytes(npy_i8_4)},       {bytes(npy_i16_3)},
      {bytes(npy_i32_2x2)},   {bytes(npy_i64_2)},      {bytes(npy_u8_3)},
      {bytes(npy_bool_2x2)},  {bytes(npy_f32_scalar)}, {bytes(npy_f32_0x3)},
      {bytes(npy_i8_12345x0)}};
  for (const Case &c : cases) {
    Tensor t = decodeOk(c.expected);
    std::string encoded = encodeNpy(t.dtype(), t.shape(), t.data());
    EXPECT_EQ(encoded, c.expected)
        << dtypeName(t.dtype()) << " " << shapeToString(t.shape());
    EXPECT_EQ(encodeNpyHeader(t.dtype(), t.shape()).size() % 64, 0u);
  }
}

TEST(Npy, RoundTripEveryDType) {
  std::vector<std::vector<int64_t>> shapes = {{},     {0},       {7},
                                              {2, 3}, {2, 0, 4}, {1, 2, 3, 2}};
  for (DType d : allDTypes())
    for (const auto &shape : shapes) {
      Tensor t = pattern(d, shape);
      std::string encoded = encodeNpy(d, t.shape(), t.data());
      Tensor back = decodeOk(encoded);
      EXPECT_TRUE(back.equals(t)) << dtypeName(d) << shapeToString(shape);
    }
}

TEST(Npy, FileRoundTripIsAtomic) {
  TempDir dir;
  for (DType d : allDTypes()) {
    Tensor t = pattern(d, {3, 4});
    std::string path = dir / (std::string(dtypeName(d)) + ".npy");
    std::string error;
    ASSERT_TRUE(writeNpy(path, t, error)) << error;
    Tensor back;
    ASSERT_TRUE(readNpy(path, back, error)) << error;
    EXPECT_TRUE(back.equals(t)) << dtypeName(d);
    ASSERT_TRUE(readTensorFile(path, back, error)) << error;
    EXPECT_TRUE(back.equals(t));
  }
  // Overwrite in place; no temporaries left behind.
  std::string error;
  Tensor one = Tensor::zeros(DType::Int64, {});
  ASSERT_TRUE(writeNpy(dir / "int64.npy", one, error)) << error;
  Tensor back;
  ASSERT_TRUE(readNpy(dir / "int64.npy", back, error));
  EXPECT_EQ(back.rank(), 0);
  for (const std::string &name : TempDir::list(dir.path()))
    EXPECT_EQ(name.find(".tmp."), std::string::npos) << name;
  // Unwritable destination: error names the temporary; nothing left.
  EXPECT_FALSE(writeNpy(dir / "missing-dir/x.npy", one, error));
  EXPECT_NE(error.find("cannot create"), std::string::npos) << error;
}

TEST(Npy, LargeHeaderUsesVersion2) {
  // A rank-30000 shape makes the header exceed 65535 bytes.
  std::vector<int64_t> shape(30000, 1);
  std::string header = encodeNpyHeader(DType::Int8, shape);
  EXPECT_EQ(header[6], 2);
  EXPECT_EQ(header.size() % 64, 0u);
  int8_t v = 5;
  Tensor t = decodeOk(encodeNpy(DType::Int8, shape, &v));
  EXPECT_EQ(t.rank(), 30000);
  EXPECT_EQ(t.dataAs<int8_t>()[0], 5);
}

TEST(Npy, ReadsFromFilesWithTheSameChecks) {
  TempDir dir;
  writeFile(dir / "a.npy", bytes(npy_f32_fortran_2x3));
  Tensor t;
  std::string error;
  ASSERT_TRUE(readNpy(dir / "a.npy", t, error)) << error;
  EXPECT_EQ(values<float>(t), (std::vector<float>{0, 1, 2, 3, 4, 5}));

  std::string full = bytes(npy_f32_2x3);
  writeFile(dir / "short.npy", full.substr(0, full.size() - 3));
  EXPECT_FALSE(readNpy(dir / "short.npy", t, error));
  EXPECT_NE(error.find("truncated .npy file"), std::string::npos) << error;
  EXPECT_NE(error.find("needs 24 data bytes, file has 21"), std::string::npos)
      << error;

  writeFile(dir / "long.npy", full + "xyz");
  EXPECT_FALSE(readNpy(dir / "long.npy", t, error));
  EXPECT_NE(error.find("3 unexpected bytes"), std::string::npos) << error;

  writeFile(dir / "hdr.npy", full.substr(0, 40));
  EXPECT_FALSE(readNpy(dir / "hdr.npy", t, error));
  EXPECT_EQ(error, "truncated .npy header");

  writeFile(dir / "tiny.npy", full.substr(0, 4));
  EXPECT_FALSE(readNpy(dir / "tiny.npy", t, error));
  EXPECT_EQ(error, "truncated .npy header");

  writeFile(dir / "text.npy", std::string("hello world, not numpy"));
  EXPECT_FALSE(readNpy(dir / "text.npy", t, error));
  EXPECT_NE(error.find("not a .npy file"), std::string::npos) << error;

  EXPECT_FALSE(readNpy(dir / "absent.npy", t, error));
  EXPECT_EQ(error, "cannot open: No such file or directory");
  EXPECT_FALSE(readNpy(dir.path(), t, error));
  EXPECT_EQ(error, "cannot read: is a directory");
}

TEST(Npy, RejectsBadHeaders) {
  std::string good = bytes(npy_f32_2x3);
  EXPECT_NE(decodeError("\x93NUMPZ\x01\x00").find("not a .npy file"),
            std::string::npos);
  std::string v9 = good;
  v9[6] = 9;
  EXPECT_NE(decodeError(v9).find("unsupported .npy format version 9.0"),
            std::string::npos);
  EXPECT_EQ(decodeError(good.substr(0, 9)), "truncated .npy header");
  EXPECT_EQ(decodeError(good.substr(0, 30)), "truncated .npy header");

  auto withHeader = [](const std::string &dict, size_t dataBytes = 0) {
    std::string h = dict;
    while ((10 + h.size() + 1) % 64)
      h += ' ';
    h += '\n';
    std::string s("\x93NUMPY\x01\x00", 8);
    s += static_cast<char>(h.size() & 0xff);
    s += static_cast<char>(h.size() >> 8);
    return s + h + std::string(dataBytes, '\0');
  };
  EXPECT_NE(decodeError(bytes(npy_c64_1)).find("'<c8'"), std::string::npos);
  EXPECT_NE(decodeError(bytes(npy_structured_1)).find("structured"),
            std::string::npos);
  // Headers, with the data bytes after them, and (a part of) their error.
  const struct {
    const char *dict;
    size_t dataBytes;
    const char *error;
  } headers[] = {
      {"{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16,
       "unsupported .npy dtype '<c8'"},
      {"{'descr': '<f4', 'shape': (2,), }", 8, "missing key 'fortran_order'"},
      {"{'fortran_order': False, 'shape': (), }", 0, "missing key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': False, }", 0, "missing key 'shape'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", 0,
       "non-negative integer"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", 8,
       "'fortran_order' is not True/False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': 2, }", 8,
       "'shape' is not a tuple"},
      {"{'descr': '<f4' 'fortran_order': False}", 0,
       "malformed .npy header (expected ',' or '}'"},
      {"['descr']", 0, "expected '{'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } junk", 0,
       "unexpected text after the dictionary"},
      {"{'descr': '<f4', 'fortran_order': False, "
       "'shape': (99999999999999999999,), }",
       0, "integer too large"},
      {"{'descr': '<f4', 'fortran_order': False, "
       "'shape': (4611686018427387904, 4), }",
       0, "size overflow"},
  };
  for (const auto &h : headers) {
    std::string error = decodeError(withHeader(h.dict, h.dataBytes));
    EXPECT_NE(error.find(h.error), std::string::npos) << error;
  }
  // Truncated and trailing data.
  EXPECT_NE(decodeError(good.substr(0, good.size() - 1))
                .find("needs 24 data bytes, file has 23"),
            std::string::npos);
  EXPECT_NE(decodeError(good + "!").find("1 unexpected bytes"),
            std::string::npos);
  // Extra keys and Python 2 spellings are accepted.
  Tensor t = decodeOk(withHeader("{\"descr\": \"<i8\", \"fortran_order\": "
                                 "False, \"shape\": (1L,), 'extra': None}",
                                 8));
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{1}));
  EXPECT_EQ(t.dtype(), DType::Int64);
}

TEST(TensorFile, FormatByExtensionThenContent) {
  TempDir dir;
  writeFile(dir / "x.NPY", bytes(npy_f32_2x3));
  writeFile(dir / "x.bin", bytes(npy_f32_2x3));
  writeFile(dir / "y.data", bytes(pb_f32_2x3_raw));
  writeFile(dir / "z.pb", bytes(npy_f32_2x3));
  TensorFileFormat f;
  std::string error;
  ASSERT_TRUE(detectTensorFileFormat(dir / "x.NPY", f, error));
  EXPECT_EQ(f, TensorFileFormat::Npy);
  ASSERT_TRUE(detectTensorFileFormat(dir / "x.bin", f, error));
  EXPECT_EQ(f, TensorFileFormat::Npy);
  ASSERT_TRUE(detectTensorFileFormat(dir / "y.data", f, error));
  EXPECT_EQ(f, TensorFileFormat::TensorProto);
  ASSERT_TRUE(detectTensorFileFormat(dir / "z.pb", f, error));
  EXPECT_EQ(f, TensorFileFormat::TensorProto);
  EXPECT_FALSE(detectTensorFileFormat(dir / "nothing", f, error));

  Tensor a, b;
  ASSERT_TRUE(readTensorFile(dir / "x.bin", a, error)) << error;
  ASSERT_TRUE(readTensorFile(dir / "y.data", b, error)) << error;
  EXPECT_TRUE(a.equals(b));
  // A .pb that is really a .npy: decoded as a TensorProto, which fails.
  EXPECT_FALSE(readTensorFile(dir / "z.pb", a, error));
  EXPECT_NE(error.find("TensorProto"), std::string::npos) << error;
}
