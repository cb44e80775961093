"""fagen.attention: the runtime's forward and backward as PyTorch custom ops; fagen.merge_states:
the merge of attention states by their log-sum-exp (fagen::merge_states, not differentiable);
fagen.decode_paged: decode over a paged KV cache (fagen::decode_paged, not differentiable);
fagen.prefill_paged: chunked prefill, packed new tokens over a paged KV cache
(fagen::prefill_paged, not differentiable).

Two ops, fagen::attention_forward and fagen::attention_backward (torch.library.custom_op), each
with a fake implementation (shapes only: FakeTensor, meta tensors, torch.compile) and the
forward's autograd formula calling the backward, so Dynamo traces fagen.attention without a
graph break and AOTAutograd sees both passes. Dropout draws its seed and offset from torch's CUDA
generator inside the forward op, as SDPA does, and returns them (rng_state, int64 [2] on the
CPU) for the backward, which regenerates the forward's mask.
"""
from typing import Optional

import torch

from . import bundle as _bundle
from . import ondemand as _ondemand
from . import runtime

Tensor = torch.Tensor
_MASKS = ("none", "causal", "window")
_ALIGNS = ("bottom_right", "top_left")
_BLOCKS = (64, 128, 192, 256)
# Philox offsets of torch's CUDA generator advance in multiples of 4. fagen's dropout keys one
# Philox call by (offset, batch, head, row, column block), so one step per call keeps calls apart.
_OFFSET_STEP = 4


def attention(q, k, v, *, causal=False, window=None, softcap=0.0, alibi_slopes=None,
              dropout_p=0.0, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
              max_seqlen_k=None, block_mask=None, block_size=None, softmax_scale=None,
              mask_align="bottom_right", deterministic=False, return_lse=False, bundle=None):
    """softmax(q k^T * softmax_scale [+ variant]) v, as flash_attn_func / flash_attn_varlen_func.

    q [batch, seqlen_q, heads_q, head_dim], k [batch, seqlen_k, heads_kv, head_dim],
    v [batch, seqlen_k, heads_kv, head_dim_v] (float16 or bfloat16, CUDA; heads_q a multiple
    of heads_kv: GQA/MQA). Varlen: q [total_q, heads_q, head_dim], k and v [total_k, ...] packed,
    cu_seqlens_q/k int32 [batch + 1], max_seqlen_q/k the longest sequences.
    causal: query i sees keys j <= i + seqlen_k - seqlen_q (mask_align="bottom_right", as
    flash_attn >= 2.1) or j <= i ("top_left", as SDPA's is_causal). window=(left, right): keys
    within left before and right after that diagonal (-1: unbounded); with causal, right is 0.
    softcap > 0: cap * tanh(logit / cap). alibi_slopes: float32 [heads_q] or [batch, heads_q].
    dropout_p: on the probabilities, seeded from torch's CUDA generator. block_mask: uint8
    [batch, heads_q, row blocks, column blocks] (strides may be 0 to broadcast) of block_size
    tokens a side (64, 128, 192 or 256; inferred when only one fits the shapes).
    deterministic: bitwise-repeatable dq, dk, dv. bundle: a fagen.Bundle to use alone; None
    searches every loaded bundle and builds a missing kernel on demand.

    Returns out like q with head_dim_v, and with return_lse also the log-sum-exp (float32
    [batch, heads_q, seqlen_q], varlen [heads_q, total_q]; not differentiable)."""
    varlen = cu_seqlens_q is not None
    _check_inputs(q, k, v, varlen, cu_seqlens_k, max_seqlen_q, max_seqlen_k, alibi_slopes,
                  softcap, dropout_p, mask_align)
    mask, left, right = _mask(causal, window)
    block = _block_size(block_mask, block_size, q, k, varlen, max_seqlen_q, max_seqlen_k)
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    bundle_id = 0 if bundle is None else bundle.id
    out, lse, _ = torch.ops.fagen.attention_forward(
        q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, block_mask,
        int(max_seqlen_q or 0), int(max_seqlen_k or 0), mask, mask_align, left, right,
        float(softcap), float(dropout_p), float(softmax_scale or 0.0), block,
        bool(deterministic), bundle_id)
    return (out, lse) if return_lse else out


