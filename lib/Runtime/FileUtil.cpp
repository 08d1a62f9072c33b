//===- FileUtil.cpp - small POSIX file helpers ----------------------------===//

#include "FileUtil.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

namespace distopt::runtime::detail {

std::string errnoMessage(int errnum) { return std::strerror(errnum); }

ReadFile::~ReadFile() {
  if (fd_ >= 0)
    ::close(fd_);
}

bool ReadFile::open(const std::string &path, std::string &error) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    int savedErrno = errno;
    error = "cannot open: " + errnoMessage(savedErrno);
    return false;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int savedErrno = errno;
    error = "cannot stat: " + errnoMessage(savedErrno);
    ::close(fd);
    return false;
  }
  if (S_ISDIR(st.st_mode)) {
    error = "cannot read: is a directory";
    ::close(fd);
    return false;
  }
  fd_ = fd;
  size_ = S_ISREG(st.st_mode) ? static_cast<long long>(st.st_size) : -1;
  return true;
}

bool ReadFile::read(void *buffer, size_t length, size_t &got,
                    std::string &error) {
  got = 0;
  char *out = static_cast<char *>(buffer);
  while (got < length) {
    size_t chunk = length - got;
    if (chunk > (size_t(1) << 30))
      chunk = size_t(1) << 30;
    ssize_t n = ::read(fd_, out + got, chunk);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      int savedErrno = errno;
      error = "cannot read: " + errnoMessage(savedErrno);
      return false;
    }
    if (n == 0)
      break;
    got += static_cast<size_t>(n);
  }
  return true;
}

bool readWholeFile(const std::string &path, std::string &out,
                   std::string &error) {
  ReadFile file;
  if (!file.open(path, error))
    return false;
  out.clear();
  if (file.size() >= 0) {
    out.resize(static_cast<size_t>(file.size()));
    size_t got;
    if (!file.read(out.data(), out.size(), got, error))
      return false;
    out.resize(got);
  }
  // Whatever follows (file grew, or not a regular file).
  char buffer[65536];
  for (;;) {
    size_t got;
    if (!file.read(buffer, sizeof(buffer), got, error))
      return false;
    out.append(buffer, got);
    if (got < sizeof(buffer))
      break;
  }
  return true;
}

bool writeFileAtomically(const std::string &path, const std::string_view *parts,
                         size_t numParts, std::string &error) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd;
  do {
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    int savedErrno = errno;
    error = "cannot create '" + tmp + "': " + errnoMessage(savedErrno);
    return false;
  }
  auto fail = [&](const std::string &what) {
    error = what;
    ::close(fd);
    ::unlink(tmp.c_str());
    return false;
  };
  for (size_t i = 0; i < numParts; ++i) {
    const char *p = parts[i].data();
    size_t left = parts[i].size();
    while (left > 0) {
      size_t chunk = left > (size_t(1) << 30) ? (size_t(1) << 30) : left;
      ssize_t n = ::write(fd, p, chunk);
      if (n < 0) {
        if (errno == EINTR)
          continue;
        int savedErrno = errno;
        return fail("cannot write '" + tmp + "': " + errnoMessage(savedErrno));
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  if (::close(fd) != 0) {
    int savedErrno = errno;
    error = "cannot write '" + tmp + "': " + errnoMessage(savedErrno);
    ::unlink(tmp.c_str());
    return false;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int savedErrno = errno;
    error = "cannot rename '" + tmp + "' to '" + path +
            "': " + errnoMessage(savedErrno);
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

bool makeDirectories(const std::string &path, std::string &error) {
  if (path.empty())
    return true;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return true;
    error = "'" + path + "' exists and is not a directory";
    return false;
  }
  std::string parent = dirName(path);
  if (parent != path && parent != "." && parent != "/" &&
      !makeDirectories(parent, error))
    return false;
  if (::mkdir(path.c_str(), 0777) != 0 && errno != EEXIST) {
    int savedErrno = errno;
    error =
        "cannot create directory '" + path + "': " + errnoMessage(savedErrno);
    return false;
  }
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    error = "'" + path + "' exists and is not a directory";
    return false;
  }
  return true;
}

std::string dirName(const std::string &path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/')
    p.pop_back();
  size_t slash = p.rfind('/');
  if (slash == std::string::npos)
    return ".";
  if (slash == 0)
    return "/";
  p.resize(slash);
  while (p.size() > 1 && p.back() == '/')
    p.pop_back();
  return p;
}

std::string joinPath(const std::string &base, const std::string &rel) {
  if (rel.empty())
    return base;
  if (rel[0] == '/' || base.empty())
    return rel;
  if (base.back() == '/')
    return base + rel;
  return base + "/" + rel;
}

} // namespace distopt::runtime::detail
