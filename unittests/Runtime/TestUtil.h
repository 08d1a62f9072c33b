//===- TestUtil.h - helpers for the runtime unit tests ----------*- C++ -*-===//
#ifndef DISTOPT_UNITTESTS_RUNTIME_TESTUTIL_H
#define DISTOPT_UNITTESTS_RUNTIME_TESTUTIL_H

#include "distopt/Runtime/Tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace distopt::runtime::test {

/// The tensor a reader (`decode(data, size, tensor, error)`, as decodeNpy)
/// reads from `bytes`; a test failure if it cannot.
template <typename Decode>
Tensor decodedBy(Decode decode, const std::string &bytes) {
  Tensor t;
  std::string error;
  EXPECT_TRUE(decode(bytes.data(), bytes.size(), t, error)) << error;
  return t;
}

/// What a reader says of `bytes` it must refuse (leaving no tensor).
template <typename Decode>
std::string refusalBy(Decode decode, const std::string &bytes) {
  Tensor t;
  std::string error;
  EXPECT_FALSE(decode(bytes.data(), bytes.size(), t, error));
  EXPECT_FALSE(t.valid());
  return error;
}

/// The elements of `t`, of type T.
template <typename T> std::vector<T> values(const Tensor &t) {
  const T *p = t.dataAs<T>();
  return std::vector<T>(p, p + t.numElements());
}

/// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
public:
  TempDir() {
    const char *base = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(base && *base ? base : "/tmp") + "/dort-test-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) {
      ADD_FAILURE() << "mkdtemp failed";
      return;
    }
    path_ = buf.data();
  }
  ~TempDir() {
    if (!path_.empty())
      removeTree(path_);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;

  const std::string &path() const { return path_; }
  std::string operator/(const std::string &rel) const {
    return path_ + "/" + rel;
  }

  /// Names of the entries of `dir` (sorted).
  static std::vector<std::string> list(const std::string &dir) {
    std::vector<std::string> names;
    if (DIR *d = ::opendir(dir.c_str())) {
      while (dirent *e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..")
          names.push_back(n);
      }
      ::closedir(d);
    }
    std::sort(names.begin(), names.end());
    return names;
  }

private:
  static void removeTree(const std::string &path) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0)
      return;
    if (S_ISDIR(st.st_mode)) {
      for (const std::string &n : list(path))
        removeTree(path + "/" + n);
      ::rmdir(path.c_str());
    } else {
      ::unlink(path.c_str());
    }
  }
  std::string path_;
};

inline void writeFile(const std::string &path, const void *data, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char *>(data), static_cast<std::streamsize>(n));
  ASSERT_TRUE(f.good()) << path;
}
inline void writeFile(const std::string &path, const std::string &data) {
  writeFile(path, data.data(), data.size());
}
inline std::string readFile(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
inline bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}
template <size_t N> std::string bytes(const unsigned char (&a)[N]) {
  return std::string(reinterpret_cast<const char *>(a), N);
}

} // namespace distopt::runtime::test

#endif // DISTOPT_UNITTESTS_RUNTIME_TESTUTIL_H
