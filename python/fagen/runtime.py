"""ctypes binding of the fagen runtime (runtime/include/fagen/fagen.h, ABI 2): the layer under
fagen.attention, and what benchmarks and GPU tests call directly.

    from fagen import runtime as fagen_rt
    bundle = fagen_rt.Bundle("bench.fab")                    # FagenError if invalid
    plan = bundle.plan_forward(q, k, v, causal=True)         # FagenError with the reason
    plan.run(q, k, v, o, lse)                                # on torch's current stream
    o, lse = bundle.forward(q, k, v, causal=True)            # plan + allocate + run

    # decode over a paged KV cache (a bundle built with kv_cache: paged, page_size: 16):
    # k_cache, v_cache [num_pages, 16, heads_kv, d], block_table int32 [batch, max_pages],
    # seqused_k int32 [batch]; seqlen_k: the longest cache length of the call
    plan = bundle.plan_forward_paged(q, k_cache, v_cache, block_table, seqlen_k, causal=True)
    plan.run_paged(q, k_cache, v_cache, o, lse, block_table, seqused_k)
    plan.status()                                            # FagenError naming a bad entry
    # chunked prefill over the pages (varlen: true, kv_cache: paged): q packed [total_q, Hq, d]
    plan = bundle.plan_forward_paged(q, k_cache, v_cache, block_table, seqlen_k, causal=True,
                                     cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q)
    plan.run_paged(q, k_cache, v_cache, o, lse, block_table, seqused_k, cu_seqlens_q=cu_seqlens_q)

    # variants: mask="window", window=(256, -1), mask_align="top_left", softcap=50.0,
    # alibi=True, dropout_p=0.1, cu_seqlens_q=..., block_sparse=("runtime", 128), ...
    args = fagen_rt.run_args(dropout_seed=1, dropout_offset=0)  # run-time arguments
    o, lse = bundle.forward(q, k, v, causal=True, dropout_p=0.1, args=args)
    dq, dk, dv = bundle.backward(q, k, v, o, lse, do, causal=True, dropout_p=0.1, args=args)

Tensors are torch tensors indexed [batch, seq, heads, head_dim] (a BHSD tensor works as its
.transpose(1, 2) view); the head dim must be contiguous. lse is float32 [batch, heads_q, seqlen_q].
Varlen (cu_seqlens_q given): q is packed [total_q, heads, head_dim], lse [heads_q, total_q].
The library is $FAGEN_RT_LIB, else the libfagen_rt.so installed inside this package, else (a
checkout) one in a build directory at the repository root.
torch is imported only where a call needs it, so loading and listing a bundle work without it.
"""
import ctypes
import glob
import os
import re

FAGEN_OK = 0
ABI_VERSION = 3
ABI_TAG = 0x46470000 | ABI_VERSION  # FAGEN_ABI_TAG: the second field of every versioned struct
_DTYPES = {"torch.float16": 0, "torch.bfloat16": 1}
_MASKS = {"none": 0, "causal": 1, "window": 2}
_ALIGNS = {"bottom_right": 0, "top_left": 1}
_SCORE_MODS = {"none": 0, "softcap": 1, "alibi": 2}
_SPARSITY = {"none": 0, "runtime": 1, "static": 2}
RUN_ARG_ALIBI_SLOPES, RUN_ARG_BLOCK_MASK, RUN_ARG_CU_SEQLENS, RUN_ARG_DROPOUT_SEED = 1, 2, 4, 8


class FagenError(RuntimeError):
    """A failed runtime call: `status` is the fagen_status code, the message says why."""

    def __init__(self, status, status_name, message):
        super().__init__(f"{status_name}: {message}")
        self.status = status
        self.status_name = status_name


_I32, _I64, _F32, _P = ctypes.c_int32, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p


