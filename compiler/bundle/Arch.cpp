//===- Arch.cpp - compute-capability arithmetic of arch names -------------===//
//
// "sm_90a" and its kin, for the planner, the bundle reader and the runtime's loader: plain
// C++, no LLVM (compiled into the runtime with Bundle.cpp).
//
//===----------------------------------------------------------------------===//
#include "compiler/bundle/Bundle.h"

namespace fagen {

int archComputeCapability(const std::string &arch) {
  if (arch.compare(0, 3, "sm_") != 0)
    return -1;
  std::string digits = arch.substr(3);
  if (!digits.empty() && digits.back() == 'a')
    digits.pop_back();
  if (digits.size() < 2 || digits.size() > 3 || digits[0] == '0')
    return -1;
  int cc = 0;
  for (char c : digits) {
    if (c < '0' || c > '9')
      return -1;
    cc = cc * 10 + (c - '0');
  }
  return cc;
}

bool archRunsOn(const std::string &arch, int major, int minor) {
  int cc = archComputeCapability(arch);
  if (cc < 0)
    return false;
  int archMajor = cc / 10, archMinor = cc % 10;
  if (arch.back() == 'a')
    return major == archMajor && minor == archMinor;
  return major == archMajor && minor >= archMinor;
}

} // namespace fagen
