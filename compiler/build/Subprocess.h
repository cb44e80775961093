//===- Subprocess.h - child processes and temporary folders that an interrupt cleans up -===//
//
// nvcc runs in a process group of its own (with its cicc and ptxas), and every temporary
// folder of a build is registered, so that SIGINT or SIGTERM during `fagen build` or `fagen
// tune` stops every compiler process and leaves no /tmp/fagen-build-* behind before fagen exits
// with 128 + the signal (130, 143).
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_COMPILER_BUILD_SUBPROCESS_H
#define FAGEN_COMPILER_BUILD_SUBPROCESS_H

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace fagen {

/// Runs `args` (args[0] is the program, a path) in a new process group, with standard input
/// from /dev/null and standard output and error into `logPath`. Returns its exit code, or -1
/// with the reason in `error` when it could not start or was killed by a signal.
int runProcess(const std::vector<std::string> &args, const std::string &logPath,
               std::string &error);

/// Creates a new folder `<temp dir>/<prefix>-XXXXXX` (TMPDIR or /tmp), registered so that an
/// interrupt removes it; removeTempDir removes it and forgets it.
llvm::Error createTempDir(const std::string &prefix, llvm::SmallVectorImpl<char> &path);
void removeTempDir(const std::string &path);

/// From here on, SIGINT and SIGTERM stop the process cleanly: the running children's process
/// groups get SIGTERM, the registered folders are removed, and the process exits with 128 +
/// the signal. Call it from main before any thread starts (the signals are blocked in every
/// thread and taken by a thread of its own).
void cleanUpOnInterrupt(const char *programName);

} // namespace fagen

#endif // FAGEN_COMPILER_BUILD_SUBPROCESS_H