class _Versioned(ctypes.Structure):
    """A struct that starts with struct_size and abi_tag (fagen.h's *_INIT macros)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.struct_size, self.abi_tag = ctypes.sizeof(self), ABI_TAG


_HEADER = [("struct_size", ctypes.c_uint32), ("abi_tag", ctypes.c_uint32)]


class _Problem(_Versioned):
    """fagen_fwd_problem."""
    _fields_ = _HEADER + [(name, _I32) for name in
                ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim_qk",
                 "head_dim_v", "dtype", "causal")] + [
        ("softmax_scale", _F32)] + [
        (name, _I64 * 3) for name in ("q_strides", "k_strides", "v_strides", "o_strides")] + [
        ("mask", _I32), ("mask_align", _I32), ("window_left", _I32), ("window_right", _I32),
        ("score_mod", _I32), ("softcap", _F32), ("dropout_p", _F32), ("varlen", _I32),
        ("total_q", _I64), ("total_k", _I64), ("sparsity", _I32), ("sparse_block", _I32),
        ("sparse_hash", ctypes.c_uint32), ("reserved0", _I32)] + [
        (name, _I64 * 3) for name in ("do_strides", "dq_strides", "dk_strides", "dv_strides")]


class RunArgs(_Versioned):
    """fagen_run_args: device pointers and the dropout seed; make one with run_args()."""
    _fields_ = _HEADER + [("alibi_slopes", _P), ("alibi_batch_stride", _I64), ("block_mask", _P),
                ("block_mask_batch_stride", _I64), ("block_mask_head_stride", _I64),
                ("block_mask_row_stride", _I64), ("cu_seqlens_q", _P), ("cu_seqlens_k", _P),
                ("dropout_seed", ctypes.c_uint64), ("dropout_offset", ctypes.c_uint64)]


class _MergeProblem(_Versioned):
    """fagen_merge_problem."""
    _fields_ = _HEADER + [(name, _I32) for name in
                ("num_states", "batch", "heads", "seqlen", "head_dim", "dtype")] + [
        ("o_states_strides", _I64 * 4), ("lse_states_strides", _I64 * 4),
        ("o_strides", _I64 * 3), ("lse_strides", _I64 * 3)]


class _PagedKv(_Versioned):
    """fagen_paged_kv."""
    _fields_ = _HEADER + [("page_size", _I32), ("num_pages", _I32), ("max_pages_per_seq", _I32),
                          ("reserved0", _I32), ("block_table_stride", _I64)]


class _KvAppend(_Versioned):
    """fagen_kv_append."""
    _fields_ = _HEADER + [("k_strides", _I64 * 3), ("v_strides", _I64 * 3)]


class _Plan(ctypes.Structure):
    """fagen_plan."""
    _fields_ = _HEADER + [("bundle", _P), ("bundle_id", ctypes.c_uint64), ("context", _P),
                          ("context_id", ctypes.c_uint64), ("device", _I32),
                          ("kernel_index", _I32), ("pass_", _I32),
                ("grid", _I32 * 3), ("block", _I32 * 3), ("smem_bytes", _I32),
                ("pre_post_grid", _I32 * 3), ("pre_post_block", _I32 * 3),
                ("run_args", ctypes.c_uint32), ("function", _P), ("pre_function", _P),
                ("post_function", _P), ("workspace_bytes", ctypes.c_size_t),
                ("workspace_offsets", ctypes.c_uint64 * 3), ("params", ctypes.c_uint8 * 1024)]


def find_library():
    path = os.environ.get("FAGEN_RT_LIB")
    if path:
        return path
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "libfagen_rt.so*")))
    if not found:  # a checkout: python/fagen/ -> the repository root's build*/
        root = os.path.dirname(os.path.dirname(here))
        found = sorted(glob.glob(os.path.join(root, "build*", "libfagen_rt.so")))
    if not found:
        raise FileNotFoundError("libfagen_rt.so not found: pip install ./python, or build the "
                                "fagen_rt target (cmake --build build --target fagen_rt), or set "
                                "FAGEN_RT_LIB")
    return found[0]


_lib = None


def library(path=None):
    """The loaded runtime library (loaded on first use, from `path` or find_library())."""
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(path or find_library())
    c = ctypes
    P, Pr, Pl, A = c.c_void_p, c.POINTER(_Problem), c.POINTER(_Plan), c.POINTER(RunArgs)
    signatures = {
        "fagen_abi_version": (c.c_int, []),
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
        "fagen_run_forward_with_args": (c.c_int, [Pl, P, P, P, P, P, A, P]),
        "fagen_run_forward_with_workspace": (c.c_int, [Pl, P, P, P, P, P, P, c.c_size_t, A, P]),
        "fagen_plan_backward": (c.c_int, [P, Pr, c.c_int32, Pl]),
        "fagen_plan_backward_kernel": (c.c_int, [P, Pr, c.c_int32, c.c_int, Pl]),
        "fagen_run_backward": (c.c_int, [Pl, P, P, P, P, P, P, P, P, P, P, c.c_size_t, A, P]),
        "fagen_plan_merge_states": (c.c_int, [P, c.POINTER(_MergeProblem), Pl]),
        "fagen_run_merge_states": (c.c_int, [Pl, P, P, P, P, P]),
        "fagen_plan_forward_paged": (c.c_int, [P, Pr, c.POINTER(_PagedKv), Pl]),
        "fagen_plan_forward_paged_kernel": (c.c_int, [P, Pr, c.POINTER(_PagedKv), c.c_int, Pl]),
        "fagen_run_forward_paged": (c.c_int, [Pl, P, P, P, P, P, P, P, P, c.c_size_t, A, P]),
        "fagen_run_forward_paged_append": (c.c_int, [Pl, c.POINTER(_KvAppend), P, P, P, P, P, P,
                                                     P, P, P, P, c.c_size_t, A, P]),
        "fagen_paged_kv_status": (c.c_int, [Pl, P, P]),
        "fagen_plan_set_decode_splits": (c.c_int, [Pl, c.c_int32]),
        "fagen_plan_decode_splits": (c.c_int32, [Pl]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    if lib.fagen_abi_version() != ABI_VERSION:
        raise RuntimeError(f"{path or find_library()} has runtime ABI {lib.fagen_abi_version()}, "
                           f"this binding expects {ABI_VERSION}: rebuild fagen_rt or update "
                           f"python/fagen/runtime.py")
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


def _strides(name, t, varlen=False):
    """(batch, head, row) strides of a [batch, seq, heads, dim] tensor (varlen: [total, heads,
    dim], batch stride 0)."""
    dims = 3 if varlen else 4
    if t.dim() != dims:
        what = "[total, heads, head_dim] (varlen)" if varlen else "[batch, seq, heads, head_dim]"
        raise ValueError(f"{name} must have {dims} dims {what}, got shape {tuple(t.shape)}")
    s = t.stride()
    if s[-1] != 1:
        raise ValueError(f"{name}'s head dim must be contiguous (stride 1), got stride {s[-1]}: "
                         f"call .contiguous()")
    return (0, s[1], s[0]) if varlen else (s[0], s[2], s[1])


def _ptr(t):
    return None if t is None else t.data_ptr()


def _nbytes(t):
    """Bytes of a workspace tensor (0 for None), which the runtime checks against the plan's."""
    return 0 if t is None else t.numel() * t.element_size()


