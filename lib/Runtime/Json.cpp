//===- Json.cpp - a small strict JSON parser ------------------------------===//

#include "distopt/Runtime/Json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <iterator>

namespace distopt::runtime {

const JsonValue *JsonValue::get(std::string_view key) const {
  if (kind_ != Kind::Object)
    return nullptr;
  for (const auto &m : members_)
    if (m.first == key)
      return &m.second;
  return nullptr;
}

const char *JsonValue::kindName(Kind kind) {
  // In the order of Kind.
  static const char *const kNames[] = {"null",   "boolean", "number",
                                       "string", "array",   "object"};
  unsigned i = static_cast<unsigned>(kind);
  return i < std::size(kNames) ? kNames[i] : "?";
}

JsonValue JsonValue::makeBool(bool b) {
  JsonValue v;
  v.kind_ = Kind::Bool;
  v.bool_ = b;
  return v;
}
JsonValue JsonValue::makeInteger(int64_t i) {
  JsonValue v;
  v.kind_ = Kind::Number;
  v.isInteger_ = true;
  v.integer_ = i;
  v.number_ = static_cast<double>(i);
  return v;
}
JsonValue JsonValue::makeDouble(double d) {
  JsonValue v;
  v.kind_ = Kind::Number;
  v.number_ = d;
  return v;
}
JsonValue JsonValue::makeString(std::string s) {
  JsonValue v;
  v.kind_ = Kind::String;
  v.string_ = std::move(s);
  return v;
}
JsonValue JsonValue::makeArray(std::vector<JsonValue> elements) {
  JsonValue v;
  v.kind_ = Kind::Array;
  v.elements_ = std::move(elements);
  return v;
}
JsonValue
JsonValue::makeObject(std::vector<std::pair<std::string, JsonValue>> members) {
  JsonValue v;
  v.kind_ = Kind::Object;
  v.members_ = std::move(members);
  return v;
}

namespace {
void serializeString(const std::string &s, std::string &out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  out += '"';
}

void serializeValue(const JsonValue &v, std::string &out) {
  switch (v.kind()) {
  case JsonValue::Kind::Null:
    out += "null";
    break;
  case JsonValue::Kind::Bool:
    out += v.asBool() ? "true" : "false";
    break;
  case JsonValue::Kind::Number:
    if (v.isInteger()) {
      out += std::to_string(v.asInteger());
    } else if (!std::isfinite(v.asDouble())) {
      out += "null";
    } else {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.17g", v.asDouble());
      out += buf;
    }
    break;
  case JsonValue::Kind::String:
    serializeString(v.asString(), out);
    break;
  case JsonValue::Kind::Array: {
    out += '[';
    const std::vector<JsonValue> &elements = v.elements();
    for (size_t i = 0; i < elements.size(); ++i) {
      if (i)
        out += ", ";
      serializeValue(elements[i], out);
    }
    out += ']';
    break;
  }
  case JsonValue::Kind::Object: {
    out += '{';
    const auto &members = v.members();
    for (size_t i = 0; i < members.size(); ++i) {
      if (i)
        out += ", ";
      serializeString(members[i].first, out);
      out += ": ";
      serializeValue(members[i].second, out);
    }
    out += '}';
    break;
  }
  }
}
} // namespace

std::string jsonQuote(std::string_view s) {
  std::string out;
  serializeString(std::string(s), out);
  return out;
}

std::string jsonNumber(double v) {
  if (!std::isfinite(v))
    return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string JsonValue::serialize() const {
  std::string out;
  serializeValue(*this, out);
  return out;
}

class JsonParser {
public:
  explicit JsonParser(std::string_view text) : text(text) {}

  bool parseDocument(JsonValue &out, std::string &error) {
    skipSpace();
    if (!parseValue(out, 0))
      return report(error);
    skipSpace();
    if (pos != text.size()) {
      fail("unexpected text after the JSON value");
      return report(error);
    }
    return true;
  }

private:
  static constexpr int kMaxDepth = 512;
  std::string_view text;
  size_t pos = 0;
  size_t errorPos = 0;
  std::string message;

  bool fail(std::string what) { return failAt(pos, std::move(what)); }
  bool failAt(size_t at, std::string what) {
    errorPos = at;
    message = std::move(what);
    return false;
  }
  bool report(std::string &error) {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < errorPos && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    error = "line " + std::to_string(line) + ", column " +
            std::to_string(column) + ": " + message;
    return false;
  }

  std::string describeHere() const {
    if (pos >= text.size())
      return "end of input";
    unsigned char c = static_cast<unsigned char>(text[pos]);
    if (c >= 0x20 && c < 0x7f)
      return std::string("'") + static_cast<char>(c) + "'";
    char buf[16];
    std::snprintf(buf, sizeof(buf), "byte 0x%02x", c);
    return buf;
  }

  void skipSpace() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t' ||
                                 text[pos] == '\n' || text[pos] == '\r'))
      ++pos;
  }

  bool literal(const char *word, size_t n) {
    if (text.substr(pos, n) != std::string_view(word, n))
      return fail("invalid literal (expected '" + std::string(word, n) + "')");
    pos += n;
    return true;
  }

  bool parseValue(JsonValue &v, int depth) {
    if (depth > kMaxDepth)
      return fail("nesting deeper than " + std::to_string(kMaxDepth));
    if (pos >= text.size())
      return fail("expected a value, found end of input");
    char c = text[pos];
    switch (c) {
    case '{':
      return parseObject(v, depth);
    case '[':
      return parseArray(v, depth);
    case '"':
      v.kind_ = JsonValue::Kind::String;
      return parseString(v.string_);
    case 't':
      v = JsonValue::makeBool(true);
      return literal("true", 4);
    case 'f':
      v = JsonValue::makeBool(false);
      return literal("false", 5);
    case 'n':
      v = JsonValue();
      return literal("null", 4);
    default:
      if (c == '-' || (c >= '0' && c <= '9'))
        return parseNumber(v);
      return fail("expected a value, found " + describeHere());
    }
  }

  /// Steps past the '{' or '[' that opens an object or array; whether
  /// `close` follows at once (an empty one, consumed).
  bool openIsEmpty(char close) {
    ++pos;
    skipSpace();
    if (pos < text.size() && text[pos] == close) {
      ++pos;
      return true;
    }
    return false;
  }

  /// After a member of an object or an element of an array (`container`,
  /// which `close` ends): a ',' before another one (`more`), or `close`.
  bool afterItem(char close, const char *container, bool &more) {
    skipSpace();
    if (pos < text.size() && text[pos] == ',') {
      ++pos;
      skipSpace();
      if (pos < text.size() && text[pos] == close)
        return fail(std::string("trailing comma before '") + close + "'");
      more = true;
      return true;
    }
    if (pos < text.size() && text[pos] == close) {
      ++pos;
      more = false;
      return true;
    }
    return fail(std::string("expected ',' or '") + close + "' in " + container +
                ", found " + describeHere());
  }

  bool parseObject(JsonValue &v, int depth) {
    v.kind_ = JsonValue::Kind::Object;
    for (bool more = !openIsEmpty('}'); more;) {
      skipSpace();
      if (pos >= text.size() || text[pos] != '"')
        return fail("expected a string key, found " + describeHere());
      size_t keyPos = pos;
      std::string key;
      if (!parseString(key))
        return false;
      for (const auto &m : v.members_)
        if (m.first == key)
          return failAt(keyPos, "duplicate key \"" + key + "\"");
      skipSpace();
      if (pos >= text.size() || text[pos] != ':')
        return fail("expected ':' after key, found " + describeHere());
      ++pos;
      skipSpace();
      JsonValue member;
      if (!parseValue(member, depth + 1))
        return false;
      v.members_.emplace_back(std::move(key), std::move(member));
      if (!afterItem('}', "object", more))
        return false;
    }
    return true;
  }

  bool parseArray(JsonValue &v, int depth) {
    v.kind_ = JsonValue::Kind::Array;
    for (bool more = !openIsEmpty(']'); more;) {
      skipSpace();
      JsonValue element;
      if (!parseValue(element, depth + 1))
        return false;
      v.elements_.push_back(std::move(element));
      if (!afterItem(']', "array", more))
        return false;
    }
    return true;
  }

  bool hex4(uint32_t &cp) {
    if (text.size() - pos < 4)
      return fail("truncated \\u escape");
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      char h = text[pos + i];
      cp <<= 4;
      if (h >= '0' && h <= '9')
        cp |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f')
        cp |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        cp |= static_cast<uint32_t>(h - 'A' + 10);
      else
        return failAt(pos + i, "invalid hex digit in \\u escape");
    }
    pos += 4;
    return true;
  }

  static void appendUtf8(std::string &s, uint32_t cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xc0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xe0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      s += static_cast<char>(0xf0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  /// Length of the valid UTF-8 sequence at pos, or 0.
  size_t utf8Length() const {
    const unsigned char *p =
        reinterpret_cast<const unsigned char *>(text.data()) + pos;
    size_t left = text.size() - pos;
    unsigned char b = p[0];
    size_t n;
    uint32_t cp;
    if (b >= 0xc2 && b <= 0xdf) {
      n = 2;
      cp = b & 0x1f;
    } else if (b >= 0xe0 && b <= 0xef) {
      n = 3;
      cp = b & 0x0f;
    } else if (b >= 0xf0 && b <= 0xf4) {
      n = 4;
      cp = b & 0x07;
    } else {
      return 0;
    }
    if (left < n)
      return 0;
    for (size_t i = 1; i < n; ++i) {
      if ((p[i] & 0xc0) != 0x80)
        return 0;
      cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
      return 0;
    return n;
  }

  bool parseString(std::string &s) {
    size_t start = pos;
    ++pos; // '"'
    for (;;) {
      if (pos >= text.size())
        return failAt(start, "unterminated string");
      unsigned char c = static_cast<unsigned char>(text[pos]);
      if (c == '"') {
        ++pos;
        return true;
      }
      if (c < 0x20)
        return fail("unescaped control character in string");
      if (c == '\\') {
        ++pos;
        if (pos >= text.size())
          return failAt(start, "unterminated string");
        char e = text[pos++];
        switch (e) {
        case '"':
          s += '"';
          break;
        case '\\':
          s += '\\';
          break;
        case '/':
          s += '/';
          break;
        case 'b':
          s += '\b';
          break;
        case 'f':
          s += '\f';
          break;
        case 'n':
          s += '\n';
          break;
        case 'r':
          s += '\r';
          break;
        case 't':
          s += '\t';
          break;
        case 'u': {
          size_t escapePos = pos - 2;
          uint32_t cp;
          if (!hex4(cp))
            return false;
          if (cp >= 0xdc00 && cp <= 0xdfff)
            return failAt(escapePos, "unpaired low surrogate in \\u escape");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            uint32_t low;
            if (text.substr(pos, 2) != "\\u")
              return failAt(escapePos, "unpaired high surrogate in \\u escape");
            pos += 2;
            if (!hex4(low))
              return false;
            if (low < 0xdc00 || low > 0xdfff)
              return failAt(escapePos, "unpaired high surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          }
          appendUtf8(s, cp);
          break;
        }
        default:
          return failAt(pos - 2, std::string("invalid escape '\\") + e + "'");
        }
        continue;
      }
      if (c < 0x80) {
        s += static_cast<char>(c);
        ++pos;
        continue;
      }
      size_t n = utf8Length();
      if (!n)
        return fail("invalid UTF-8 in string");
      s.append(text.data() + pos, n);
      pos += n;
    }
  }

  bool parseNumber(JsonValue &v) {
    size_t start = pos;
    auto digit = [&] {
      return pos < text.size() && text[pos] >= '0' && text[pos] <= '9';
    };
    if (text[pos] == '-')
      ++pos;
    if (!digit())
      return fail("expected a digit");
    if (text[pos] == '0') {
      ++pos;
      if (digit())
        return failAt(start, "leading zeros are not allowed in numbers");
    } else {
      while (digit())
        ++pos;
    }
    bool integral = true;
    if (pos < text.size() && text[pos] == '.') {
      integral = false;
      ++pos;
      if (!digit())
        return fail("expected a digit after '.'");
      while (digit())
        ++pos;
    }
    if (pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
      integral = false;
      ++pos;
      if (pos < text.size() && (text[pos] == '+' || text[pos] == '-'))
        ++pos;
      if (!digit())
        return fail("expected a digit in the exponent");
      while (digit())
        ++pos;
    }
    const char *first = text.data() + start, *last = text.data() + pos;
    v.kind_ = JsonValue::Kind::Number;
    if (integral) {
      int64_t i;
      auto [p, ec] = std::from_chars(first, last, i);
      if (ec == std::errc() && p == last) {
        v.isInteger_ = true;
        v.integer_ = i;
        v.number_ = static_cast<double>(i);
        return true;
      }
    }
    double d;
    auto [p, ec] = std::from_chars(first, last, d);
    if (ec == std::errc::result_out_of_range)
      return failAt(start, "number out of range");
    if (ec != std::errc() || p != last)
      return failAt(start, "invalid number");
    v.number_ = d;
    return true;
  }
};

bool parseJson(std::string_view text, JsonValue &out, std::string &error) {
  JsonParser parser(text);
  JsonValue v;
  if (!parser.parseDocument(v, error))
    return false;
  out = std::move(v);
  return true;
}

} // namespace distopt::runtime
