"""Kernels on demand: the spec entry a call needs, and building it into the user's cache.

When no loaded bundle serves a call, fagen.attention describes the call as one spec variant
(docs/spec.md). With the fagen CLI and nvcc present it builds that variant once into
`$FAGEN_CACHE_DIR/bundles/` (else `$XDG_CACHE_HOME/fagen/bundles/`, else
`~/.cache/fagen/bundles/`), the folder whose `kernels/` the CLI's compile cache already uses, and
loads it; a later process finds the bundle there without compiling. Without them it raises
KernelNotBuilt with the spec entry to add to the application's spec. Deployments ship prebuilt
bundles (fagen.Bundle) and never reach this.

The CLI: $FAGEN_CLI, else `fagen` on PATH, else build*/fagen of the checkout this package runs
from. nvcc: $CUDA_HOME/bin, PATH, /usr/local/cuda/bin (where the CLI looks too).
"""
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys

_ARCHS = {8: "sm_80", 9: "sm_90a", 10: "sm_100a"}  # a cubin runs on the GPUs of its major arch
_said = set()


class KernelNotBuilt(RuntimeError):
    """No loaded bundle serves the call and none can be built here; `entry` is the spec
    variant (YAML) to add."""

    def __init__(self, message, entry):
        super().__init__(message)
        self.entry = entry


def arch_for(capability):
    """The --arch that serves a GPU of compute capability (major, minor)."""
    arch = _ARCHS.get(capability[0])
    if arch is None:
        raise KernelNotBuilt(f"fagen has no kernels for compute capability "
                             f"{capability[0]}.{capability[1]} (it builds for sm_80, sm_90a and "
                             f"sm_100a)", "")
    return arch


def spec_entry(v):
    """The spec variant (YAML lines) for a call described by `v`: dtype ('fp16'/'bf16'),
    head_dim_qk, head_dim_v, mask ('none'/'causal'/'window'), mask_align, score_mod
    ('none'/'softcap'/'alibi'), dropout, varlen, block_size (runtime block mask, or 0), passes
    (list), deterministic."""
    parts = [v["dtype"], f"hd{v['head_dim_qk']}"
             + (f"x{v['head_dim_v']}" if v["head_dim_v"] != v["head_dim_qk"] else ""), v["mask"]]
    if v["mask"] != "none" and v["mask_align"] == "top_left":
        parts[-1] += "tl"
    parts += [v["score_mod"]] if v["score_mod"] != "none" else []
    parts += ["drop"] if v["dropout"] else []
    parts += [f"bsr{v['block_size']}"] if v["block_size"] else []
    parts += ["varlen"] if v["varlen"] else []
    parts += ["det"] if v["deterministic"] else []
    lines = [f"- name: {'_'.join(parts)}", f"  dtype: {v['dtype']}"]
    if v["head_dim_v"] == v["head_dim_qk"]:
        lines.append(f"  head_dim: {v['head_dim_qk']}")
    else:
        lines += [f"  head_dim_qk: {v['head_dim_qk']}", f"  head_dim_v: {v['head_dim_v']}"]
    lines.append(f"  mask: {v['mask']}")
    if v["mask"] != "none" and v["mask_align"] != "bottom_right":
        lines.append(f"  mask_align: {v['mask_align']}")
    if v["score_mod"] != "none":
        lines.append(f"  score_mod: {v['score_mod']}")
    if v["dropout"]:
        lines.append("  dropout: true")
    if v["varlen"]:
        lines.append("  varlen: true")
    if v["block_size"]:
        lines.append(f"  block_sparse: {{block: {v['block_size']}, layout: runtime}}")
    lines.append(f"  passes: [{', '.join(v['passes'])}]")
    if v["deterministic"]:
        lines.append("  deterministic: true")
    return "\n".join(lines) + "\n"


def cache_dir():
    """The cache root, as the fagen CLI chooses its compile cache."""
    if os.environ.get("FAGEN_CACHE_DIR"):
        return os.environ["FAGEN_CACHE_DIR"]
    if os.environ.get("XDG_CACHE_HOME"):
        return os.path.join(os.environ["XDG_CACHE_HOME"], "fagen")
    return os.path.join(os.path.expanduser("~"), ".cache", "fagen")


def find_cli():
    path = os.environ.get("FAGEN_CLI") or shutil.which("fagen")
    if path:
        return path
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for build in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        candidate = os.path.join(root, build, "fagen")
        if build.startswith("build") and os.access(candidate, os.X_OK) and \
                os.path.isfile(candidate):
            return candidate
    return None


def find_nvcc():
    candidates = []
    if os.environ.get("CUDA_HOME"):
        candidates.append(os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc"))
    candidates += [shutil.which("nvcc") or "", "/usr/local/cuda/bin/nvcc"]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def _tool_version(path):
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def build(entry, arch, why):
    """The path of a bundle holding `entry` for `arch`: from the cache, else built now (once;
    concurrent processes wait on a lock file). `why` describes the call for messages."""
    cli, nvcc = find_cli(), find_nvcc()
    if cli is None or nvcc is None:
        missing = " and ".join(n for n, p in (("the fagen CLI", cli), ("nvcc", nvcc)) if p is None)
        raise KernelNotBuilt(
            f"no loaded bundle serves {why}, and {missing} {'is' if ' and ' not in missing else 'are'} "
            f"not here to build the kernel on demand. Add this variant to your spec, build it "
            f"(fagen build SPEC --arch {arch} -o attn.fab) and load it with "
            f"fagen.Bundle('attn.fab'):\n{entry}", entry)
    spec = f"targets: [{arch}]\nvariants:\n" + entry
    key = hashlib.sha256("\0".join([spec, _tool_version(cli), _tool_version(nvcc)])
                         .encode()).hexdigest()[:24]
    folder = os.path.join(cache_dir(), "bundles")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{key}.fab")
    if os.path.isfile(path):
        return path
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.isfile(path):
            return path
        if key not in _said:
            _said.add(key)
            print(f"fagen: compiling the kernels for {why} into {path} (once; later calls and "
                  f"processes load it from there)", file=sys.stderr)
        spec_path = os.path.join(folder, f"{key}.yaml")
        with open(spec_path, "w") as f:
            f.write(f"name: ondemand_{key[:8]}\n" + spec)
        env = dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(nvcc)))
        out = subprocess.run([cli, "build", spec_path, "--arch", arch, "-o", path, "-q",
                              "--cache-dir", cache_dir()], capture_output=True, text=True,
                             env=env)
        if out.returncode != 0:
            raise KernelNotBuilt(f"fagen build {spec_path} failed (exit {out.returncode}) for "
                                 f"{why}:\n{out.stderr.strip()}", entry)
    return path