def run_args(alibi_slopes=None, block_mask=None, cu_seqlens_q=None, cu_seqlens_k=None,
             dropout_seed=0, dropout_offset=0):
    """fagen_run_args from tensors: alibi_slopes float32 [heads_q] or [batch, heads_q];
    block_mask uint8 [batch, heads_q, row blocks, col blocks] (strides may be 0 to broadcast);
    cu_seqlens int32 [batch + 1]. The struct holds the tensors, so that a temporary passed in
    (run_args(cu_seqlens_k=torch.tensor(...))) lives as long as the struct: a launch on the
    stream the tensors were allocated on (torch's current one, the default) is then ordered
    before any reuse of their memory. On another stream keep them until the launches are done
    (or record_stream them)."""
    a = RunArgs()
    a._tensors = tuple(t for t in (alibi_slopes, block_mask, cu_seqlens_q, cu_seqlens_k)
                       if t is not None)
    if alibi_slopes is not None:
        a.alibi_slopes = alibi_slopes.data_ptr()
        a.alibi_batch_stride = alibi_slopes.stride()[0] if alibi_slopes.dim() == 2 else 0
    if block_mask is not None:
        s = block_mask.stride()
        a.block_mask = block_mask.data_ptr()
        a.block_mask_batch_stride = s[0]
        a.block_mask_head_stride, a.block_mask_row_stride = s[1], s[2]
        if s[3] != 1:
            raise ValueError("block_mask's column blocks must be contiguous (stride 1)")
    a.cu_seqlens_q, a.cu_seqlens_k = _ptr(cu_seqlens_q), _ptr(cu_seqlens_k)
    a.dropout_seed, a.dropout_offset = dropout_seed, dropout_offset
    return a


