//===- Npy.cpp - NumPy .npy reader and writer -----------------------------===//
//
// Format: "\x93NUMPY", major, minor, header length (uint16 LE for 1.0,
// uint32 LE for 2.0/3.0), then a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with
// spaces and '\n', then the raw data.
//
//===----------------------------------------------------------------------===//

#include "distopt/Runtime/Tensor.h"

#include "FileUtil.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace distopt::runtime {

namespace {

constexpr size_t kMaxHeaderLength = 1 << 20;
constexpr char kMagic[] = "\x93NUMPY";

/// Parsed prefix: header starts at `prefixLength`, is `headerLength` long.
bool parseNpyPrefix(const unsigned char *p, size_t n, size_t &prefixLength,
                    size_t &headerLength, std::string &error) {
  if (n < 8 || std::memcmp(p, kMagic, 6) != 0) {
    error = "not a .npy file (missing \\x93NUMPY magic)";
    return false;
  }
  unsigned major = p[6], minor = p[7];
  if (major == 1) {
    if (n < 10) {
      error = "truncated .npy header";
      return false;
    }
    prefixLength = 10;
    headerLength = size_t(p[8]) | (size_t(p[9]) << 8);
  } else if (major == 2 || major == 3) {
    if (n < 12) {
      error = "truncated .npy header";
      return false;
    }
    prefixLength = 12;
    headerLength = size_t(p[8]) | (size_t(p[9]) << 8) | (size_t(p[10]) << 16) |
                   (size_t(p[11]) << 24);
  } else {
    error = "unsupported .npy format version " + std::to_string(major) + "." +
            std::to_string(minor) + " (supported: 1.0, 2.0, 3.0)";
    return false;
  }
  if (headerLength > kMaxHeaderLength) {
    error = ".npy header too long (" + std::to_string(headerLength) + " bytes)";
    return false;
  }
  return true;
}

/// A parsed Python literal from the header.
struct PyValue {
  enum Kind { Str, Bool, None, Int, Tuple } kind = None;
  std::string str;
  bool boolean = false;
  int64_t integer = 0;
  bool isList = false;
  std::vector<PyValue> items;
};

class HeaderParser {
public:
  explicit HeaderParser(std::string_view text) : text(text) {}

  bool parseDict(std::vector<std::pair<std::string, PyValue>> &entries,
                 std::string &error) {
    skipSpace();
    if (!consume('{'))
      return fail("expected '{'", error);
    for (;;) {
      skipSpace();
      if (consume('}'))
        break;
      PyValue key;
      if (!parseValue(key, error, 0))
        return false;
      if (key.kind != PyValue::Str)
        return fail("dictionary key is not a string", error);
      skipSpace();
      if (!consume(':'))
        return fail("expected ':'", error);
      PyValue value;
      if (!parseValue(value, error, 0))
        return false;
      entries.emplace_back(key.str, std::move(value));
      skipSpace();
      if (consume(','))
        continue;
      skipSpace();
      if (consume('}'))
        break;
      return fail("expected ',' or '}'", error);
    }
    skipSpace();
    if (pos != text.size())
      return fail("unexpected text after the dictionary", error);
    return true;
  }

private:
  std::string_view text;
  size_t pos = 0;

