"""fagen: FlashAttention kernels compiled ahead of time, for PyTorch.

    import fagen
    fagen.Bundle("attn.fab")                          # optional: prebuilt kernels (fagen build)
    out = fagen.attention(q, k, v, causal=True)       # q, k, v [batch, seqlen, heads, head_dim]
    out, lse = fagen.merge_states(o_states, lse_states)  # attention states merged by their LSE
    out = fagen.decode_paged(q, k_cache, v_cache, block_table, seqused_k, max_seqlen_k=4096)
    out = fagen.prefill_paged(q, k_cache, v_cache, block_table, seqused_k, cu_seqlens_q=cu_q,
                              max_seqlen_q=512, max_seqlen_k=4096, causal=True)  # q packed
    out = fagen.ring_attention(q, k, v, causal=True)  # this rank's shard (fagen.ring: zig-zag)

fagen.attention is the custom op fagen::attention_forward (+ its backward): autograd, FakeTensor,
torch.compile(fullgraph=True) and torch.library.opcheck work with it. fagen.runtime is the
ctypes binding of the C runtime beneath (no torch needed to load and list a bundle).
"""
from . import runtime
from .bundle import Bundle, loaded
from .ondemand import KernelNotBuilt
from .runtime import FagenError, version

try:
    import torch  # noqa: F401
except ImportError:  # the runtime binding works without torch; fagen.attention needs it
    def attention(*args, **kwargs):
        raise ImportError("fagen.attention needs PyTorch: pip install torch")

    def merge_states(*args, **kwargs):
        raise ImportError("fagen.merge_states needs PyTorch: pip install torch")

    def decode_paged(*args, **kwargs):
        raise ImportError("fagen.decode_paged needs PyTorch: pip install torch")

    def prefill_paged(*args, **kwargs):
        raise ImportError("fagen.prefill_paged needs PyTorch: pip install torch")

    def ring_attention(*args, **kwargs):
        raise ImportError("fagen.ring_attention needs PyTorch: pip install torch")
else:
    from .ops import attention, decode_paged, merge_states, prefill_paged
    from .ring import ring_attention

__all__ = ["Bundle", "FagenError", "KernelNotBuilt", "attention", "decode_paged", "loaded",
           "merge_states", "prefill_paged", "ring_attention", "runtime", "version"]
