//===- TensorTest.cpp - dtypes and host tensors ---------------------------===//

#include "distopt/Runtime/Tensor.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace distopt::runtime;

TEST(DType, NamesSizesAndOnnxTypes) {
  struct Row {
    DType dtype;
    const char *name;
    size_t size;
    int32_t onnx;
    const char *npy;
  } rows[] = {{DType::Float32, "float32", 4, 1, "<f4"},
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
              {DType::UInt64, "uint64", 8, 13, "<u8"}};
  ASSERT_EQ(allDTypes().size(), sizeof(rows) / sizeof(rows[0]));
  for (const Row &r : rows) {
    EXPECT_STREQ(dtypeName(r.dtype), r.name);
    EXPECT_EQ(dtypeSize(r.dtype), r.size) << r.name;
    EXPECT_EQ(onnxDataType(r.dtype), r.onnx) << r.name;
    EXPECT_STREQ(npyDescr(r.dtype), r.npy);
    DType parsed;
    ASSERT_TRUE(parseDType(r.name, parsed));
    EXPECT_EQ(parsed, r.dtype);
    ASSERT_TRUE(dtypeFromOnnx(r.onnx, parsed));
    EXPECT_EQ(parsed, r.dtype);
  }
  DType d;
  EXPECT_FALSE(parseDType("float", d));
  EXPECT_FALSE(parseDType("uint128", d));
  EXPECT_FALSE(parseDType("", d));
  EXPECT_FALSE(dtypeFromOnnx(14, d)); // COMPLEX64
  EXPECT_FALSE(dtypeFromOnnx(8, d)); // STRING
  EXPECT_FALSE(dtypeFromOnnx(0, d)); // UNDEFINED
  EXPECT_EQ(onnxDataTypeName(4), "UINT16");
  EXPECT_EQ(onnxDataTypeName(16), "BFLOAT16");
  EXPECT_EQ(onnxDataTypeName(999), "<999>");
}

TEST(Tensor, ShapesAndCounts) {
  EXPECT_EQ(shapeToString({}), "[]");
  EXPECT_EQ(shapeToString({2, 16}), "[2, 16]");
  int64_t n = -1;
  EXPECT_TRUE(checkedNumElements({}, 4, n));
  EXPECT_EQ(n, 1);
  EXPECT_TRUE(checkedNumElements({2, 0, 5}, 4, n));
  EXPECT_EQ(n, 0);
  EXPECT_TRUE(checkedNumElements({2, 3, 4}, 8, n));
  EXPECT_EQ(n, 24);
  EXPECT_FALSE(checkedNumElements({2, -1}, 4, n));
  EXPECT_FALSE(checkedNumElements({INT64_MAX, 2}, 1, n));
  EXPECT_FALSE(checkedNumElements({INT64_MAX / 2}, 4, n));
}

TEST(Tensor, CreateIsZeroedAndAligned) {
  for (DType d : allDTypes()) {
    Tensor t = Tensor::zeros(d, {3, 5});
    ASSERT_TRUE(t.valid());
    EXPECT_EQ(t.dtype(), d);
    EXPECT_EQ(t.numElements(), 15);
    EXPECT_EQ(t.byteSize(), 15 * dtypeSize(d));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % kBufferAlignment, 0u);
    const unsigned char *p = static_cast<const unsigned char *>(t.data());
    for (size_t i = 0; i < t.byteSize(); ++i)
      ASSERT_EQ(p[i], 0);
  }
  Tensor scalar = Tensor::zeros(DType::Int64, {});
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.numElements(), 1);
  Tensor empty = Tensor::zeros(DType::Float32, {0, 4});
  EXPECT_EQ(empty.numElements(), 0);
  EXPECT_NE(empty.data(), nullptr);

  Tensor bad;
  std::string error;
  EXPECT_FALSE(Tensor::create(DType::Float32, {2, -3}, bad, error));
  EXPECT_NE(error.find("[2, -3]"), std::string::npos) << error;
  EXPECT_FALSE(Tensor::create(DType::Float32, {INT64_MAX, 4}, bad, error));
  EXPECT_FALSE(bad.valid());
}

TEST(Tensor, FromBytesCloneEquals) {
  float v[] = {1, 2, 3, 4};
  Tensor a = Tensor::fromBytes(DType::Float32, {2, 2}, v, sizeof(v));
  EXPECT_EQ(a.dataAs<float>()[3], 4.0f);
  Tensor b = a.clone();
  EXPECT_TRUE(a.equals(b));
  EXPECT_NE(a.data(), b.data());
  b.dataAs<float>()[0] = 9;
  EXPECT_FALSE(a.equals(b));
  Tensor c = Tensor::fromBytes(DType::Int32, {2, 2}, v, sizeof(v));
  EXPECT_FALSE(a.equals(c)); // Same bytes, other dtype.
  Tensor d = Tensor::fromBytes(DType::Float32, {4}, v, sizeof(v));
  EXPECT_FALSE(a.equals(d)); // Same bytes, other shape.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(Tensor::fromBytes(DType::Float32, {3}, v, sizeof(v)), "12");
}

TEST(Tensor, AlignedAlloc) {
  void *p = alignedAlloc(0, true);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  AlignedFree()(p);
  p = alignedAlloc(100, true);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(static_cast<unsigned char *>(p)[99], 0);
  AlignedFree()(p);
}
