//===- Json.h - a small strict JSON parser and writer ------------*- C++ -*-===//
//
// RFC 8259 JSON for the runtime's manifests, checkpoints and logs: no comments, no trailing
// commas, no NaN/Infinity, no duplicate object keys. Syntax errors report
// "line L, column C: what" (1-based; columns count bytes).
//
//===----------------------------------------------------------------------===//
#ifndef DISTOPT_RUNTIME_JSON_H
#define DISTOPT_RUNTIME_JSON_H

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace distopt::runtime {

class JsonValue {
public:
  enum class Kind { Null, Bool, Number, String, Array, Object };

  Kind kind() const { return kind_; }
  bool isNull() const { return kind_ == Kind::Null; }
  bool isBool() const { return kind_ == Kind::Bool; }
  bool isNumber() const { return kind_ == Kind::Number; }
  bool isString() const { return kind_ == Kind::String; }
  bool isArray() const { return kind_ == Kind::Array; }
  bool isObject() const { return kind_ == Kind::Object; }
  /// A number written without fraction or exponent that fits in int64.
  bool isInteger() const { return kind_ == Kind::Number && isInteger_; }

  bool asBool() const { return bool_; }
  double asDouble() const { return number_; }
  int64_t asInteger() const { return integer_; }
  const std::string &asString() const { return string_; }
  const std::vector<JsonValue> &elements() const { return elements_; }
  /// Members in document order.
  const std::vector<std::pair<std::string, JsonValue>> &members() const {
    return members_;
  }
  /// The member named `key`, or null when absent (or not an object).
  const JsonValue *get(std::string_view key) const;

  /// "null", "boolean", "number", "string", "array", "object".
  static const char *kindName(Kind kind);

  static JsonValue makeNull() { return JsonValue(); }
  static JsonValue makeBool(bool b);
  static JsonValue makeInteger(int64_t i);
  static JsonValue makeDouble(double d);
  static JsonValue makeString(std::string s);
  static JsonValue makeArray(std::vector<JsonValue> elements);
  static JsonValue
  makeObject(std::vector<std::pair<std::string, JsonValue>> members);

  /// Compact serialization (strings escaped; integers exactly; doubles with
  /// 17 significant digits).
  std::string serialize() const;

private:
  friend class JsonParser;
  Kind kind_ = Kind::Null;
  bool bool_ = false;
  bool isInteger_ = false;
  double number_ = 0;
  int64_t integer_ = 0;
  std::string string_;
  std::vector<JsonValue> elements_;
  std::vector<std::pair<std::string, JsonValue>> members_;
};

/// `s` as a JSON string literal: quoted, with `"`, `\` and control
/// characters escaped.
std::string jsonQuote(std::string_view s);

/// `v` as a JSON number with 9 significant digits (a float round-trips);
/// NaN and the infinities, which JSON cannot hold, as null.
std::string jsonNumber(double v);

/// Parses `text` as one JSON value. On failure returns false and sets
/// `error` to "line L, column C: <what>".
bool parseJson(std::string_view text, JsonValue &out, std::string &error);

} // namespace distopt::runtime

#endif // DISTOPT_RUNTIME_JSON_H
