"""Loaded bundles and the choice of a kernel for a call (no torch needed here).

Every fagen.Bundle joins the pool that fagen.attention(bundle=None) searches in load order; a
Bundle passed as `bundle=` is the only one asked. A call no bundle serves gets its kernels built
on demand (fagen/ondemand.py) when it may search the pool, else KernelNotBuilt with the spec
entry to add.
"""
import itertools
import os

from . import ondemand, runtime

_bundles = {}  # id -> Bundle, in load order
_ids = itertools.count(1)
_plans = {}  # (pass, bundle id, device, deterministic, problem bytes) -> (Bundle, Plan)
_DTYPE_NAMES = {v: k.replace("torch.float16", "fp16").replace("torch.bfloat16", "bf16")
                for k, v in runtime._DTYPES.items()}
_NAMES = {field: {v: k for k, v in table.items()} for field, table in (
    ("mask", runtime._MASKS), ("mask_align", runtime._ALIGNS), ("score_mod", runtime._SCORE_MODS))}


class Bundle(runtime.Bundle):
    """A loaded bundle (fagen build's .fab). It stays loaded for the process and serves
    fagen.attention calls: those that name it (bundle=) and those that name none."""

    def __init__(self, path):
        super().__init__(path)
        self.path = os.fspath(path)
        self.id = next(_ids)
        _bundles[self.id] = self

    def __repr__(self):
        return f"fagen.Bundle({self.path!r}, {len(self.kernel_names)} kernels)"


def loaded():
    """The bundles fagen.attention(bundle=None) searches, in load order."""
    return list(_bundles.values())


def describe(problem, pass_, deterministic):
    """The spec variant of a call (see ondemand.spec_entry) and a short phrase for messages."""
    p = problem
    v = dict(dtype=_DTYPE_NAMES[p.dtype], head_dim_qk=p.head_dim_qk, head_dim_v=p.head_dim_v,
             mask=_NAMES["mask"][p.mask], mask_align=_NAMES["mask_align"][p.mask_align],
             score_mod=_NAMES["score_mod"][p.score_mod], dropout=p.dropout_p > 0,
             varlen=bool(p.varlen),
             block_size=p.sparse_block if p.sparsity == runtime._SPARSITY["runtime"] else 0,
             passes=[pass_], deterministic=bool(deterministic and pass_ == "bwd"))
    features = [v["mask"] + (" top_left" if v["mask_align"] == "top_left" else "")]
    features += [v["score_mod"]] if v["score_mod"] != "none" else []
    features += ["dropout"] if v["dropout"] else []
    features += ["varlen"] if v["varlen"] else []
    features += [f"block mask {v['block_size']}"] if v["block_size"] else []
    features += ["deterministic"] if v["deterministic"] else []
    head_dim = (str(p.head_dim_qk) if p.head_dim_qk == p.head_dim_v
                else f"{p.head_dim_qk}/{p.head_dim_v}")
    why = (f"a {v['dtype']} {'forward' if pass_ == 'fwd' else 'backward'} with head_dim "
           f"{head_dim}, {', '.join(features)}")
    return v, why


def plan(pass_, bundle_id, device, capability, q, k, v, deterministic=False, **variant):
    """(Bundle, runtime.Plan) for a call: from the plan cache, else the first bundle (the named
    one, or the pool in load order) that serves it, else a bundle built on demand.
    capability(): the device's (major, minor), asked only to build."""
    problem = runtime.Bundle._problem(q, k, v, **variant)
    key = (pass_, bundle_id, device, bool(deterministic), bytes(problem))
    hit = _plans.get(key)
    if hit is not None:
        return hit
    pool = [_bundles[bundle_id]] if bundle_id else loaded()
    reasons = []
    for b in pool:
        try:
            if pass_ == "fwd":
                found = b.plan_forward(q, k, v, **variant)
            else:
                found = b.plan_backward(q, k, v, deterministic=deterministic, **variant)
        except runtime.FagenError as e:
            if e.status_name != "FAGEN_ERROR_NOT_SUPPORTED":
                raise
            reasons.append(f"  {b.path}: {e}")
            continue
        _plans[key] = (b, found)
        return b, found
    described, why = describe(problem, pass_, deterministic)
    entry = ondemand.spec_entry(described)
    if bundle_id:
        raise ondemand.KernelNotBuilt(
            f"{_bundles[bundle_id].path} has no kernel for {why}:\n" + "\n".join(reasons)
            + f"\nAdd this variant to its spec and rebuild it (or pass no bundle= to let fagen "
              f"build it on demand):\n{entry}", entry)
    path = ondemand.build(entry, ondemand.arch_for(capability()), why)
    built = next((b for b in loaded() if b.path == path), None) or Bundle(path)
    found = (built.plan_forward(q, k, v, **variant) if pass_ == "fwd" else
             built.plan_backward(q, k, v, deterministic=deterministic, **variant))
    _plans[key] = (built, found)
    return built, found