  bool fail(const std::string &what, std::string &error) {
    error = "malformed .npy header (" + what + " at offset " +
            std::to_string(pos) + "): " + std::string(text);
    while (!error.empty() && (error.back() == '\n' || error.back() == ' '))
      error.pop_back();
    return false;
  }
  void skipSpace() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\n' ||
                                 text[pos] == '\t' || text[pos] == '\r'))
      ++pos;
  }
  bool consume(char c) {
    if (pos < text.size() && text[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  bool consumeWord(const char *w) {
    size_t n = std::strlen(w);
    if (text.substr(pos, n) == w) {
      pos += n;
      return true;
    }
    return false;
  }

  bool parseValue(PyValue &v, std::string &error, int depth) {
    if (depth > 32)
      return fail("nesting too deep", error);
    skipSpace();
    if (pos >= text.size())
      return fail("unexpected end", error);
    char c = text[pos];
    if (c == '\'' || c == '"') {
      ++pos;
      v.kind = PyValue::Str;
      while (pos < text.size() && text[pos] != c) {
        if (text[pos] == '\\') {
          if (pos + 1 >= text.size())
            return fail("unterminated string", error);
          ++pos;
        }
        v.str += text[pos++];
      }
      if (!consume(c))
        return fail("unterminated string", error);
      return true;
    }
    if (c == '(' || c == '[') {
      char close = c == '(' ? ')' : ']';
      ++pos;
      v.kind = PyValue::Tuple;
      v.isList = c == '[';
      for (;;) {
        skipSpace();
        if (consume(close))
          return true;
        PyValue item;
        if (!parseValue(item, error, depth + 1))
          return false;
        v.items.push_back(std::move(item));
        skipSpace();
        if (consume(','))
          continue;
        skipSpace();
        if (consume(close))
          return true;
        return fail(std::string("expected ',' or '") + close + "'", error);
      }
    }
    if (consumeWord("True")) {
      v.kind = PyValue::Bool;
      v.boolean = true;
      return true;
    }
    if (consumeWord("False")) {
      v.kind = PyValue::Bool;
      return true;
    }
    if (consumeWord("None")) {
      v.kind = PyValue::None;
      return true;
    }
    if (c == '-' || c == '+' || (c >= '0' && c <= '9')) {
      bool negative = c == '-';
      if (c == '-' || c == '+')
        ++pos;
      if (pos >= text.size() || text[pos] < '0' || text[pos] > '9')
        return fail("expected a digit", error);
      uint64_t value = 0;
      while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
        unsigned d = static_cast<unsigned>(text[pos] - '0');
        if (value > (uint64_t(INT64_MAX) - d) / 10)
          return fail("integer too large", error);
        value = value * 10 + d;
        ++pos;
      }
      if (pos < text.size() && (text[pos] == 'L' || text[pos] == 'l'))
        ++pos; // Python 2 long suffix.
      v.kind = PyValue::Int;
      v.integer =
          negative ? -static_cast<int64_t>(value) : static_cast<int64_t>(value);
      return true;
    }
    return fail(std::string("unexpected character '") + c + "'", error);
  }
};

/// Interprets a descr string like "<f4".
bool parseDescr(const std::string &descr, DType &dtype, bool &bigEndian,
                std::string &error) {
  auto unsupported = [&] {
    std::string supported;
    for (DType d : allDTypes()) {
      if (!supported.empty())
        supported += ", ";
      supported += std::string(npyDescr(d)) + " (" + dtypeName(d) + ")";
    }
    error =
        "unsupported .npy dtype '" + descr + "' (supported: " + supported + ")";
    return false;
  };
  if (descr.size() < 2)
    return unsupported();
  char order = descr[0];
  std::string rest = descr.substr(1);
  if (order != '<' && order != '>' && order != '|' && order != '=') {
    order = '=';
    rest = descr;
  }
  bigEndian = order == '>';
  static const struct {
    const char *code;
    DType dtype;
  } codes[] = {{"f4", DType::Float32}, {"f8", DType::Float64},
               {"f2", DType::Float16}, {"V2", DType::BFloat16},
               {"i1", DType::Int8},    {"i2", DType::Int16},
               {"i4", DType::Int32},   {"i8", DType::Int64},
               {"u1", DType::UInt8},   {"b1", DType::Bool},
               {"u2", DType::UInt16},  {"u4", DType::UInt32},
               {"u8", DType::UInt64}};
  for (const auto &c : codes)
    if (rest == c.code) {
      dtype = c.dtype;
      if (dtypeSize(dtype) == 1)
        bigEndian = false;
      return true;
    }
  return unsupported();
}

bool parseHeader(std::string_view header, DType &dtype, bool &bigEndian,
                 bool &fortranOrder, std::vector<int64_t> &shape,
                 std::string &error) {
  std::vector<std::pair<std::string, PyValue>> entries;
  HeaderParser parser(header);
  if (!parser.parseDict(entries, error))
    return false;
  const PyValue *descr = nullptr, *fortran = nullptr, *shapeValue = nullptr;
  for (const auto &[key, value] : entries) {
    if (key == "descr")
      descr = &value;
    else if (key == "fortran_order")
      fortran = &value;
    else if (key == "shape")
      shapeValue = &value;
  }
  if (!descr || !fortran || !shapeValue) {
    error = std::string("malformed .npy header: missing key '") +
            (!descr     ? "descr"
             : !fortran ? "fortran_order"
                        : "shape") +
            "'";
    return false;
  }
  if (descr->kind == PyValue::Tuple) {
    error = "unsupported .npy dtype: structured arrays are not supported";
    return false;
  }
  if (descr->kind != PyValue::Str) {
    error = "malformed .npy header: 'descr' is not a string";
    return false;
  }
  if (!parseDescr(descr->str, dtype, bigEndian, error))
    return false;
  if (fortran->kind != PyValue::Bool) {
    error = "malformed .npy header: 'fortran_order' is not True/False";
    return false;
  }
  fortranOrder = fortran->boolean;
  if (shapeValue->kind != PyValue::Tuple) {
    error = "malformed .npy header: 'shape' is not a tuple";
    return false;
  }
  shape.clear();
  for (const PyValue &d : shapeValue->items) {
    if (d.kind != PyValue::Int || d.integer < 0) {
      error = "malformed .npy header: 'shape' holds a value that is not a "
              "non-negative integer";
      return false;
    }
    shape.push_back(d.integer);
  }
  return true;
}

void byteSwap(void *data, size_t count, size_t elemSize) {
  unsigned char *p = static_cast<unsigned char *>(data);
  for (size_t i = 0; i < count; ++i, p += elemSize)
    for (size_t a = 0, b = elemSize - 1; a < b; ++a, --b)
      std::swap(p[a], p[b]);
}

/// Reorders Fortran-order data in `t` to C order.
bool fortranToC(Tensor &t, std::string &error) {
  if (t.rank() < 2 || t.numElements() == 0)
    return true;
  Tensor c;
  if (!Tensor::create(t.dtype(), t.shape(), c, error))
    return false;
  const std::vector<int64_t> &shape = t.shape();
  size_t rank = shape.size(), es = t.elementSize();
  std::vector<int64_t> fstride(rank), index(rank, 0);
  int64_t s = 1;
  for (size_t d = 0; d < rank; ++d) {
    fstride[d] = s;
    s *= shape[d];
  }
  const unsigned char *src = static_cast<const unsigned char *>(t.data());
  unsigned char *dst = static_cast<unsigned char *>(c.data());
  int64_t srcOffset = 0;
  for (int64_t i = 0, n = t.numElements(); i < n; ++i) {
    std::memcpy(dst + size_t(i) * es, src + size_t(srcOffset) * es, es);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < shape[d]) {
        srcOffset += fstride[d];
        break;
      }
      srcOffset -= (index[d] - 1) * fstride[d];
      index[d] = 0;
    }
  }
  t = std::move(c);
  return true;
}

