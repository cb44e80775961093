//===- FileIO.cpp - bounded reads and safe output paths --------------------===//

#include "core/FileIO.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fagen {

std::string formatByteSize(uint64_t bytes) {
  if (bytes >= (uint64_t(1) << 30) && bytes % (uint64_t(1) << 30) == 0)
    return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (uint64_t(1) << 20) && bytes % (uint64_t(1) << 20) == 0)
    return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

namespace {

std::string tooLarge(uint64_t limit, const char *what, bool stopped) {
  return std::string(what) + " is larger than the " + formatByteSize(limit) + " limit" +
         (stopped ? " (stopped reading there)" : "");
}

std::string cannotRead(const char *what, const char *reason) {
  return std::string("cannot read ") + what + ": " + reason;
}

} // namespace

bool readFileBounded(const std::string &path, uint64_t limit, const char *what, std::string &out,
                     std::string &error) {
  out.clear();
  bool isStdin = path == "-";
  // O_NONBLOCK: opening a FIFO that has no writer must not wait for one.
  int fd = isStdin ? STDIN_FILENO : ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    error = cannotRead(what, std::strerror(errno));
    return false;
  }
  struct FdCloser {
    int fd;
    bool close;
    ~FdCloser() {
      if (close)
        ::close(fd);
    }
  } closer{fd, !isStdin};
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    error = cannotRead(what, std::strerror(errno));
    return false;
  }
  if (S_ISDIR(st.st_mode)) {
    error = cannotRead(what, "it is a folder");
    return false;
  }
  if (S_ISREG(st.st_mode) && uint64_t(st.st_size) > limit) {
    error = tooLarge(limit, what, false);
    return false;
  }
  if (!isStdin) {
    int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0)
      ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  }
  if (S_ISREG(st.st_mode))
    out.reserve(size_t(st.st_size));
  char chunk[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN) // a FIFO opened before its writer: nothing to read
      break;
    if (n < 0) {
      error = cannotRead(what, std::strerror(errno));
      return false;
    }
    if (n == 0)
      break;
    if (out.size() + uint64_t(n) > limit) {
      out.clear();
      out.shrink_to_fit();
      error = tooLarge(limit, what, true);
      return false;
    }
    out.append(chunk, size_t(n));
  }
  return true;
}

bool checkOutputPath(const std::string &path, const std::vector<std::string> &inputs,
                     std::string &error) {
  struct stat out;
  if (::stat(path.c_str(), &out) != 0)
    return true; // a new file (a missing folder fails later, at the write, with its reason)
  if (S_ISDIR(out.st_mode)) {
    error = "refusing to write " + path + ": it is a folder";
    return false;
  }
  if (!S_ISREG(out.st_mode)) {
    const char *kind = S_ISCHR(out.st_mode) || S_ISBLK(out.st_mode) ? "a device node"
                       : S_ISFIFO(out.st_mode)                      ? "a FIFO"
                       : S_ISSOCK(out.st_mode)                      ? "a socket"
                                                                    : "not a regular file";
    error = "refusing to write " + path + ": it is " + kind +
            ", and fagen replaces its output with a new regular file; name a file (or '-' for "
            "standard output)";
    return false;
  }
  for (const std::string &input : inputs) {
    struct stat in;
    if (input == "-" || ::stat(input.c_str(), &in) != 0)
      continue;
    if (in.st_dev == out.st_dev && in.st_ino == out.st_ino) {
      error = "refusing to write " + path + ": it is the input " + input +
              ", which would be lost; name another output file";
      return false;
    }
  }
  return true;
}

} // namespace fagen