def _check_inputs(q, k, v, varlen, cu_seqlens_k, max_seqlen_q, max_seqlen_k, alibi_slopes,
                  softcap, dropout_p, mask_align):
    dims = 3 if varlen else 4
    layout = "[total, heads, head_dim] (varlen)" if varlen else "[batch, seqlen, heads, head_dim]"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != dims:
            raise ValueError(f"fagen.attention: {name} must be {layout}, got shape "
                             f"{tuple(t.shape)}")
        if t.dtype not in (torch.float16, torch.bfloat16):
            raise TypeError(f"fagen.attention: {name}.dtype is {t.dtype}; fagen kernels take "
                            f"float16 or bfloat16")
        if t.dtype != q.dtype:
            raise TypeError(f"fagen.attention: {name}.dtype is {t.dtype} but q.dtype is {q.dtype}")
        if t.device.type not in ("cuda", "meta"):
            raise ValueError(f"fagen.attention: {name} is on {t.device}; fagen kernels run on "
                             f"CUDA tensors")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"fagen.attention: q's head_dim {q.shape[-1]} != k's {k.shape[-1]}")
    if k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"fagen.attention: k {tuple(k.shape)} and v {tuple(v.shape)} differ "
                         f"before the head dim")
    if q.shape[-2] % k.shape[-2] != 0:
        raise ValueError(f"fagen.attention: heads_q ({q.shape[-2]}) is not a multiple of "
                         f"heads_kv ({k.shape[-2]})")
    if not varlen and q.shape[0] != k.shape[0]:
        raise ValueError(f"fagen.attention: q has batch {q.shape[0]}, k {k.shape[0]}")
    if varlen and (cu_seqlens_k is None or max_seqlen_q is None or max_seqlen_k is None):
        raise ValueError("fagen.attention: varlen (cu_seqlens_q given) needs cu_seqlens_k, "
                         "max_seqlen_q and max_seqlen_k")
    if not varlen and cu_seqlens_k is not None:
        raise ValueError("fagen.attention: cu_seqlens_k given without cu_seqlens_q")
    if alibi_slopes is not None and softcap:
        raise ValueError("fagen.attention: softcap and alibi_slopes are both score mods; a "
                         "kernel applies one")
    if alibi_slopes is not None and alibi_slopes.dtype != torch.float32:
        raise TypeError(f"fagen.attention: alibi_slopes.dtype is {alibi_slopes.dtype}, "
                        f"expected float32")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"fagen.attention: dropout_p is {dropout_p}, expected [0, 1)")
    if mask_align not in _ALIGNS:
        raise ValueError(f"fagen.attention: mask_align is {mask_align!r}, expected one of "
                         f"{_ALIGNS}")


def _mask(causal, window):
    """(mask, window_left, window_right) as fagen_fwd_problem spells them."""
    if window is None or tuple(window) == (-1, -1):
        return ("causal" if causal else "none"), -1, -1
    left, right = (int(x) for x in window)
    return "window", left, (0 if causal else right)


