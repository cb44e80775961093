//===- Subprocess.cpp - child processes and temporary folders that an interrupt cleans up -===//

#include "compiler/build/Subprocess.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <set>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char **environ;

namespace fagen {

namespace {

/// What an interrupt must undo. `stopping` is set once the interrupt thread has taken over:
/// no new child starts after that.
struct Registry {
  std::mutex mutex;
  std::set<pid_t> groups;
  std::set<std::string> dirs;
  bool stopping = false;
};

Registry &registry() {
  static Registry *r = new Registry; // never destroyed: the interrupt thread may outlive main
  return *r;
}

} // namespace

int runProcess(const std::vector<std::string> &args, const std::string &logPath,
               std::string &error) {
  std::vector<char *> argv;
  for (const std::string &a : args)
    argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, logPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);

  Registry &r = registry();
  pid_t pid = -1;
  int rc;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    rc = r.stopping ? EINTR : posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), environ);
    if (rc == 0)
      r.groups.insert(pid);
  }
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    error = "cannot run " + args[0] + ": " + std::strerror(rc);
    return -1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.groups.erase(pid);
  }
  if (WIFSIGNALED(status)) {
    error = args[0] + " was killed by signal " + std::to_string(WTERMSIG(status));
    return -1;
  }
  return WEXITSTATUS(status);
}

llvm::Error createTempDir(const std::string &prefix, llvm::SmallVectorImpl<char> &path) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.stopping)
    return llvm::createStringError(std::errc::interrupted, "interrupted");
  // A relative prefix: <system temp dir>/<prefix>-XXXXXX.
  if (std::error_code ec = llvm::sys::fs::createUniqueDirectory(prefix, path))
    return llvm::createStringError(ec, "cannot create a temporary folder: %s",
                                   ec.message().c_str());
  r.dirs.insert(std::string(path.begin(), path.end()));
  return llvm::Error::success();
}

void removeTempDir(const std::string &path) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.stopping)
    return; // the interrupt thread removes it
  llvm::sys::fs::remove_directories(path);
  r.dirs.erase(path);
}

void cleanUpOnInterrupt(const char *programName) {
  static sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  if (pthread_sigmask(SIG_BLOCK, &signals, nullptr) != 0)
    return;
  std::thread([programName] {
    int sig = 0;
    while (sigwait(&signals, &sig) != 0) {
    }
    Registry &r = registry();
    r.mutex.lock(); // held until exit: no child starts, no folder is made or removed elsewhere
    r.stopping = true;
    for (pid_t group : r.groups)
      kill(-group, SIGTERM);
    for (const std::string &dir : r.dirs)
      llvm::sys::fs::remove_directories(dir);
    std::string message = std::string(programName) + ": interrupted by " +
                          (sig == SIGINT ? "SIGINT" : "SIGTERM") + ": stopped " +
                          std::to_string(r.groups.size()) +
                          " compiler process(es) and removed the temporary files\n";
    ssize_t ignored = write(STDERR_FILENO, message.data(), message.size());
    (void)ignored;
    _exit(128 + sig);
  }).detach();
}

} // namespace fagen