bool finishData(Tensor &t, bool bigEndian, bool fortranOrder,
                std::string &error) {
  if (bigEndian)
    byteSwap(t.data(), static_cast<size_t>(t.numElements()), t.elementSize());
  if (fortranOrder)
    return fortranToC(t, error);
  return true;
}

/// The shape as a Python tuple: "(2, 3)", "(2,)", "()".
std::string shapeRepr(const std::vector<int64_t> &shape) {
  std::string list = shapeToString(shape); // "[2, 3]"
  return "(" + list.substr(1, list.size() - 2) +
         (shape.size() == 1 ? ",)" : ")");
}

std::string truncatedMessage(size_t have, size_t need,
                             const std::vector<int64_t> &shape, DType dtype) {
  return "truncated .npy file: shape " + shapeToString(shape) + " of " +
         dtypeName(dtype) + " needs " + std::to_string(need) +
         " data bytes, file has " + std::to_string(have);
}

} // namespace

bool decodeNpy(const void *bytes, size_t length, Tensor &out,
               std::string &error) {
  const unsigned char *p = static_cast<const unsigned char *>(bytes);
  size_t prefixLength, headerLength;
  if (!parseNpyPrefix(p, length, prefixLength, headerLength, error))
    return false;
  if (length - prefixLength < headerLength) {
    error = "truncated .npy header";
    return false;
  }
  DType dtype;
  bool bigEndian, fortranOrder;
  std::vector<int64_t> shape;
  if (!parseHeader(
          std::string_view(reinterpret_cast<const char *>(p) + prefixLength,
                           headerLength),
          dtype, bigEndian, fortranOrder, shape, error))
    return false;
  int64_t numElements;
  if (!checkedNumElements(shape, dtypeSize(dtype), numElements)) {
    error = "invalid .npy shape " + shapeToString(shape) + " (size overflow)";
    return false;
  }
  size_t dataStart = prefixLength + headerLength;
  size_t have = length - dataStart;
  size_t need = static_cast<size_t>(numElements) * dtypeSize(dtype);
  if (have < need) {
    error = truncatedMessage(have, need, shape, dtype);
    return false;
  }
  if (have > need) {
    error = ".npy file has " + std::to_string(have - need) +
            " unexpected bytes after the data of shape " +
            shapeToString(shape) + " of " + dtypeName(dtype);
    return false;
  }
  Tensor t;
  if (!Tensor::create(dtype, shape, t, error))
    return false;
  if (need)
    std::memcpy(t.data(), p + dataStart, need);
  if (!finishData(t, bigEndian, fortranOrder, error))
    return false;
  out = std::move(t);
  return true;
}

