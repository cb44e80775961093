//===- Output.h - what fagen plan, inspect and check print, as text and JSON -===//
//
// The JSON forms (--json) are one object on standard output, for scripts: the same facts as
// the text, with numbers as numbers and open-ended ranges as null.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_CLI_OUTPUT_H
#define FAGEN_CLI_OUTPUT_H

#include "compiler/bundle/Bundle.h"
#include "compiler/plan/Plan.h"

#include "llvm/Support/JSON.h"

#include <string>
#include <vector>

namespace fagen {

/// A kernel's spill warning ("" when it does not spill): the same words for build and inspect.
std::string spillWarning(const std::string &name, const std::string &arch, int spillBytes,
                         int registers);

/// The kernel's template's verification record in words: "template sm90ws on sm_90a: verified
/// on NVIDIA H200 (fagen check, 2026-11-30); a record of the template, not a check of this
/// bundle" (or no record, where the template's does not cover the kernel's variant).
std::string templateRecordText(const KernelRecord &k);

/// `fagen plan --json`.
llvm::json::Value plansJson(const std::string &specPath, const std::vector<KernelPlan> &plans);

/// `fagen inspect` (text, `verbose` adds each kernel's manifest extras) and `--json`.
std::string inspectText(const std::string &path, const Bundle &bundle, bool verbose);
llvm::json::Value inspectJson(const std::string &path, const Bundle &bundle);

} // namespace fagen

#endif // FAGEN_CLI_OUTPUT_H
