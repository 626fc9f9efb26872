"""2:4-sparse converted modules: packed weights (sparsity.packing) as plain buffers, forward through the
sparse fused ops.

FusedSparseLinear       one Linear (+ optional activation), W [N, K] 2:4    -> 1 op
FusedSparseGatedLinear  gate and up stacked as one 2:4 [2H, K] weight       -> 1 op: act(gate) ⊙ up
(blocks reuse FusedMLP / FusedGatedMLP from fused.modules.)

Buffers: ``values`` [N, K/2] (int8 / float8_e4m3fn with ``scale`` [N] fp32, or bfloat16 with no scale),
``meta`` [N, ceil(K/8)] uint8, ``bias``. In bytes per original weight: 0.625 + 4/K for 8-bit values
(int8, fp8), 1.125 for bf16. On CUDA, 8-bit values with N and K multiples of 64: ``meta`` is tiled
[N/64, K/64, 512] and stored right after ``values`` in one buffer, which is cuSPARSELt's compressed weight
(fused.dispatch.TILED_META): every route runs on the same 0.625 bytes per weight. Checkpoints always hold
row-major meta.
"""
from __future__ import annotations

import torch

from fused import dispatch, ops
from fused.modules import _Fused8bit, _input_for, _use_op, check_pair_rows
from lowbit import dequantize, quantize_weight
from sparsity.masks import is_24_sparse, magnitude_mask_24
from sparsity.packing import check_packable_k, expand_24, meta_columns, pack_24, tile_meta, untile_meta

VALUE_FORMATS = {"int8": torch.int8, "float8_e4m3": torch.float8_e4m3fn, "bfloat16": torch.bfloat16}


def _value_dtype(fmt: str) -> torch.dtype:
    try:
        return VALUE_FORMATS[str(fmt)]
    except KeyError:
        raise ValueError(f"2:4 values format must be one of {sorted(VALUE_FORMATS)}, got {fmt!r}") from None


def prepare_24(weight: torch.Tensor, prune: bool, where: str) -> torch.Tensor:
    """The weight as 2:4: unchanged when it already is; magnitude-pruned when ``prune``; else a ValueError.

    Magnitude pruning leaves rows that are already 2:4 as they are (their non-zeros are the top 2 of each
    group), so a stacked gate/up weight whose gate alone was Wanda-pruned keeps the gate's mask."""
    w = weight.detach()
    check_packable_k(w.shape[1], where)
    if is_24_sparse(w):
        return w
    if not prune:
        raise ValueError(f"{where}: weight is not 2:4 sparse and prune=False; prune the model first "
                         "(sparsity.prune_24_(model, 'magnitude' | 'wanda', ...)) or convert with prune=True")
    return w * magnitude_mask_24(w.abs())


