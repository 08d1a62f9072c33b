//===- JsonTest.cpp - strict JSON parser ----------------------------------===//

#include "distopt/Runtime/Json.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace distopt::runtime;

namespace {
JsonValue parseOk(std::string_view text) {
  JsonValue v;
  std::string error;
  EXPECT_TRUE(parseJson(text, v, error)) << error << " in: " << text;
  return v;
}
std::string parseError(std::string_view text) {
  JsonValue v;
  std::string error;
  EXPECT_FALSE(parseJson(text, v, error)) << "parsed: " << text;
  return error;
}
} // namespace

TEST(Json, Values) {
  EXPECT_TRUE(parseOk("null").isNull());
  EXPECT_TRUE(parseOk(" true ").asBool());
  EXPECT_FALSE(parseOk("false").asBool());
  JsonValue n = parseOk("-12");
  EXPECT_TRUE(n.isInteger());
  EXPECT_EQ(n.asInteger(), -12);
  JsonValue big = parseOk("9223372036854775807");
  EXPECT_TRUE(big.isInteger());
  EXPECT_EQ(big.asInteger(), INT64_MAX);
  JsonValue huge = parseOk("92233720368547758070");
  EXPECT_TRUE(huge.isNumber());
  EXPECT_FALSE(huge.isInteger());
  EXPECT_DOUBLE_EQ(huge.asDouble(), 92233720368547758070.0);
  JsonValue d = parseOk("1.5e3");
  EXPECT_FALSE(d.isInteger());
  EXPECT_DOUBLE_EQ(d.asDouble(), 1500.0);
  EXPECT_DOUBLE_EQ(parseOk("-0.25").asDouble(), -0.25);
  EXPECT_DOUBLE_EQ(parseOk("0E+2").asDouble(), 0.0);
  EXPECT_FALSE(parseOk("2.0").isInteger());

  JsonValue s = parseOk(R"("a\"b\\c\/d\b\f\n\r\t\u00e9\u20ac\ud83d\ude00")");
  EXPECT_EQ(s.asString(),
            "a\"b\\c/d\b\f\n\r\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  EXPECT_EQ(parseOk("\"caf\xc3\xa9\"").asString(), "caf\xc3\xa9");

  JsonValue a = parseOk("[1, [2, []], {}]");
  ASSERT_TRUE(a.isArray());
  ASSERT_EQ(a.elements().size(), 3u);
  EXPECT_EQ(a.elements()[1].elements()[0].asInteger(), 2);
  EXPECT_TRUE(a.elements()[2].isObject());

  JsonValue o = parseOk("{\"b\": 1, \"a\": {\"c\": null}}");
  ASSERT_TRUE(o.isObject());
  EXPECT_EQ(o.members()[0].first, "b"); // Document order kept.
  EXPECT_EQ(o.get("b")->asInteger(), 1);
  EXPECT_TRUE(o.get("a")->get("c")->isNull());
  EXPECT_EQ(o.get("zz"), nullptr);
  EXPECT_EQ(a.get("b"), nullptr);
}

TEST(Json, SerializeRoundTrip) {
  std::string text =
      R"({"s": "q\"\\\n\u0001", "i": -3, "d": 0.1, "a": [true, false, null], "o": {}})";
  JsonValue v = parseOk(text);
  std::string out = v.serialize();
  EXPECT_EQ(
      out,
      "{\"s\": \"q\\\"\\\\\\n\\u0001\", \"i\": -3, \"d\": 0.10000000000000001, "
      "\"a\": [true, false, null], \"o\": {}}");
  JsonValue again = parseOk(out);
  EXPECT_EQ(again.serialize(), out);
  EXPECT_DOUBLE_EQ(again.get("d")->asDouble(), 0.1);
}

TEST(Json, ErrorsHaveLineAndColumn) {
  EXPECT_EQ(parseError(""),
            "line 1, column 1: expected a value, found end of input");
  EXPECT_EQ(parseError("{\"a\": 1,\n  \"b\": }"),
            "line 2, column 8: expected a value, found '}'");
  EXPECT_EQ(parseError("{\"a\": 1 \"b\": 2}"),
            "line 1, column 9: expected ',' or '}' in object, found '\"'");
  EXPECT_EQ(parseError("[1, 2,]"),
            "line 1, column 7: trailing comma before ']'");
  EXPECT_EQ(parseError("{\"a\": 1,}"),
            "line 1, column 9: trailing comma before '}'");
  EXPECT_EQ(parseError("[1 2]"),
            "line 1, column 4: expected ',' or ']' in array, found '2'");
  EXPECT_EQ(parseError("{a: 1}"),
            "line 1, column 2: expected a string key, found 'a'");
  EXPECT_EQ(parseError("{\"a\" 1}"),
            "line 1, column 6: expected ':' after key, found '1'");
  EXPECT_EQ(parseError("{\"a\": 1, \"a\": 2}"),
            "line 1, column 10: duplicate key \"a\"");
  EXPECT_EQ(parseError("\n\n   \"abc"),
            "line 3, column 4: unterminated string");
  EXPECT_EQ(parseError("\"a\nb\""),
            "line 1, column 3: unescaped control character in string");
  EXPECT_EQ(parseError("\"\\x\""), "line 1, column 2: invalid escape '\\x'");
  EXPECT_EQ(parseError("\"\\u12G4\""),
            "line 1, column 6: invalid hex digit in \\u escape");
  EXPECT_EQ(parseError("\"\\ud800\""),
            "line 1, column 2: unpaired high surrogate in \\u escape");
  EXPECT_EQ(parseError("\"\\udc00\""),
            "line 1, column 2: unpaired low surrogate in \\u escape");
  EXPECT_EQ(parseError("\"\xff\""),
            "line 1, column 2: invalid UTF-8 in string");
  EXPECT_EQ(parseError("\"\xc3\""),
            "line 1, column 2: invalid UTF-8 in string");
  EXPECT_EQ(parseError("01"),
            "line 1, column 1: leading zeros are not allowed in numbers");
  EXPECT_EQ(parseError("-"), "line 1, column 2: expected a digit");
  EXPECT_EQ(parseError("1."), "line 1, column 3: expected a digit after '.'");
  EXPECT_EQ(parseError("1e"),
            "line 1, column 3: expected a digit in the exponent");
  EXPECT_EQ(parseError("1e999"), "line 1, column 1: number out of range");
  EXPECT_EQ(parseError("NaN"), "line 1, column 1: expected a value, found 'N'");
  EXPECT_EQ(parseError("tru"),
            "line 1, column 1: invalid literal (expected 'true')");
  EXPECT_EQ(parseError("nul"),
            "line 1, column 1: invalid literal (expected 'null')");
  EXPECT_EQ(parseError("{} {}"),
            "line 1, column 4: unexpected text after the JSON value");
  EXPECT_EQ(parseError("// c\n{}"),
            "line 1, column 1: expected a value, found '/'");
  EXPECT_EQ(parseError("\x01"),
            "line 1, column 1: expected a value, found byte 0x01");
  std::string deep(600, '[');
  EXPECT_EQ(parseError(deep), "line 1, column 514: nesting deeper than 512");
}
