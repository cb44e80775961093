# lit configuration for fagen's FileCheck tests (MLIR testing-guide style).
#
# Run through ctest (`ctest -R lit`), or by hand:
#   /usr/lib/llvm-22/bin/lit -sv tests/lit --param fagen=build/fagen
# Parameters (environment fallback in parentheses):
#   fagen     the fagen binary, substituted for %fagen (FAGEN_BINARY)
#   llvm_bin  where FileCheck, not and split-file live (FAGEN_LLVM_BIN; /usr/lib/llvm-22/bin)
#   build_dir where lit writes its Output/ folders (FAGEN_LIT_BUILD_DIR; a temp dir), never
#             the source tree

import os
import tempfile

import lit.formats

config.name = "fagen"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".yaml", ".test"]
config.excludes = ["Inputs", "lit.cfg.py"]
config.test_source_root = os.path.dirname(__file__)


def param(name, env, default=None):
    return lit_config.params.get(name) or os.environ.get(env) or default


fagen = param("fagen", "FAGEN_BINARY")
if not fagen or not os.path.isfile(fagen):
    lit_config.fatal(
        "the fagen binary was not found (got %r): pass --param fagen=PATH/TO/fagen "
        "or set FAGEN_BINARY" % fagen)
config.substitutions.append(("%fagen", os.path.abspath(fagen)))

llvm_bin = param("llvm_bin", "FAGEN_LLVM_BIN", "/usr/lib/llvm-22/bin")
for tool in ("FileCheck", "not"):
    if not os.path.isfile(os.path.join(llvm_bin, tool)):
        lit_config.fatal("%s not found in %s: apt-get install llvm-22-tools, or pass "
                         "--param llvm_bin=DIR" % (tool, llvm_bin))
# nvcc for the template compile tests: $CUDA_HOME/bin, then PATH, then /usr/local/cuda/bin.
cuda_bins = [os.path.join(os.environ["CUDA_HOME"], "bin")] if os.environ.get("CUDA_HOME") else []
# cuobjdump and nvdisasm for the SASS checks: installed by scripts/install-deps into .tools/.
sass_tools = os.path.join(os.path.dirname(os.path.dirname(config.test_source_root)),
                          ".tools", "cuda", "nvidia", "cu13", "bin")
config.environment["PATH"] = os.pathsep.join(
    [llvm_bin] + cuda_bins + [os.environ.get("PATH", ""), "/usr/local/cuda/bin", sass_tools])

config.test_exec_root = param("build_dir", "FAGEN_LIT_BUILD_DIR",
                              os.path.join(tempfile.gettempdir(), "fagen-lit"))