MappedNpy::~MappedNpy() {
  if (base_)
    munmap(base_, length_);
}

bool MappedNpy::open(const std::string &path, std::string &error,
                     bool &mappable) {
  mappable = true;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = std::string("cannot open: ") + std::strerror(errno);
    mappable = false;
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
    ::close(fd);
    error = "not a regular, non-empty file";
    mappable = false;
    return false;
  }
  length_ = static_cast<size_t>(st.st_size);
  void *base = mmap(nullptr, length_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    error = std::string("cannot map: ") + std::strerror(errno);
    return false;
  }
  base_ = base;
  const auto *p = static_cast<const unsigned char *>(base);
  size_t prefixLength, headerLength;
  if (!parseNpyPrefix(p, length_, prefixLength, headerLength, error)) {
    mappable = false;
    return false;
  }
  if (length_ - prefixLength < headerLength) {
    error = "truncated .npy header";
    mappable = false;
    return false;
  }
  bool bigEndian, fortranOrder;
  if (!parseHeader(std::string_view(reinterpret_cast<const char *>(p) +
                                        prefixLength,
                                    headerLength),
                   dtype_, bigEndian, fortranOrder, shape_, error)) {
    mappable = false;
    return false;
  }
  int64_t n;
  if (!checkedNumElements(shape_, dtypeSize(dtype_), n)) {
    error = "invalid .npy shape " + shapeToString(shape_) + " (size overflow)";
    mappable = false;
    return false;
  }
  size_t dataStart = prefixLength + headerLength;
  size_t need = static_cast<size_t>(n) * dtypeSize(dtype_);
  if (length_ - dataStart != need) {
    error = length_ - dataStart < need
                ? truncatedMessage(length_ - dataStart, need, shape_, dtype_)
                : ".npy file has " + std::to_string(length_ - dataStart - need) +
                      " unexpected bytes after the data of shape " +
                      shapeToString(shape_) + " of " + dtypeName(dtype_);
    mappable = false;
    return false;
  }
  if ((bigEndian && dtypeSize(dtype_) > 1) || (fortranOrder && shape_.size() > 1)) {
    error = "big-endian or Fortran-order data is converted, not mapped";
    return false;
  }
  data_ = p + dataStart;
  return true;
}

