"""ctypes binding of the fagen runtime (runtime/include/fagen/fagen.h), for benchmarks and GPU tests.

    import fagen_rt
    bundle = fagen_rt.Bundle("bench.fab")                    # FagenError if invalid
    plan = bundle.plan_forward(q, k, v, causal=True)         # FagenError with the reason
    plan.run(q, k, v, o, lse)                                # on torch's current stream
    o, lse = bundle.forward(q, k, v, causal=True)            # plan + allocate + run

Tensors are torch tensors indexed [batch, seq, heads, head_dim] (a BHSD tensor works as its
.transpose(1, 2) view); the head dim must be contiguous. lse is float32 [batch, heads_q, seqlen_q].
The library is $FAGEN_RT_LIB, else libfagen_rt.so from a build directory next to bench/.
torch is imported only where a call needs it, so loading and listing a bundle work without it.
"""
import ctypes
import glob
import os

FAGEN_OK = 0
_DTYPES = {"torch.float16": 0, "torch.bfloat16": 1}


class FagenError(RuntimeError):
    """A failed runtime call: `status` is the fagen_status code, the message says why."""

    def __init__(self, status, status_name, message):
        super().__init__(f"{status_name}: {message}")
        self.status = status
        self.status_name = status_name


class _Problem(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int32) for name in
                ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim_qk",
                 "head_dim_v", "dtype", "causal")] + [
        ("softmax_scale", ctypes.c_float)] + [
        (name, ctypes.c_int64 * 3) for name in ("q_strides", "k_strides", "v_strides", "o_strides")]


class _Plan(ctypes.Structure):
    _fields_ = [("bundle", ctypes.c_void_p), ("kernel_index", ctypes.c_int32),
                ("grid", ctypes.c_int32 * 3), ("block", ctypes.c_int32 * 3),
                ("smem_bytes", ctypes.c_int32), ("function", ctypes.c_void_p),
                ("params", ctypes.c_uint8 * 256), ("workspace_bytes", ctypes.c_size_t)]


def find_library():
    path = os.environ.get("FAGEN_RT_LIB")
    if path:
        return path
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = sorted(glob.glob(os.path.join(root, "build*", "libfagen_rt.so")))
    if not found:
        raise FileNotFoundError("libfagen_rt.so not found: build the fagen_rt target "
                                "(cmake --build build --target fagen_rt) or set FAGEN_RT_LIB")
    return found[0]


_lib = None