class _Sparse24(_Fused8bit):
    """Shared packed-buffer layout; checkpoint checks (dtype and shape per key) come from _Fused8bit."""

    sparsity = "2:4"

    def _init_weight(self, n, k, fmt, bias, bias_dtype, device):
        check_packable_k(k, type(self).__name__)
        dtype = _value_dtype(fmt)
        if self.dynamic and dtype == torch.bfloat16:
            raise ValueError("dynamic (W8A8) activations need 8-bit values; bfloat16 2:4 is weight-only")
        self.register_buffer("values", torch.empty(n, k // 2, dtype=dtype, device=device))
        self.register_buffer("meta", torch.empty(n, meta_columns(k), dtype=torch.uint8, device=device))
        self.register_buffer("scale", None if dtype == torch.bfloat16 else
                             torch.empty(n, dtype=torch.float32, device=device))
        self.register_buffer("bias", torch.empty(n, dtype=bias_dtype, device=device) if bias else None)

    def _pack_from(self, weight, bias, prune, where):
        w = prepare_24(weight, prune, where)
        if self.scale is None:
            q = w.to(torch.bfloat16)
        else:
            q, s = quantize_weight(w, self.fmt)  # zeros stay zeros: q is 2:4 too
            self.scale.copy_(s)
        values, meta = pack_24(q, where)
        if self.meta.dim() == 3:
            self.set_tiled_meta(False)
        self.values.copy_(values)
        self.meta.copy_(meta)
        if bias is not None:
            self.bias.copy_(bias.detach())
        self.source_bytes = weight.numel() * weight.element_size() + (
            bias.numel() * bias.element_size() if bias is not None else 0)
        self._sync_meta()
        return self

    @property
    def tiled_meta(self) -> bool:
        """Whether ``meta`` is in cuSPARSELt's tiles (sparsity.packing.tile_meta) rather than row-major."""
        return self.meta.dim() == 3

    def set_tiled_meta(self, tiled: bool):
        """Re-lay ``meta``: tiled, in one new buffer right after a copy of ``values`` (the buffer cuSPARSELt
        runs on), or row-major, with ``values`` in a buffer of its own. Done on its own by moves to and
        from CUDA (see fused.dispatch.TILED_META); this is for tests and explicit control."""
        if tiled:
            n, half = self.values.shape
            meta = self.meta if self.meta.dim() == 3 else tile_meta(self.meta)
            buf = torch.empty(n * half + meta.numel(), dtype=torch.uint8, device=self.values.device)
            buf[:n * half].copy_(self.values.reshape(-1).view(torch.uint8))
            buf[n * half:].copy_(meta.reshape(-1))
            self.values = buf[:n * half].view(self.values.dtype).view(n, half)
            self.meta = buf[n * half:].view(meta.shape)
        elif self.meta.dim() == 3:
            self.meta = untile_meta(self.meta)
            self.values = self.values.clone()  # frees the shared buffer
        return self

    def _sync_meta(self):
        want = dispatch.tiled_meta_wanted(self.values)
        if want and not dispatch.shares_buffer(self.values, self.meta):
            self.set_tiled_meta(True)
        elif not want and self.meta.dim() == 3:
            self.set_tiled_meta(False)

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)  # values / meta moved one by one: the layout follows the new device
        self._sync_meta()
        return self

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if self.meta.dim() == 3:  # checkpoints hold row-major meta, whatever the device
            destination[prefix + "meta"] = untile_meta(self.meta)

    def _load_from_state_dict(self, state_dict, prefix, *args):
        tiled = self.meta.dim() == 3
        if tiled:
            self.set_tiled_meta(False)
        super()._load_from_state_dict(state_dict, prefix, *args)
        if tiled:
            self.set_tiled_meta(True)

    @property
    def fmt(self) -> str:
        return {v: k for k, v in VALUE_FORMATS.items()}[self.values.dtype]

    def dense_weight(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The dequantized dense [N, K] weight (zeros where pruned)."""
        w = expand_24(self.values, self.meta)  # = unpack_24, without its int64 scatter indices
        return w.to(dtype) if self.scale is None else dequantize(w, self.scale, dtype)

    def _forward(self, x):
        x = _input_for(x)
        gated = self.op_name == "sparse24_gated"
        if _use_op(x):
            run = ops.sparse24_gated if gated else ops.sparse24_linear
        else:
            run = dispatch.sparse24_gated if gated else dispatch.sparse24_linear
        return run(x, self.values, self.meta, self.scale, self.bias, self.act, self.dynamic)

    def _mode(self) -> str:
        return "W8A8" if self.dynamic else "weight-only"


class FusedSparseLinear(_Sparse24):
    """y = act(x · Wᵀ + b) with W 2:4-sparse, packed: int8 / float8 e4m3 values with per-output-channel
    fp32 scales, or bfloat16 values."""

    op_name = "sparse24_linear"

    def __init__(self, in_features, out_features, bias=True, fmt="int8", dynamic=False, act="none",
                 bias_dtype=torch.float32, device=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self._setup(in_features, out_features, fmt, dynamic, act, bias, bias_dtype, device)

    @classmethod
    def from_float(cls, weight, bias=None, fmt="int8", dynamic=False, act="none", prune=True, where=None):
        """Pack a float [N, K] weight: magnitude-pruned first unless it is 2:4 already (``prune=False``:
        a weight that is not 2:4 is a ValueError)."""
        check_packable_k(weight.shape[1], where or cls.__name__)
        mod = cls._for_weight(weight, bias, fmt, dynamic, act, False)
        return mod._pack_from(weight, bias, prune, where or cls.__name__)

    def extra_repr(self):
        return (f"{self.in_features}, {self.out_features}, fmt={self.fmt} 2:4, {self._mode()}, act={self.act}, "
                f"bias={self.bias is not None}")


class FusedSparseGatedLinear(_Sparse24):
    """h = act(x · W_gᵀ + b_g) ⊙ (x · W_uᵀ + b_u), gate and up stacked as one packed 2:4 [2H, K] weight."""

    op_name = "sparse24_gated"

    def __init__(self, in_features, hidden_features, bias=False, fmt="int8", dynamic=False, act="silu",
                 bias_dtype=torch.float32, device=None):
        super().__init__()
        self.in_features, self.hidden_features = in_features, hidden_features
        self._setup(in_features, 2 * hidden_features, fmt, dynamic, act, bias, bias_dtype, device)

    @classmethod
    def from_float(cls, gate_up_weight, gate_up_bias=None, fmt="int8", dynamic=False, act="silu", prune=True,
                   where=None):
        """``gate_up_weight`` [2H, K]: rows 0..H-1 the gate projection, rows H..2H-1 the up projection."""
        check_pair_rows(gate_up_weight)
        check_packable_k(gate_up_weight.shape[1], where or cls.__name__)
        mod = cls._for_weight(gate_up_weight, gate_up_bias, fmt, dynamic, act, True)
        return mod._pack_from(gate_up_weight, gate_up_bias, prune, where or cls.__name__)

    def extra_repr(self):
        return (f"{self.in_features}, 2x{self.hidden_features}, fmt={self.fmt} 2:4, {self._mode()}, "
                f"act={self.act}(gate)*up, bias={self.bias is not None}")