class Plan:
    """A planned forward or backward call; valid while its Bundle lives."""

    def __init__(self, bundle, plan):
        self.bundle = bundle  # keeps the bundle alive
        self._plan = plan

    @property
    def kernel(self):
        return self.bundle.kernel_names[self._plan.kernel_index]

    @property
    def grid(self):
        return tuple(self._plan.grid)

    @property
    def pre_post_grid(self):
        return tuple(self._plan.pre_post_grid)

    @property
    def decode_splits(self):
        """A decode plan's split count (planned, or set by set_decode_splits); 0 otherwise."""
        return library().fagen_plan_decode_splits(ctypes.byref(self._plan))

    def set_decode_splits(self, num_splits):
        """Sets a decode plan's split count (1..128) instead of the planned one
        (fagen_plan_set_decode_splits): the grid, the combine and workspace_bytes follow; the
        plan's own workspaces are allocated anew at the next run."""
        _check(library().fagen_plan_set_decode_splits(ctypes.byref(self._plan), int(num_splits)))
        self.__dict__.pop("_workspaces", None)

    @property
    def workspace_bytes(self):
        """Scratch the caller allocates: a backward's; a forward's is optional (a tile counter
        that sm90ws kernels of uneven work tiles run faster with; 0 for the others)."""
        return self._plan.workspace_bytes

    @property
    def run_args(self):
        """RUN_ARG_* bits: what the variant reads from run_args()."""
        return self._plan.run_args

    def run(self, q, k, v, o, lse, stream=None, args=None, workspace=True):
        """Launches the forward on `stream` (a CUstream as int; default: torch's current
        stream) with the variant's run-time arguments (run_args()). workspace: True (a
        workspace_bytes tensor this plan allocates once per device and stream and reuses, when
        workspace_bytes > 0: calls of one plan on one stream never overlap), False (none: the
        launch without a tile counter), or a device tensor of workspace_bytes bytes."""
        if stream is None:
            stream = _current_stream()
        if workspace is True:
            workspace = (self._own_workspace(q.device, stream) if self.workspace_bytes > 0
                         else None)
        elif workspace is False:
            workspace = None
        _check(library().fagen_run_forward_with_workspace(
            ctypes.byref(self._plan), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
            lse.data_ptr(), _ptr(workspace), _nbytes(workspace),
            None if args is None else ctypes.byref(args), stream))

    def run_merge_states(self, o_states, lse_states, o, lse=None, stream=None):
        """Launches a merge plan (Bundle.plan_merge_states) on the tensors it was planned for:
        o_states [S, B, T, H, D], lse_states [S, B, H, T] into o [B, T, H, D] and lse
        [B, H, T] (None: not written)."""
        if stream is None:
            stream = _current_stream()
        _check(library().fagen_run_merge_states(
            ctypes.byref(self._plan), o_states.data_ptr(), lse_states.data_ptr(), o.data_ptr(),
            _ptr(lse), stream))

    def _own_workspace(self, device, stream):
        cache = self.__dict__.setdefault("_workspaces", {})
        key = (str(device), stream)
        if key not in cache:
            import torch
            cache[key] = torch.empty(self.workspace_bytes, dtype=torch.uint8, device=device)
        return cache[key]

    def run_paged(self, q, k_cache, v_cache, o, lse, block_table, seqused_k, stream=None,
                  args=None, workspace=True, cu_seqlens_q=None, k_new=None, v_new=None):
        """Launches a paged plan (Bundle.plan_forward_paged) on the tensors it was planned for:
        the caches [num_pages, page_size, Hkv, D], block_table int32 [B, max_pages], seqused_k
        int32 [B] (each sequence's cache length); decode: q and o [B, T, Hq, D], lse [B, Hq, T];
        chunked prefill: q and o packed [total_q, Hq, D], lse [Hq, total_q] and cu_seqlens_q
        int32 [B + 1] (alone, or in args). workspace: True (this plan's own, allocated once per
        device and stream: a paged run always needs one, the kernel reports bad entries there)
        or a device tensor of workspace_bytes bytes. k_new, v_new (decode plans): the new
        tokens' keys and values [B, T, Hkv, D], written into the cache at each sequence's
        seqused_k[b] + t before the decode, which then reads seqused_k[b] + T keys
        (fagen_run_forward_paged_append; seqused_k itself is not changed)."""
        if cu_seqlens_q is not None:
            if args is not None:
                raise ValueError("run_paged: pass cu_seqlens_q alone or inside args, not both")
            args = run_args(cu_seqlens_q=cu_seqlens_q)
        elif args is None and self.run_args & RUN_ARG_CU_SEQLENS:
            raise ValueError("run_paged: the plan is a varlen paged forward (chunked prefill): "
                             "pass cu_seqlens_q, the packed queries' int32 [batch + 1] offsets")
        if (k_new is None) != (v_new is None):
            raise ValueError("run_paged: pass k_new and v_new together (the new tokens' keys "
                             "and values), or neither")
        if stream is None:
            stream = _current_stream()
        if workspace is True:
            workspace = self._own_workspace(q.device, stream)
        if k_new is None:
            _check(library().fagen_run_forward_paged(
                ctypes.byref(self._plan), q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
                o.data_ptr(), lse.data_ptr(), block_table.data_ptr(), seqused_k.data_ptr(),
                _ptr(workspace), _nbytes(workspace),
                None if args is None else ctypes.byref(args), stream))
        else:
            if cu_seqlens_q is not None or self.run_args & RUN_ARG_CU_SEQLENS:
                raise ValueError("run_paged: k_new / v_new (an append) are for paged decode plans; "
                                 "for chunked prefill, write the chunk's keys and values into the "
                                 "cache first")
            for name, t in (("k_new", k_new), ("v_new", v_new)):
                if t.device != k_cache.device:
                    raise ValueError(f"run_paged: {name} is on {t.device}, the caches on "
                                     f"{k_cache.device}")
                if t.dim() != 4 or t.shape[:3] != q.shape[:2] + (k_cache.shape[2],) or \
                        t.shape[3] != (k_cache if name == "k_new" else v_cache).shape[3]:
                    raise ValueError(
                        f"run_paged: {name} must be [batch, tokens, heads_kv, head_dim] as q's "
                        f"tokens and the cache's heads, got {tuple(t.shape)} for q "
                        f"{tuple(q.shape)} and caches of {k_cache.shape[2]} heads")
                if t.dtype != q.dtype or t.stride(-1) != 1:
                    raise ValueError(f"run_paged: {name} must have q's dtype ({q.dtype}) and a "
                                     f"contiguous head dim, got {t.dtype}, strides {t.stride()}")
            append = _KvAppend()
            append.k_strides[:] = k_new.stride()[:3]
            append.v_strides[:] = v_new.stride()[:3]
            _check(library().fagen_run_forward_paged_append(
                ctypes.byref(self._plan), ctypes.byref(append), q.data_ptr(),
                k_cache.data_ptr(), v_cache.data_ptr(), k_new.data_ptr(), v_new.data_ptr(),
                o.data_ptr(), lse.data_ptr(), block_table.data_ptr(), seqused_k.data_ptr(),
                _ptr(workspace), _nbytes(workspace),
                None if args is None else ctypes.byref(args), stream))
        self._last_workspace = workspace

    def status(self, workspace=None, stream=None):
        """After run_paged: synchronizes the stream and raises FagenError naming the first bad
        block-table entry or cache length the kernel met (fagen_paged_kv_status)."""
        if stream is None:
            stream = _current_stream()
        if workspace is None:
            workspace = self._last_workspace
        _check(library().fagen_paged_kv_status(ctypes.byref(self._plan), _ptr(workspace),
                                               stream))

    def run_backward(self, q, k, v, o, lse, do, dq, dk, dv, workspace, stream=None, args=None):
        """Launches the backward: the forward's q, k, v, o, lse; do = dO; writes dq, dk, dv.
        workspace: workspace_bytes of device memory (a tensor or None when 0 bytes)."""
        if stream is None:
            stream = _current_stream()
        _check(library().fagen_run_backward(
            ctypes.byref(self._plan), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
            lse.data_ptr(), do.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
            _ptr(workspace), _nbytes(workspace), None if args is None else ctypes.byref(args),
            stream))