def library(path=None):
    """The loaded runtime library (loaded on first use, from `path` or find_library())."""
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(path or find_library())
    c = ctypes
    signatures = {
        "fagen_last_error": (c.c_char_p, []),
        "fagen_status_name": (c.c_char_p, [c.c_int]),
        "fagen_version": (c.c_char_p, []),
        "fagen_bundle_load_file": (c.c_int, [c.c_char_p, c.POINTER(c.c_void_p)]),
        "fagen_bundle_load_memory": (c.c_int, [c.c_void_p, c.c_size_t, c.POINTER(c.c_void_p)]),
        "fagen_bundle_destroy": (None, [c.c_void_p]),
        "fagen_bundle_kernel_count": (c.c_int, [c.c_void_p]),
        "fagen_bundle_kernel_name": (c.c_char_p, [c.c_void_p, c.c_int]),
        "fagen_plan_forward": (c.c_int, [c.c_void_p, c.POINTER(_Problem), c.POINTER(_Plan)]),
        "fagen_plan_forward_kernel": (c.c_int, [c.c_void_p, c.POINTER(_Problem), c.c_int,
                                                c.POINTER(_Plan)]),
        "fagen_run_forward": (c.c_int, [c.POINTER(_Plan), c.c_void_p, c.c_void_p, c.c_void_p,
                                        c.c_void_p, c.c_void_p, c.c_void_p]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    _lib = lib
    return lib


def version():
    return library().fagen_version().decode()


def _check(status):
    if status != FAGEN_OK:
        lib = library()
        raise FagenError(status, lib.fagen_status_name(status).decode(),
                         lib.fagen_last_error().decode(errors="replace"))


def _current_stream():
    import torch
    return torch.cuda.current_stream().cuda_stream


def _strides(name, t):
    """(batch, head, row) strides of a [batch, seq, heads, dim] tensor."""
    if t.dim() != 4:
        raise ValueError(f"{name} must have 4 dims [batch, seq, heads, head_dim], "
                         f"got shape {tuple(t.shape)}")
    s = t.stride()
    if s[3] != 1:
        raise ValueError(f"{name}'s head dim must be contiguous (stride 1), got stride {s[3]}: "
                         f"call .contiguous()")
    return (s[0], s[2], s[1])


class Plan:
    """A planned forward call; valid while its Bundle lives."""

    def __init__(self, bundle, plan):
        self.bundle = bundle  # keeps the bundle alive
        self._plan = plan

    @property
    def kernel(self):
        return self.bundle.kernel_names[self._plan.kernel_index]

    @property
    def grid(self):
        return tuple(self._plan.grid)

    def run(self, q, k, v, o, lse, stream=None):
        """Launches on `stream` (a CUstream as int; default: torch's current stream)."""
        if stream is None:
            stream = _current_stream()
        _check(library().fagen_run_forward(ctypes.byref(self._plan), q.data_ptr(), k.data_ptr(),
                                           v.data_ptr(), o.data_ptr(), lse.data_ptr(), stream))


class Bundle:
    """A loaded bundle (immutable; the runtime frees it when this object goes away)."""

    def __init__(self, path):
        lib = library()
        handle = ctypes.c_void_p()
        _check(lib.fagen_bundle_load_file(os.fsencode(path), ctypes.byref(handle)))
        self._handle = handle
        self.kernel_names = [lib.fagen_bundle_kernel_name(handle, i).decode()
                             for i in range(lib.fagen_bundle_kernel_count(handle))]

    def __del__(self):
        if getattr(self, "_handle", None) and _lib is not None:
            _lib.fagen_bundle_destroy(self._handle)
            self._handle = None

    def plan_forward(self, q, k, v, causal=False, softmax_scale=0.0, head_dim_v=None,
                     kernel_index=None):
        """Picks the kernel for q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv] (torch
        tensors or anything with shape/stride()/dim()/dtype). The plan assumes a contiguous
        BSHD output [B, Sq, Hq, Dv], as forward() allocates it. kernel_index pins the kernel
        (as `fagen check` does) instead of letting the runtime choose."""
        dtype = _DTYPES.get(str(q.dtype))
        if dtype is None:
            raise ValueError(f"q.dtype is {q.dtype}; fagen kernels take float16 or bfloat16")
        for name, t in (("k", k), ("v", v)):
            if str(t.dtype) != str(q.dtype):
                raise ValueError(f"{name}.dtype is {t.dtype} but q.dtype is {q.dtype}")
        p = _Problem()
        p.batch, p.seqlen_q, p.heads_q, p.head_dim_qk = q.shape
        _, p.seqlen_k, p.heads_kv, _ = k.shape
        p.head_dim_v = head_dim_v if head_dim_v is not None else v.shape[3]
        p.dtype, p.causal, p.softmax_scale = dtype, int(bool(causal)), float(softmax_scale)
        p.q_strides[:] = _strides("q", q)
        p.k_strides[:] = _strides("k", k)
        p.v_strides[:] = _strides("v", v)
        hv, dv = p.heads_q, p.head_dim_v
        p.o_strides[:] = (p.seqlen_q * hv * dv, dv, hv * dv)  # contiguous BSHD output
        plan = _Plan()
        if kernel_index is None:
            _check(library().fagen_plan_forward(self._handle, ctypes.byref(p), ctypes.byref(plan)))
        else:
            _check(library().fagen_plan_forward_kernel(self._handle, ctypes.byref(p), kernel_index,
                                                       ctypes.byref(plan)))
        return Plan(self, plan)

    def forward(self, q, k, v, causal=False, softmax_scale=0.0, stream=None):
        """Plans, allocates O (contiguous BSHD) and LSE, runs; returns (o, lse)."""
        import torch
        plan = self.plan_forward(q, k, v, causal, softmax_scale)
        b, sq, hq, _ = q.shape
        o = torch.empty((b, sq, hq, v.shape[3]), dtype=q.dtype, device=q.device)
        lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
        plan.run(q, k, v, o, lse, stream)
        return o, lse
