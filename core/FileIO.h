//===- FileIO.h - bounded reads and safe output paths ----------------------===//
//
// Every file fagen reads goes through readFileBounded: a device (/dev/zero), a FIFO or a huge
// file stops at a size limit with a message that names it, and a FIFO without a writer reads
// as empty instead of blocking. checkOutputPath decides whether a path may be replaced by a
// new regular file: never a device node, FIFO, socket or folder, and never one of the inputs.
// Plain C++17 and POSIX (no LLVM).
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_CORE_FILEIO_H
#define FAGEN_CORE_FILEIO_H

#include <cstdint>
#include <string>
#include <vector>

namespace fagen {

/// Size limits of what fagen reads, by kind of file.
constexpr uint64_t kMaxSpecBytes = uint64_t(16) << 20;   ///< a spec (YAML)
constexpr uint64_t kMaxBundleBytes = uint64_t(256) << 20; ///< a bundle
constexpr uint64_t kMaxTextFileBytes = uint64_t(256) << 20; ///< databases, golden files, logs

/// "16 MiB", "1 GiB", "512 bytes".
std::string formatByteSize(uint64_t bytes);

/// Reads `path` ("-" = standard input) into `out`, at most `limit` bytes. On failure returns
/// false and sets `error` to a message without the path, in which `what` names the file
/// ("cannot read the spec: No such file or directory", "the spec is larger than the 16 MiB
/// limit (stopped reading there)").
bool readFileBounded(const std::string &path, uint64_t limit, const char *what, std::string &out,
                     std::string &error);

/// Whether `path` may be written as a new regular file (through a temporary file and a
/// rename): it does not exist, or is a regular file that is none of `inputs` (compared by
/// device and inode, so other spellings and hard links count). Otherwise returns false with a
/// message in `error` naming the path and why.
bool checkOutputPath(const std::string &path, const std::vector<std::string> &inputs,
                     std::string &error);

} // namespace fagen

#endif // FAGEN_CORE_FILEIO_H