def _block_size(block_mask, block_size, q, k, varlen, max_seqlen_q, max_seqlen_k):
    if block_mask is None:
        return 0
    if block_mask.dim() != 4 or block_mask.dtype != torch.uint8:
        raise ValueError(f"fagen.attention: block_mask must be uint8 [batch, heads_q, row blocks, "
                         f"column blocks], got {block_mask.dtype} {tuple(block_mask.shape)}")
    sq = max_seqlen_q if varlen else q.shape[1]
    sk = max_seqlen_k if varlen else k.shape[1]
    rows, cols = block_mask.shape[2], block_mask.shape[3]
    fits = [b for b in _BLOCKS if -(-sq // b) == rows and -(-sk // b) == cols]
    if block_size is not None:
        if block_size not in fits:
            raise ValueError(f"fagen.attention: a block_mask of {rows} x {cols} blocks does not "
                             f"cover seqlen {sq} x {sk} in blocks of {block_size}")
        return int(block_size)
    if len(fits) != 1:
        raise ValueError(f"fagen.attention: a block_mask of {rows} x {cols} blocks fits "
                         f"block sizes {fits} for seqlen {sq} x {sk}: pass block_size")
    return fits[0]


def _variant(mask, mask_align, left, right, softcap, alibi_slopes, dropout_p, cu_seqlens_q,
             cu_seqlens_k, max_seqlen_q, max_seqlen_k, block_size, softmax_scale):
    """The keywords of runtime.Bundle._problem."""
    return dict(mask=mask, mask_align=mask_align, window=(left, right), softcap=softcap,
                alibi=alibi_slopes is not None, dropout_p=dropout_p, cu_seqlens_q=cu_seqlens_q,
                cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q or None,
                max_seqlen_k=max_seqlen_k or None, softmax_scale=softmax_scale,
                block_sparse=("runtime", block_size) if block_size else None)


def _plan(pass_, bundle_id, q, k, v, deterministic, variant):
    device = q.device
    return _bundle.plan(pass_, bundle_id, device.index, lambda: torch.cuda.get_device_capability(
        device), q, k, v, deterministic=deterministic, **variant)


def _u64(x):
    return x & (2**64 - 1)


def _i64(x):
    return x - 2**64 if x >= 2**63 else x


@torch.library.custom_op("fagen::attention_forward", mutates_args=(), device_types="cuda")
def _forward(q: Tensor, k: Tensor, v: Tensor, alibi_slopes: Optional[Tensor],
             cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
             block_mask: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int, mask: str,
             mask_align: str, window_left: int, window_right: int, softcap: float,
             dropout_p: float, softmax_scale: float, block_size: int, deterministic: bool,
             bundle: int) -> tuple[Tensor, Tensor, Tensor]:
    variant = _variant(mask, mask_align, window_left, window_right, softcap, alibi_slopes,
                       dropout_p, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                       block_size, softmax_scale)
    with torch.cuda.device(q.device):
        _, plan = _plan("fwd", bundle, q, k, v, False, variant)
        out, lse, rng_state = _forward_outputs(q, v, cu_seqlens_q is not None)
        seed = offset = 0
        if dropout_p > 0:
            generator = torch.cuda.default_generators[q.device.index]
            seed, offset = _u64(generator.initial_seed()), generator.get_offset()
            generator.set_offset(offset + _OFFSET_STEP)
        rng_state.copy_(torch.tensor([_i64(seed), offset], dtype=torch.int64))
        args = runtime.run_args(alibi_slopes, block_mask, cu_seqlens_q, cu_seqlens_k, seed, offset)
        plan.run(q, k, v, out, lse, args=args)
    return out, lse, rng_state


def _forward_outputs(q, v, varlen):
    """Uninitialized out (contiguous BSHD, as the plan assumes), lse and rng_state (seed,
    offset)."""
    if varlen:
        out = q.new_empty((q.shape[0], q.shape[1], v.shape[-1]))
        lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    else:
        out = q.new_empty((q.shape[0], q.shape[1], q.shape[2], v.shape[-1]))
        lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    return out, lse, torch.empty(2, dtype=torch.int64, device="cpu")


@_forward.register_fake
def _forward_fake(q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, *rest):
    return _forward_outputs(q, v, cu_seqlens_q is not None)


@torch.library.custom_op("fagen::attention_backward", mutates_args=(), device_types="cuda")
def _backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
              rng_state: Tensor, alibi_slopes: Optional[Tensor], cu_seqlens_q: Optional[Tensor],
              cu_seqlens_k: Optional[Tensor], block_mask: Optional[Tensor], max_seqlen_q: int,
              max_seqlen_k: int, mask: str, mask_align: str, window_left: int,
              window_right: int, softcap: float, dropout_p: float, softmax_scale: float,
              block_size: int, deterministic: bool, bundle: int) -> tuple[Tensor, Tensor, Tensor]:
    variant = _variant(mask, mask_align, window_left, window_right, softcap, alibi_slopes,
                       dropout_p, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                       block_size, softmax_scale)
    with torch.cuda.device(q.device):
        _, plan = _plan("bwd", bundle, q, k, v, deterministic, variant)
        seed, offset = (int(x) for x in rng_state.tolist())
        args = runtime.run_args(alibi_slopes, block_mask, cu_seqlens_q, cu_seqlens_k, _u64(seed),
                                offset)
        dq, dk, dv = _backward_outputs(q, k, v)
        workspace = torch.empty(max(plan.workspace_bytes, 1), dtype=torch.uint8, device=q.device)
        # The plan describes O, dO, dQ, dK, dV as contiguous (runtime.Bundle._problem).
        plan.run_backward(q, k, v, out.contiguous(), lse, dout.contiguous(), dq, dk, dv,
                          workspace, args=args)
    return dq, dk, dv


def _backward_outputs(q, k, v):
    """dq, dk, dv: contiguous whatever the strides of q, k, v."""
    return tuple(t.new_empty(t.shape) for t in (q, k, v))


@_backward.register_fake
def _backward_fake(dout, q, k, v, out, lse, rng_state, *rest):
    return _backward_outputs(q, k, v)


_FORWARD_ARGS = ("q", "k", "v", "alibi_slopes", "cu_seqlens_q", "cu_seqlens_k", "block_mask",
                 "max_seqlen_q", "max_seqlen_k", "mask", "mask_align", "window_left",
                 "window_right", "softcap", "dropout_p", "softmax_scale", "block_size",
                 "deterministic", "bundle")


def _setup_context(ctx, inputs, output):
    named = dict(zip(_FORWARD_ARGS, inputs))
    out, lse, rng_state = output
    ctx.save_for_backward(named["q"], named["k"], named["v"], out, lse, rng_state,
                          named["alibi_slopes"], named["cu_seqlens_q"], named["cu_seqlens_k"],
                          named["block_mask"])
    ctx.scalars = [named[n] for n in _FORWARD_ARGS[7:]]
    ctx.mark_non_differentiable(lse, rng_state)


def _autograd_backward(ctx, dout, dlse, drng):
    q, k, v, out, lse, rng_state, alibi, cu_q, cu_k, block_mask = ctx.saved_tensors
    dq, dk, dv = torch.ops.fagen.attention_backward(dout, q, k, v, out, lse, rng_state, alibi,
                                                    cu_q, cu_k, block_mask, *ctx.scalars)
    return (dq, dk, dv) + (None,) * (len(_FORWARD_ARGS) - 3)


_forward.register_autograd(_autograd_backward, setup_context=_setup_context)


def merge_states(o_states, lse_states, *, bundle=None):
    """Merges attention states by their log-sum-exp, as fagen_run_merge_states: o_states
    [states, batch, seqlen, heads, head_dim] (float16 or bfloat16, CUDA, the head dim
    contiguous), lse_states float32 [states, batch, heads, seqlen]: e.g. the out and lse of
    fagen.attention(..., return_lse=True) over disjoint sets of keys (cascade / shared-prefix
    attention, context parallelism), stacked. Returns (out [batch, seqlen, heads, head_dim],
    lse float32 [batch, heads, seqlen]): the attention over the union of the keys. A row whose
    states all have lse -inf gets out 0 and lse -inf; a state of lse -inf adds nothing.
    Needs a loaded bundle (or `bundle`) with a decode kernel of this dtype and head dim (spec
    passes: [decode]), whose cubin holds the merge. Not differentiable."""
    if o_states.dim() != 5 or lse_states.dim() != 4:
        raise ValueError(f"fagen.merge_states: o_states must be [states, batch, seqlen, heads, "
                         f"head_dim] and lse_states [states, batch, heads, seqlen], got shapes "
                         f"{tuple(o_states.shape)} and {tuple(lse_states.shape)}")
    s, b, t, h, _ = o_states.shape
    if tuple(lse_states.shape) != (s, b, h, t):
        raise ValueError(f"fagen.merge_states: lse_states has shape {tuple(lse_states.shape)}, "
                         f"expected {(s, b, h, t)} for o_states {tuple(o_states.shape)}")
    if o_states.dtype not in (torch.float16, torch.bfloat16) or lse_states.dtype != torch.float32:
        raise TypeError(f"fagen.merge_states: o_states must be float16 or bfloat16 and "
                        f"lse_states float32, got {o_states.dtype} and {lse_states.dtype}")
    if o_states.stride(-1) != 1:
        o_states = o_states.contiguous()
    return torch.ops.fagen.merge_states(o_states, lse_states, 0 if bundle is None else bundle.id)


def _merge_outputs(o_states):
    _, b, t, h, d = o_states.shape
    return (o_states.new_empty((b, t, h, d)),
            o_states.new_empty((b, h, t), dtype=torch.float32))


@torch.library.custom_op("fagen::merge_states", mutates_args=(), device_types="cuda")
def _merge_states(o_states: Tensor, lse_states: Tensor, bundle: int) -> tuple[Tensor, Tensor]:
    out, lse = _merge_outputs(o_states)
    pool = [b for b in _bundle.loaded() if not bundle or b.id == bundle]
    reasons = []
    with torch.cuda.device(o_states.device):
        for b in pool:
            try:
                plan = b.plan_merge_states(o_states, lse_states, out, lse)
            except runtime.FagenError as e:
                if e.status_name != "FAGEN_ERROR_NOT_SUPPORTED":
                    raise
                reasons.append(f"  {b.path}: {e}")
                continue
            plan.run_merge_states(o_states, lse_states, out, lse)
            return out, lse
    dtype = "bf16" if o_states.dtype == torch.bfloat16 else "fp16"
    entry = (f"  - {{name: merge_{dtype}_{o_states.shape[-1]}, dtype: {dtype}, head_dim: "
             f"{o_states.shape[-1]}, passes: [decode]}}")
    raise _ondemand.KernelNotBuilt(
        f"fagen.merge_states: no loaded bundle has a merge kernel for {dtype} states of head dim "
        f"{o_states.shape[-1]}:\n" + "\n".join(reasons or ["  (no bundle loaded)"]) +
        f"\nAdd this variant to a spec, build it and load it with fagen.Bundle:\n{entry}", entry)


@_merge_states.register_fake
def _merge_states_fake(o_states, lse_states, bundle):
    return _merge_outputs(o_states)


def decode_paged(q, k_cache, v_cache, block_table, seqused_k, *, max_seqlen_k, causal=False,
                 window=None, softcap=0.0, softmax_scale=None, mask_align="bottom_right",
                 return_lse=False, bundle=None, k_new=None, v_new=None):
    """Attention of a few query tokens per sequence over a paged KV cache, as FlashAttention's
    flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new, cache_seqlens=seqused_k,
    block_table=block_table): q [batch, tokens, heads_q, head_dim]
    (tokens at most the kernel's decode.q_tokens), k_cache and v_cache [num_pages, page_size,
    heads_kv, head_dim(_v)] (vLLM's layout), block_table int32 [batch, max_pages] (page ids; any
    order, shared pages allowed), seqused_k int32 [batch] (each sequence's cache length, 0 for an
    empty one), max_seqlen_k: the call's longest cache length (an int the host knows, as vLLM's
    max_seq_len; the split count is planned for it; at most max_pages x page_size). causal,
    window, softcap, softmax_scale, mask_align: as fagen.attention, per sequence. Returns out
    [batch, tokens, heads_q, head_dim_v] (and with return_lse the log-sum-exp, float32 [batch,
    heads_q, tokens]). k_new, v_new [batch, tokens, heads_kv, head_dim(_v)]: the query tokens'
    own keys and values, written into the caches (in place) as keys seqused_k[b] + t before the
    attention, which then covers seqused_k[b] + tokens keys (max_seqlen_k must count them: a
    sequence without room gets nothing appended and a wrong output, which Plan.status names);
    seqused_k is not changed (add tokens to it for the next step); the new rows' pages must
    be in the block table and not shared with another sequence of the call. A bad page id or
    length is never loaded or written through (the runtime's
    fagen_paged_kv_status names it; fagen.runtime's Plan.status). Needs a loaded bundle (or
    `bundle`) with a paged decode kernel of the variant and page size (spec kv_cache: paged,
    page_size, passes: [decode]). Not differentiable."""
    if q.dim() != 4 or k_cache.dim() != 4 or v_cache.dim() != 4:
        raise ValueError(f"fagen.decode_paged: q must be [batch, tokens, heads_q, head_dim] and "
                         f"the caches [num_pages, page_size, heads_kv, head_dim], got shapes "
                         f"{tuple(q.shape)}, {tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
    if block_table.dtype != torch.int32 or seqused_k.dtype != torch.int32:
        raise TypeError(f"fagen.decode_paged: block_table and seqused_k must be int32, got "
                        f"{block_table.dtype} and {seqused_k.dtype}")
    if tuple(block_table.shape[:1]) != (q.shape[0],) or tuple(seqused_k.shape) != (q.shape[0],):
        raise ValueError(f"fagen.decode_paged: block_table must be [batch, max_pages] and "
                         f"seqused_k [batch] for batch {q.shape[0]}, got shapes "
                         f"{tuple(block_table.shape)} and {tuple(seqused_k.shape)}")
    if mask_align not in _ALIGNS:
        raise ValueError(f"fagen.decode_paged: mask_align must be one of {_ALIGNS}, got "
                         f"{mask_align!r}")
    mask, left, right = _mask(causal, window)
    if k_new is not None and (k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1):
        raise ValueError("fagen.decode_paged: with k_new / v_new the caches are written in place, "
                         "so their head dim must be contiguous (stride 1); got strides "
                         f"{k_cache.stride()} and {v_cache.stride()}")
    q, k_cache, v_cache = (t if t.stride(-1) == 1 else t.contiguous()
                           for t in (q, k_cache, v_cache))
    block_table = block_table if block_table.stride(-1) == 1 else block_table.contiguous()
    scalars = (int(max_seqlen_k), mask, mask_align, left, right, float(softcap),
               float(softmax_scale or 0.0), 0 if bundle is None else bundle.id)
    if (k_new is None) != (v_new is None):
        raise ValueError("fagen.decode_paged: pass k_new and v_new together, or neither")
    if k_new is None:
        out, lse = torch.ops.fagen.decode_paged(q, k_cache, v_cache, block_table, seqused_k,
                                                *scalars)
    else:
        for name, t, cache in (("k_new", k_new, k_cache), ("v_new", v_new, v_cache)):
            want = (q.shape[0], q.shape[1], cache.shape[2], cache.shape[3])
            if tuple(t.shape) != want or t.dtype != q.dtype:
                raise ValueError(f"fagen.decode_paged: {name} must be [batch, tokens, heads_kv, "
                                 f"head_dim] = {want} of q's dtype {q.dtype}, got "
                                 f"{tuple(t.shape)} {t.dtype}")
        k_new, v_new = (t if t.stride(-1) == 1 else t.contiguous() for t in (k_new, v_new))
        out, lse = torch.ops.fagen.decode_paged_append(q, k_cache, v_cache, k_new, v_new,
                                                       block_table, seqused_k, *scalars)
    return (out, lse) if return_lse else out


def _decode_outputs(q, v_cache):
    b, t, h, _ = q.shape
    return (q.new_empty((b, t, h, v_cache.shape[-1])),
            q.new_empty((b, h, t), dtype=torch.float32))


def _run_paged(op, what, entry, bundle, q, k_cache, v_cache, block_table, seqused_k, out, lse,
               max_seqlen_k, variant, cu_seqlens_q=None, k_new=None, v_new=None):
    """Plans the call on the first loaded bundle (or `bundle`, an id) with a paged kernel for
    it and runs it into out and lse; else KernelNotBuilt naming the spec entry."""
    pool = [b for b in _bundle.loaded() if not bundle or b.id == bundle]
    reasons = []
    with torch.cuda.device(q.device):
        for b in pool:
            try:
                plan = b.plan_forward_paged(q, k_cache, v_cache, block_table, max_seqlen_k,
                                            cu_seqlens_q=cu_seqlens_q, **variant)
            except runtime.FagenError as e:
                if e.status_name != "FAGEN_ERROR_NOT_SUPPORTED":
                    raise
                reasons.append(f"  {b.path}: {e}")
                continue
            plan.run_paged(q, k_cache, v_cache, out, lse, block_table, seqused_k,
                           cu_seqlens_q=cu_seqlens_q, k_new=k_new, v_new=v_new)
            return
    raise _ondemand.KernelNotBuilt(
        f"{op}: no loaded bundle has a {what} for this call:\n" +
        "\n".join(reasons or ["  (no bundle loaded)"]) +
        f"\nAdd this variant to a spec, build it and load it with fagen.Bundle:\n{entry}", entry)


def _dtype_name(q):
    return "bf16" if q.dtype == torch.bfloat16 else "fp16"


def _decode(q, k_cache, v_cache, block_table, seqused_k, max_seqlen_k, mask, mask_align,
            window_left, window_right, softcap, softmax_scale, bundle, k_new=None, v_new=None):
    """The paged decode ops' body: out and lse of the call (with k_new / v_new appended
    first), or KernelNotBuilt with the spec entry that serves it."""
    out, lse = _decode_outputs(q, v_cache)
    variant = dict(mask=mask, mask_align=mask_align, window=(window_left, window_right),
                   softcap=softcap, softmax_scale=softmax_scale)
    dtype, page = _dtype_name(q), k_cache.shape[1]
    entry = (f"  - {{name: paged_{dtype}_{q.shape[-1]}_{page}, dtype: {dtype}, head_dim: "
             f"{q.shape[-1]}, mask: {mask}, passes: [decode], decode: {{q_tokens: "
             f"{q.shape[1]}}}, kv_cache: paged, page_size: {page}}}")
    _run_paged("fagen.decode_paged", "paged decode kernel", entry, bundle, q, k_cache, v_cache,
               block_table, seqused_k, out, lse, max_seqlen_k, variant, k_new=k_new, v_new=v_new)
    return out, lse


@torch.library.custom_op("fagen::decode_paged", mutates_args=(), device_types="cuda")
def _decode_paged(q: Tensor, k_cache: Tensor, v_cache: Tensor, block_table: Tensor,
                  seqused_k: Tensor, max_seqlen_k: int, mask: str, mask_align: str,
                  window_left: int, window_right: int, softcap: float, softmax_scale: float,
                  bundle: int) -> tuple[Tensor, Tensor]:
    return _decode(q, k_cache, v_cache, block_table, seqused_k, max_seqlen_k, mask, mask_align,
                   window_left, window_right, softcap, softmax_scale, bundle)


@_decode_paged.register_fake
def _decode_paged_fake(q, k_cache, v_cache, block_table, seqused_k, max_seqlen_k, mask,
                       mask_align, window_left, window_right, softcap, softmax_scale, bundle):
    return _decode_outputs(q, v_cache)


@torch.library.custom_op("fagen::decode_paged_append", mutates_args=("k_cache", "v_cache"),
                         device_types="cuda")
def _decode_paged_append(q: Tensor, k_cache: Tensor, v_cache: Tensor, k_new: Tensor,
                         v_new: Tensor, block_table: Tensor, seqused_k: Tensor, max_seqlen_k: int,
                         mask: str, mask_align: str, window_left: int, window_right: int,
                         softcap: float, softmax_scale: float,
                         bundle: int) -> tuple[Tensor, Tensor]:
    return _decode(q, k_cache, v_cache, block_table, seqused_k, max_seqlen_k, mask, mask_align,
                   window_left, window_right, softcap, softmax_scale, bundle, k_new, v_new)


@_decode_paged_append.register_fake
def _decode_paged_append_fake(q, k_cache, v_cache, k_new, v_new, block_table, seqused_k,
                              max_seqlen_k, mask, mask_align, window_left, window_right, softcap,
                              softmax_scale, bundle):
    return _decode_outputs(q, v_cache)


def prefill_paged(q, k_cache, v_cache, block_table, seqused_k, *, cu_seqlens_q, max_seqlen_q,
                  max_seqlen_k, causal=False, softmax_scale=None, mask_align="bottom_right",
                  return_lse=False, bundle=None):
    """Chunked prefill over a paged KV cache, as FlashAttention's flash_attn_varlen_func(q,
    k_cache, v_cache, cu_seqlens_q=..., max_seqlen_q=..., max_seqlen_k=..., seqused_k=...,
    block_table=...): each sequence's new query tokens, packed, attend to its whole cache (its
    earlier tokens and, written into the pages before the call, the new ones). q [total_q,
    heads_q, head_dim] packed, cu_seqlens_q int32 [batch + 1] (sequence b's tokens are rows
    cu_seqlens_q[b]:cu_seqlens_q[b + 1]), max_seqlen_q the most new tokens of a sequence;
    k_cache and v_cache [num_pages, page_size, heads_kv, head_dim(_v)] (vLLM's layout),
    block_table int32 [batch, max_pages] (page ids; any order, shared pages allowed), seqused_k
    int32 [batch] (each sequence's cache length, the new tokens included), max_seqlen_k the
    call's longest cache length (an int the host knows; at most max_pages x page_size). causal
    aligns per sequence: with mask_align="bottom_right" (default) new token i of T sees keys up
    to seqused_k[b] - T + i, its own position in the cache. softmax_scale: default
    1/sqrt(head_dim). Returns out [total_q, heads_q, head_dim_v] (and with return_lse the
    log-sum-exp, float32 [heads_q, total_q]). A bad page id or length is never loaded through
    (fagen.runtime's Plan.status names it). Needs a loaded bundle (or `bundle`) with a paged
    varlen forward kernel of the variant and page size (spec varlen: true, kv_cache: paged,
    page_size). Not differentiable."""
    if q.dim() != 3 or k_cache.dim() != 4 or v_cache.dim() != 4:
        raise ValueError(f"fagen.prefill_paged: q must be [total_q, heads_q, head_dim] (packed) "
                         f"and the caches [num_pages, page_size, heads_kv, head_dim], got shapes "
                         f"{tuple(q.shape)}, {tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
    if q.dtype not in (torch.float16, torch.bfloat16) or not q.dtype == k_cache.dtype == \
            v_cache.dtype:
        raise TypeError(f"fagen.prefill_paged: q, k_cache and v_cache must be float16 or "
                        f"bfloat16 alike, got {q.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("block_table", block_table),
                    ("seqused_k", seqused_k)):
        if t.dtype != torch.int32:
            raise TypeError(f"fagen.prefill_paged: {name} must be int32, got {t.dtype}")
    batch = cu_seqlens_q.shape[0] - 1 if cu_seqlens_q.dim() == 1 else -1
    if (batch < 1 or block_table.dim() != 2 or block_table.shape[0] != batch or
            tuple(seqused_k.shape) != (batch,)):
        raise ValueError(f"fagen.prefill_paged: cu_seqlens_q must be [batch + 1], block_table "
                         f"[batch, max_pages] and seqused_k [batch], got shapes "
                         f"{tuple(cu_seqlens_q.shape)}, {tuple(block_table.shape)} and "
                         f"{tuple(seqused_k.shape)}")
    if mask_align not in _ALIGNS:
        raise ValueError(f"fagen.prefill_paged: mask_align must be one of {_ALIGNS}, got "
                         f"{mask_align!r}")
    q, k_cache, v_cache = (t if t.stride(-1) == 1 else t.contiguous()
                           for t in (q, k_cache, v_cache))
    block_table = block_table if block_table.stride(-1) == 1 else block_table.contiguous()
    cu_seqlens_q, seqused_k = cu_seqlens_q.contiguous(), seqused_k.contiguous()
    out, lse = torch.ops.fagen.prefill_paged(
        q, k_cache, v_cache, block_table, seqused_k, cu_seqlens_q, int(max_seqlen_q),
        int(max_seqlen_k), "causal" if causal else "none", mask_align,
        float(softmax_scale or 0.0), 0 if bundle is None else bundle.id)
    return (out, lse) if return_lse else out


def _prefill_outputs(q, v_cache):
    total, h, _ = q.shape
    return (q.new_empty((total, h, v_cache.shape[-1])),
            q.new_empty((h, total), dtype=torch.float32))


@torch.library.custom_op("fagen::prefill_paged", mutates_args=(), device_types="cuda")
def _prefill_paged(q: Tensor, k_cache: Tensor, v_cache: Tensor, block_table: Tensor,
                   seqused_k: Tensor, cu_seqlens_q: Tensor, max_seqlen_q: int,
                   max_seqlen_k: int, mask: str, mask_align: str, softmax_scale: float,
                   bundle: int) -> tuple[Tensor, Tensor]:
    out, lse = _prefill_outputs(q, v_cache)
    variant = dict(mask=mask, mask_align=mask_align, softmax_scale=softmax_scale,
                   max_seqlen_q=max_seqlen_q)
    dtype, page, d, dv = _dtype_name(q), k_cache.shape[1], q.shape[-1], v_cache.shape[-1]
    dims = f"head_dim: {d}" if d == dv else f"head_dim_qk: {d}, head_dim_v: {dv}"
    align = ", mask_align: top_left" if mask != "none" and mask_align == "top_left" else ""
    entry = (f"  - {{name: prefill_paged_{dtype}_{d}_{page}, dtype: {dtype}, {dims}, "
             f"mask: {mask}{align}, varlen: true, kv_cache: paged, page_size: {page}}}")
    _run_paged("fagen.prefill_paged", "paged varlen forward kernel", entry, bundle, q, k_cache,
               v_cache, block_table, seqused_k, out, lse, max_seqlen_k, variant, cu_seqlens_q)
    return out, lse


@_prefill_paged.register_fake
def _prefill_paged_fake(q, k_cache, v_cache, block_table, seqused_k, cu_seqlens_q,
                        max_seqlen_q, max_seqlen_k, mask, mask_align, softmax_scale, bundle):
    return _prefill_outputs(q, v_cache)