def contiguous_twin(kernel_names, index):
    """The index of paged kernel `index`'s contiguous twin among a bundle's kernel descriptions
    (Bundle.kernel_names, "NAME (PASS ARCH ..."): the kernel named as it is without _pagedN, up
    to the stage count (the K/V pipeline's depth changes no arithmetic; the planner gives pages
    it gathers three stages), of the same arch; None unless exactly one."""
    def key(description):
        name, rest = description.split(" ", 1)
        arch = rest.split()[1] if len(rest.split()) > 1 else ""
        return re.sub(r"(w\d+)s\d+", r"\1", re.sub(r"_paged\d+_", "_", name)), arch
    want = key(kernel_names[index])
    same = [j for j, n in enumerate(kernel_names)
            if "_paged" not in n.split(" ")[0] and key(n) == want]
    return same[0] if len(same) == 1 else None


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

    @staticmethod
    def _problem(q, k, v, causal=False, softmax_scale=0.0, head_dim_v=None, mask=None,
                 mask_align="bottom_right", window=(-1, -1), softcap=0.0, alibi=False,
                 dropout_p=0.0, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                 max_seqlen_k=None, block_sparse=None, sparse_hash=0, out_layout="bshd",
                 paged=False):
        """fagen_fwd_problem for q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv] (varlen:
        [total, H, D] with cu_seqlens_*, max_seqlen_*); O, dO, dQ, dK, dV contiguous like
        forward() and backward() allocate them. block_sparse: ("runtime", block) or
        ("static", block or 0). paged: k and v are caches [num_pages, page_size, Hkv, D] (their
        page, head and row strides; seqlen_k and, varlen, total_k are the caller's to set)."""
        dtype = _DTYPES.get(str(q.dtype))
        if dtype is None:
            raise ValueError(f"q.dtype is {q.dtype}; fagen kernels take float16 or bfloat16")
        for name, t in (("k", k), ("v", v)):
            if str(t.dtype) != str(q.dtype):
                raise ValueError(f"{name}.dtype is {t.dtype} but q.dtype is {q.dtype}")
        varlen = cu_seqlens_q is not None
        p = _Problem()
        if varlen:
            if max_seqlen_q is None or (not paged and (cu_seqlens_k is None or
                                                       max_seqlen_k is None)):
                raise ValueError("varlen needs cu_seqlens_q, cu_seqlens_k, max_seqlen_q and "
                                 "max_seqlen_k")
            p.varlen, p.batch = 1, cu_seqlens_q.shape[0] - 1
            p.total_q, p.heads_q, p.head_dim_qk = q.shape
            p.seqlen_q = max_seqlen_q
            if not paged:
                p.total_k, p.heads_kv, _ = k.shape
                p.seqlen_k = max_seqlen_k
        else:
            p.batch, p.seqlen_q, p.heads_q, p.head_dim_qk = q.shape
            if not paged:
                _, p.seqlen_k, p.heads_kv, _ = k.shape
        if paged:
            p.heads_kv = k.shape[2]
        p.head_dim_v = head_dim_v if head_dim_v is not None else v.shape[-1]
        p.dtype, p.softmax_scale = dtype, float(softmax_scale)
        p.mask = _MASKS[mask or ("causal" if causal else "none")]
        p.mask_align = _ALIGNS[mask_align]
        if p.mask == _MASKS["window"]:
            p.window_left, p.window_right = window
        p.score_mod = _SCORE_MODS["softcap" if softcap else "alibi" if alibi else "none"]
        p.softcap, p.dropout_p = float(softcap), float(dropout_p)
        if block_sparse is not None:
            p.sparsity, p.sparse_block = _SPARSITY[block_sparse[0]], block_sparse[1]
        p.sparse_hash = sparse_hash
        p.q_strides[:] = _strides("q", q, varlen)
        p.k_strides[:] = _strides("k_cache" if paged else "k", k, varlen and not paged)
        p.v_strides[:] = _strides("v_cache" if paged else "v", v, varlen and not paged)
        # O, dO, dQ, dK, dV: contiguous BSHD (varlen: packed), as forward()/backward() allocate,
        # or (out_layout="bhsd", not varlen) contiguous [batch, heads, seq, dim].
        if out_layout not in ("bshd", "bhsd") or (varlen and out_layout != "bshd"):
            raise ValueError(f"out_layout is {out_layout!r}: use 'bshd' (or 'bhsd', not varlen)")
        rows_q = p.total_q if varlen else p.seqlen_q
        rows_k = p.total_k if varlen else p.seqlen_k
        for field, rows, heads, dim in (("o_strides", rows_q, p.heads_q, p.head_dim_v),
                                        ("do_strides", rows_q, p.heads_q, p.head_dim_v),
                                        ("dq_strides", rows_q, p.heads_q, p.head_dim_qk),
                                        ("dk_strides", rows_k, p.heads_kv, p.head_dim_qk),
                                        ("dv_strides", rows_k, p.heads_kv, p.head_dim_v)):
            if out_layout == "bhsd":
                getattr(p, field)[:] = (rows * heads * dim, rows * dim, dim)
            else:
                getattr(p, field)[:] = (0 if varlen else rows * heads * dim, dim, heads * dim)
        return p

    def plan_forward(self, q, k, v, kernel_index=None, **variant):
        """Picks the forward kernel for the call (keywords: see _problem). The plan assumes a
        contiguous BSHD output [B, Sq, Hq, Dv], as forward() allocates it. kernel_index pins
        the kernel (as `fagen check` does) instead of letting the runtime choose."""
        p = self._problem(q, k, v, **variant)
        plan = _Plan()
        if kernel_index is None:
            _check(library().fagen_plan_forward(self._handle, ctypes.byref(p), ctypes.byref(plan)))
        else:
            _check(library().fagen_plan_forward_kernel(self._handle, ctypes.byref(p), kernel_index,
                                                       ctypes.byref(plan)))
        return Plan(self, plan)

    def plan_forward_paged(self, q, k_cache, v_cache, block_table, seqlen_k=None,
                           kernel_index=None, cu_seqlens_q=None, max_seqlen_q=None, **variant):
        """Plans a call over a paged KV cache (fagen_plan_forward_paged): k_cache / v_cache
        [num_pages, page_size, Hkv, D] (the head dim contiguous), block_table int32 [B,
        max_pages] (rows contiguous); seqlen_k: the longest cache length of the call (default:
        max_pages x page_size). Decode: q [B, T, Hq, D] (T at most the kernel's q_tokens).
        Chunked prefill (a varlen paged forward kernel): q packed [total_q, Hq, D], cu_seqlens_q
        int32 [B + 1] and max_seqlen_q, the most new tokens of a sequence. The keywords of
        plan_forward (mask, softcap, ...; no cu_seqlens_k / max_seqlen_k: the keys are the
        pages). Run it with Plan.run_paged."""
        varlen = cu_seqlens_q is not None
        if q.dim() != (3 if varlen else 4):
            layout = ("[total_q, heads_q, head_dim] (cu_seqlens_q given)" if varlen
                      else "[batch, tokens, heads_q, head_dim]")
            raise ValueError(f"q must be {layout}, got shape {tuple(q.shape)}")
        for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
            if t.dim() != 4:
                raise ValueError(f"{name} must be [num_pages, page_size, heads_kv, head_dim], got "
                                 f"shape {tuple(t.shape)}")
        if block_table.dim() != 2 or block_table.stride()[1] != 1:
            raise ValueError(f"block_table must be [batch, max_pages] with contiguous rows, got "
                             f"shape {tuple(block_table.shape)}")
        for name in ("cu_seqlens_k", "max_seqlen_k"):
            if variant.get(name) is not None:
                raise ValueError(f"{name} is not read by a paged call (its keys are the block "
                                 f"table's pages): pass seqlen_k, the longest cache length, "
                                 f"and seqused_k to run_paged")
        if varlen and max_seqlen_q is None:
            raise ValueError("a varlen paged call (cu_seqlens_q given) needs max_seqlen_q, the "
                             "most query tokens of a sequence")
        batch = cu_seqlens_q.shape[0] - 1 if varlen else q.shape[0]
        if block_table.shape[0] != batch:
            source = "cu_seqlens_q's entries - 1" if varlen else "q.shape[0]"
            raise ValueError(f"block_table has {block_table.shape[0]} rows but the call has "
                             f"batch {batch} ({source}): one row of page ids per sequence")
        num_pages, page_size, _, _ = k_cache.shape
        p = self._problem(q, k_cache, v_cache, cu_seqlens_q=cu_seqlens_q,
                          max_seqlen_q=max_seqlen_q, paged=True, **variant)
        max_pages = block_table.shape[1]
        p.seqlen_k = max_pages * page_size if seqlen_k is None else int(seqlen_k)
        if varlen:
            p.total_k = p.seqlen_k  # no packed keys: the runtime checks total_k == seqlen_k
        g = _PagedKv()
        g.page_size, g.num_pages, g.max_pages_per_seq = page_size, num_pages, max_pages
        g.block_table_stride = block_table.stride()[0]
        plan = _Plan()
        if kernel_index is None:
            _check(library().fagen_plan_forward_paged(self._handle, ctypes.byref(p),
                                                      ctypes.byref(g), ctypes.byref(plan)))
        else:
            _check(library().fagen_plan_forward_paged_kernel(
                self._handle, ctypes.byref(p), ctypes.byref(g), kernel_index, ctypes.byref(plan)))
        return Plan(self, plan)

    def forward_paged(self, q, k_cache, v_cache, block_table, seqused_k, seqlen_k=None,
                      stream=None, args=None, cu_seqlens_q=None, max_seqlen_q=None, **variant):
        """Plans, allocates O (contiguous: [B, T, Hq, Dv], varlen [total_q, Hq, Dv]) and LSE
        ([B, Hq, T], varlen [Hq, total_q]), runs over the paged cache; returns (o, lse). Bad
        entries are reported by Plan.status, which this does not call."""
        import torch
        plan = self.plan_forward_paged(q, k_cache, v_cache, block_table, seqlen_k,
                                       cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q,
                                       **variant)
        dv = v_cache.shape[-1]
        if cu_seqlens_q is not None:
            total, hq, _ = q.shape
            o = torch.empty((total, hq, dv), dtype=q.dtype, device=q.device)
            lse = torch.empty((hq, total), dtype=torch.float32, device=q.device)
        else:
            b, t, hq, _ = q.shape
            o = torch.empty((b, t, hq, dv), dtype=q.dtype, device=q.device)
            lse = torch.empty((b, hq, t), dtype=torch.float32, device=q.device)
        plan.run_paged(q, k_cache, v_cache, o, lse, block_table, seqused_k, stream, args,
                       cu_seqlens_q=cu_seqlens_q)
        return o, lse

    def plan_backward(self, q, k, v, deterministic=False, kernel_index=None, **variant):
        """Picks the backward kernel for the forward call (the same keywords as plan_forward);
        dO, dQ, dK, dV contiguous like q/k/v in BSHD. deterministic: bitwise-repeatable
        gradients."""
        p = self._problem(q, k, v, **variant)
        plan = _Plan()
        det = int(bool(deterministic))
        if kernel_index is None:
            _check(library().fagen_plan_backward(self._handle, ctypes.byref(p), det,
                                                 ctypes.byref(plan)))
        else:
            _check(library().fagen_plan_backward_kernel(self._handle, ctypes.byref(p), det,
                                                        kernel_index, ctypes.byref(plan)))
        return Plan(self, plan)

    def plan_merge_states(self, o_states, lse_states, o, lse=None):
        """Plans the merge of attention states by their LSE (fagen_plan_merge_states):
        o_states [S, B, T, H, D] (fp16 / bf16), lse_states float32 [S, B, H, T] into o
        [B, T, H, D] and lse float32 [B, H, T] (None: not written); any strides with the head
        dim contiguous. Needs a decode kernel of that dtype and head dim in the bundle."""
        dtype = _DTYPES.get(str(o_states.dtype))
        if dtype is None:
            raise ValueError(f"o_states.dtype is {o_states.dtype}; merges take float16 or "
                             f"bfloat16 states")
        if o_states.dim() != 5 or lse_states.dim() != 4 or o.dim() != 4:
            raise ValueError("o_states must be [states, batch, seq, heads, head_dim], lse_states "
                             "[states, batch, heads, seq], o [batch, seq, heads, head_dim]; got "
                             f"{tuple(o_states.shape)}, {tuple(lse_states.shape)}, {tuple(o.shape)}")
        m = _MergeProblem()
        m.num_states, m.batch, m.seqlen, m.heads, m.head_dim = o_states.shape
        m.dtype = dtype
        so, sl = o_states.stride(), lse_states.stride()
        if so[-1] != 1 or o.stride(-1) != 1:
            raise ValueError("o_states' and o's head dims must be contiguous (stride 1)")
        m.o_states_strides[:] = (so[0], so[1], so[3], so[2])
        m.lse_states_strides[:] = (sl[0], sl[1], sl[2], sl[3])
        m.o_strides[:] = (o.stride(0), o.stride(2), o.stride(1))
        ls = lse.stride() if lse is not None else (m.heads * m.seqlen, m.seqlen, 1)
        m.lse_strides[:] = ls
        plan = _Plan()
        _check(library().fagen_plan_merge_states(self._handle, ctypes.byref(m), ctypes.byref(plan)))
        return Plan(self, plan)

    def merge_states(self, o_states, lse_states, stream=None):
        """Merges attention states by their LSE: returns (o [B, T, H, D], lse [B, H, T]) for
        o_states [S, B, T, H, D] and lse_states [S, B, H, T] (see plan_merge_states)."""
        import torch
        _, b, t, h, d = o_states.shape
        o = torch.empty((b, t, h, d), dtype=o_states.dtype, device=o_states.device)
        lse = torch.empty((b, h, t), dtype=torch.float32, device=o_states.device)
        self.plan_merge_states(o_states, lse_states, o, lse).run_merge_states(
            o_states, lse_states, o, lse, stream)
        return o, lse

    def forward(self, q, k, v, stream=None, args=None, **variant):
        """Plans, allocates O (contiguous BSHD) and LSE, runs; returns (o, lse)."""
        import torch
        plan = self.plan_forward(q, k, v, **variant)
        if variant.get("cu_seqlens_q") is not None:
            total, hq, _ = q.shape
            o = torch.empty((total, hq, v.shape[-1]), dtype=q.dtype, device=q.device)
            lse = torch.empty((hq, total), dtype=torch.float32, device=q.device)
        else:
            b, sq, hq, _ = q.shape
            o = torch.empty((b, sq, hq, v.shape[-1]), dtype=q.dtype, device=q.device)
            lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
        plan.run(q, k, v, o, lse, stream, args)
        return o, lse

    def backward(self, q, k, v, o, lse, do, deterministic=False, stream=None, args=None,
                 **variant):
        """Plans, allocates dQ, dK, dV (contiguous, like q, k, v) and the workspace, runs;
        returns (dq, dk, dv). `args` must repeat the forward's (dropout seed and offset)."""
        import torch
        plan = self.plan_backward(q, k, v, deterministic=deterministic, **variant)
        dq, dk, dv = (torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
        workspace = torch.empty(max(plan.workspace_bytes, 1), dtype=torch.uint8, device=q.device)
        plan.run_backward(q, k, v, o, lse, do.contiguous(), dq, dk, dv, workspace, stream, args)
        return dq, dk, dv