bool readNpy(const std::string &path, Tensor &out, std::string &error) {
  detail::ReadFile file;
  if (!file.open(path, error))
    return false;
  unsigned char prefix[12];
  size_t got;
  if (!file.read(prefix, 8, got, error))
    return false;
  if (got < 8 || std::memcmp(prefix, kMagic, 6) != 0) {
    error = got < 8 && std::memcmp(prefix, kMagic, got) == 0
                ? "truncated .npy header"
                : "not a .npy file (missing \\x93NUMPY magic)";
    return false;
  }
  size_t rest = prefix[6] == 1 ? 2 : 4;
  if (prefix[6] >= 1 && prefix[6] <= 3) {
    if (!file.read(prefix + 8, rest, got, error))
      return false;
    if (got < rest) {
      error = "truncated .npy header";
      return false;
    }
  }
  size_t prefixLength, headerLength;
  if (!parseNpyPrefix(prefix, 8 + rest, prefixLength, headerLength, error))
    return false;
  std::string header(headerLength, '\0');
  if (!file.read(header.data(), headerLength, got, error))
    return false;
  if (got < headerLength) {
    error = "truncated .npy header";
    return false;
  }
  DType dtype;
  bool bigEndian, fortranOrder;
  std::vector<int64_t> shape;
  if (!parseHeader(header, dtype, bigEndian, fortranOrder, shape, error))
    return false;
  int64_t numElements;
  if (!checkedNumElements(shape, dtypeSize(dtype), numElements)) {
    error = "invalid .npy shape " + shapeToString(shape) + " (size overflow)";
    return false;
  }
  size_t need = static_cast<size_t>(numElements) * dtypeSize(dtype);
  long long fileSize = file.size();
  if (fileSize >= 0) {
    size_t have = static_cast<size_t>(fileSize) - prefixLength - headerLength;
    if (have < need) {
      error = truncatedMessage(have, need, shape, dtype);
      return false;
    }
  }
  Tensor t;
  if (!Tensor::create(dtype, shape, t, error))
    return false;
  if (!file.read(t.data(), need, got, error))
    return false;
  if (got < need) {
    error = truncatedMessage(got, need, shape, dtype);
    return false;
  }
  char extra[4096];
  size_t trailing = 0;
  do {
    if (!file.read(extra, sizeof(extra), got, error))
      return false;
    trailing += got;
  } while (got == sizeof(extra));
  if (trailing) {
    error = ".npy file has " + std::to_string(trailing) +
            " unexpected bytes after the data of shape " +
            shapeToString(shape) + " of " + dtypeName(dtype);
    return false;
  }
  if (!finishData(t, bigEndian, fortranOrder, error))
    return false;
  out = std::move(t);
  return true;
}

std::string encodeNpyHeader(DType dtype, const std::vector<int64_t> &shape) {
  // Mirrors numpy.lib.format._write_array_header so the bytes match np.save.
  std::string dict = std::string("{'descr': '") + npyDescr(dtype) +
                     "', 'fortran_order': False, 'shape': " + shapeRepr(shape) +
                     ", }";
  if (!shape.empty()) {
    size_t digits = std::to_string(shape[0]).size();
    if (digits < 21)
      dict.append(21 - digits, ' ');
  }
  size_t hlen = dict.size() + 1;
  int version = 1;
  size_t prefixLength = 10;
  size_t padlen = kBufferAlignment - ((prefixLength + hlen) % kBufferAlignment);
  if (hlen + padlen > 0xffff) {
    version = 2;
    prefixLength = 12;
    padlen = kBufferAlignment - ((prefixLength + hlen) % kBufferAlignment);
  }
  size_t total = hlen + padlen;
  std::string out(kMagic, 6);
  out += static_cast<char>(version);
  out += '\0';
  out += static_cast<char>(total & 0xff);
  out += static_cast<char>((total >> 8) & 0xff);
  if (version == 2) {
    out += static_cast<char>((total >> 16) & 0xff);
    out += static_cast<char>((total >> 24) & 0xff);
  }
  out += dict;
  out.append(padlen, ' ');
  out += '\n';
  return out;
}

std::string encodeNpy(DType dtype, const std::vector<int64_t> &shape,
                      const void *data) {
  std::string out = encodeNpyHeader(dtype, shape);
  int64_t n = 0;
  checkedNumElements(shape, dtypeSize(dtype), n);
  out.append(static_cast<const char *>(data),
             static_cast<size_t>(n) * dtypeSize(dtype));
  return out;
}

bool writeNpy(const std::string &path, DType dtype,
              const std::vector<int64_t> &shape, const void *data,
              std::string &error) {
  int64_t n;
  if (!checkedNumElements(shape, dtypeSize(dtype), n)) {
    error = "invalid shape " + shapeToString(shape);
    return false;
  }
  std::string header = encodeNpyHeader(dtype, shape);
  std::string_view parts[2] = {
      header, std::string_view(static_cast<const char *>(data),
                               static_cast<size_t>(n) * dtypeSize(dtype))};
  return detail::writeFileAtomically(path, parts, 2, error);
}

bool writeNpy(const std::string &path, const Tensor &tensor,
              std::string &error) {
  return writeNpy(path, tensor.dtype(), tensor.shape(), tensor.data(), error);
}

} // namespace distopt::runtime
