//===- NamedValues.h - an enum's values and their names --------*- C++ -*-===//
//
// One table per enumeration gives each value the name the command line,
// the plan's JSON and a Python API spell it with; the names are printed
// and parsed from the same table.
//
//===----------------------------------------------------------------------===//
#ifndef DISTOPT_SUPPORT_NAMEDVALUES_H
#define DISTOPT_SUPPORT_NAMEDVALUES_H

#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace distopt {

/// A value and its name.
template <typename E> struct NamedValue {
  llvm::StringLiteral name;
  E value;
};

/// The name of `value` in `values` ("?" where it has none).
template <typename E, size_t N>
constexpr llvm::StringRef nameOf(const NamedValue<E> (&values)[N], E value) {
  for (const NamedValue<E> &v : values)
    if (v.value == value)
      return v.name;
  return "?";
}

/// The value named `name` in `values`, if any.
template <typename E, size_t N>
std::optional<E> valueNamed(const NamedValue<E> (&values)[N],
                            llvm::StringRef name) {
  for (const NamedValue<E> &v : values)
    if (v.name == name)
      return v.value;
  return std::nullopt;
}

/// The names of `values`: "a, b or c" (with `sep` and `last` as given).
template <typename E, size_t N>
std::string namesOf(const NamedValue<E> (&values)[N],
                    llvm::StringRef sep = ", ", llvm::StringRef last = " or ") {
  std::string out;
  for (size_t i = 0; i < N; ++i)
    out += ((i == 0 ? "" : i + 1 == N ? last : sep) + values[i].name).str();
  return out;
}

/// Sets `out` to the value named `name` among `values`; else false with
/// `error` = "--OPTION must be a, b or c, got 'NAME'".
template <typename E, size_t N, typename Out>
bool parseNamed(llvm::StringRef option, const NamedValue<E> (&values)[N],
                llvm::StringRef name, Out &out, std::string &error) {
  if (std::optional<E> value = valueNamed(values, name)) {
    out = *value;
    return true;
  }
  error = "--" + option.str() + " must be " + namesOf(values) + ", got '" +
          name.str() + "'";
  return false;
}

} // namespace distopt

#endif // DISTOPT_SUPPORT_NAMEDVALUES_H
