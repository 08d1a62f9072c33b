//===- FileUtil.h - small POSIX file helpers (runtime-internal) -*- C++ -*-===//
#ifndef DISTOPT_LIB_RUNTIME_FILEUTIL_H
#define DISTOPT_LIB_RUNTIME_FILEUTIL_H

#include <cstddef>
#include <string>
#include <string_view>

namespace distopt::runtime::detail {

/// strerror(errnum) as a std::string.
std::string errnoMessage(int errnum);

/// An open read-only file descriptor, closed on destruction.
class ReadFile {
public:
  ReadFile() = default;
  ~ReadFile();
  ReadFile(const ReadFile &) = delete;
  ReadFile &operator=(const ReadFile &) = delete;

  /// Opens `path` for reading; rejects directories. Error names the cause
  /// only ("cannot open: No such file or directory").
  bool open(const std::string &path, std::string &error);
  /// Reads exactly `length` bytes unless EOF comes first; `got` receives the
  /// count read. False only on an I/O error.
  bool read(void *buffer, size_t length, size_t &got, std::string &error);
  /// Size from fstat for regular files, or -1 when not a regular file.
  long long size() const { return size_; }
  int fd() const { return fd_; }

private:
  int fd_ = -1;
  long long size_ = -1;
};

/// Reads a whole file into `out`.
bool readWholeFile(const std::string &path, std::string &out,
                   std::string &error);

/// Writes `parts` (concatenated) to `<path>.tmp.<pid>` and renames it over
/// `path`; the temporary is removed on failure.
bool writeFileAtomically(const std::string &path, const std::string_view *parts,
                         size_t numParts, std::string &error);

/// mkdir -p.
bool makeDirectories(const std::string &path, std::string &error);

/// Directory part of a path ("." when none).
std::string dirName(const std::string &path);
/// Joins `base` and `rel` unless `rel` is absolute.
std::string joinPath(const std::string &base, const std::string &rel);

} // namespace distopt::runtime::detail

#endif // DISTOPT_LIB_RUNTIME_FILEUTIL_H
