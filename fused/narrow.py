"""Narrow fully-fused MLPs (tiny-cuda-nn style): an ``nn.Sequential`` of Linear / activation layers with
every width <= 128 and at most 8 Linear layers runs as ONE kernel launch (fused.kernels.narrow_mlp).

    mlp = fused.FusedNarrowMLP.from_module(seq, weight_dtype="fp16")        # "fp16" | "bf16" | "int8"
    quantize_(model, fused.FusedNarrowMLPConfig("int8"), filter_fn=fused.is_narrow_mlp)

Layers: nn.Linear (bias or not), then optionally one activation (ReLU, SiLU, GELU erf / tanh, Identity);
nn.Dropout is skipped (inference only: the fused module has no backward). Anything else is a ValueError
naming the layer's index and type. The weights are packed once here (``pack_narrow``): each layer's W
[N, K] zero-padded to powers of two >= 16 in one buffer, scales and biases in one fp32 buffer.

Run time: the input may be fp16, bf16 or fp32 (int8 and 16-bit weights are widened to the input's dtype
in registers; fp16 weights with bf16 input lose the 3 extra mantissa bits, like a bf16 model); the output
has the input's dtype; autocast is honoured as nn.Linear would.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torchao.core.config import AOBaseConfig
from torchao.quantization.transform_module import register_quantize_module_handler

from fused import dispatch, ops
from fused.activations import activation_of, check_activation
from fused.modules import _input_for, _Replayable, _use_op
from fused.narrow_pack import (  # noqa: F401  (the packed format, re-exported)
    MAX_LAYERS, MAX_WIDTH, MIN_PAD, WEIGHT_DTYPES, _transpose_layers, pack_narrow, packed_sizes, padded_width,
    unpack_narrow)
from lowbit import quantize_weight

def parse_narrow(seq: nn.Module, where: str = "FusedNarrowMLP") -> list[tuple[nn.Linear, str]]:
    """[(Linear, activation name)] for a Sequential the fused kernel runs; ValueError naming the first
    layer (index and type) that it cannot."""
    if not isinstance(seq, nn.Sequential):
        raise ValueError(f"{where}: expected an nn.Sequential of Linear/activation layers, got {type(seq).__name__}")
    layers: list[list] = []
    for i, m in enumerate(seq):
        if isinstance(m, nn.Dropout):
            continue
        if isinstance(m, nn.Linear):
            if layers and m.in_features != layers[-1][0].out_features:
                raise ValueError(f"{where}: layer {i} (Linear) takes {m.in_features} features, the "
                                 f"previous Linear gives {layers[-1][0].out_features}")
            for what, width in (("in_features", m.in_features), ("out_features", m.out_features)):
                if not 1 <= width <= MAX_WIDTH:
                    raise ValueError(f"{where}: layer {i} (Linear) has {what}={width}; the fused "
                                     f"narrow kernel supports widths 1..{MAX_WIDTH}")
            layers.append([m, "none"])
            continue
        act = activation_of(m)
        if act is None:
            raise ValueError(f"{where}: layer {i} ({type(m).__name__}) is not a Linear, a supported "
                             "activation (ReLU, SiLU, GELU, GELU(approximate='tanh'), Identity) or Dropout")
        if act == "none":
            continue
        if not layers:
            raise ValueError(f"{where}: layer {i} ({type(m).__name__}) comes before any Linear")
        if layers[-1][1] != "none":
            raise ValueError(f"{where}: layer {i} ({type(m).__name__}) is a second activation after "
                             f"the same Linear (already {layers[-1][1]})")
        layers[-1][1] = act
    if not layers:
        raise ValueError(f"{where}: the Sequential holds no nn.Linear")
    if len(layers) > MAX_LAYERS:
        raise ValueError(f"{where}: {len(layers)} Linear layers; the fused narrow kernel supports "
                         f"at most {MAX_LAYERS}")
    return [(lin, act) for lin, act in layers]


def is_narrow_mlp(module: nn.Module, fqn: str = "") -> bool:
    """Filter for ``quantize_``: True for an nn.Sequential that FusedNarrowMLP can run in one launch
    (Linear / activation / Dropout layers, widths <= 128, <= 8 Linears)."""
    if not isinstance(module, nn.Sequential):
        return False
    try:
        parse_narrow(module)
    except ValueError:
        return False
    return True


# -------------------------------------------------------------------------------------------- module

class FusedNarrowMLP(_Replayable):
    """A whole narrow MLP in one kernel launch: buffers ``weight_pack`` (packed, fp16/bf16/int8; also
    ``weights``) and ``params`` (fp32 scales + biases); ``dims`` (real widths) and ``acts`` (one per layer)
    fix the architecture. Inference only (its op raises on backward).

    The weight buffer was named ``weights`` and held each layer transposed before 2026-12-01; a state
    dict with that key is converted on load (same values, so the same outputs)."""

    op_name = "narrow_mlp"
    dynamic = False

    def __init__(self, dims, acts, weight_dtype="fp16", device=None):
        super().__init__()
        if weight_dtype not in WEIGHT_DTYPES:
            raise ValueError(f"weight_dtype must be one of {tuple(WEIGHT_DTYPES)}, got {weight_dtype!r}")
        self.dims = [int(d) for d in dims]
        self.acts = [check_activation(a) for a in acts]
        if len(self.acts) != len(self.dims) - 1:
            raise ValueError(f"dims {self.dims} need {len(self.dims) - 1} activations, got {self.acts}")
        nw, np_ = packed_sizes(self.dims)
        self.register_buffer("weight_pack", torch.zeros(nw, dtype=WEIGHT_DTYPES[weight_dtype], device=device))
        self.register_buffer("params", torch.zeros(np_, dtype=torch.float32, device=device))
        self._acts_str = ",".join(self.acts)
        self.source_bytes = 0  # bytes of the floating-point Linears this replaced (for explain)

    @classmethod
    def from_module(cls, seq: nn.Sequential, weight_dtype: str = "fp16", where: str | None = None) -> "FusedNarrowMLP":
        """Convert an nn.Sequential (see the module docstring); ValueError for what the kernel cannot run."""
        if weight_dtype not in WEIGHT_DTYPES:
            raise ValueError(f"weight_dtype must be one of {tuple(WEIGHT_DTYPES)}, got {weight_dtype!r}")
        where = where or "FusedNarrowMLP"
        layers = parse_narrow(seq, where)
        dtype = WEIGHT_DTYPES[weight_dtype]
        ws, ss, bs = [], [], []
        for i, (lin, _) in enumerate(layers):
            w = lin.weight.detach()
            bad = (~torch.isfinite(w)).sum().item()
            if bad:
                raise ValueError(f"{where}: Linear #{i} weight has {bad} NaN/Inf value(s); refusing to convert")
            if dtype == torch.int8:
                q, s = quantize_weight(w, "int8")
                ws.append(q)
                ss.append(s)
            else:
                ws.append(w.to(dtype))
                ss.append(None)
            bs.append(lin.bias)
        dims = [layers[0][0].in_features] + [lin.out_features for lin, _ in layers]
        mod = cls(dims, [a for _, a in layers], weight_dtype, device=layers[0][0].weight.device)
        w, p = pack_narrow(ws, ss, bs, dtype)
        mod.weight_pack.copy_(w)
        mod.params.copy_(p)
        mod.source_bytes = sum(t.numel() * t.element_size() for lin, _ in layers for t in lin.parameters())
        return mod

    @property
    def weights(self) -> torch.Tensor:
        return self.weight_pack

    @property
    def fmt(self) -> str:
        return {torch.int8: "int8", torch.float16: "float16", torch.bfloat16: "bfloat16"}[self.weights.dtype]

    @property
    def act(self) -> str:  # for explain's table
        return self._acts_str

    def weight_bytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buffers())

    def _forward(self, x):  # eager CUDA calls are replayed (fused.dispatch.eager), as the other modules'
        x = _input_for(x)
        if _use_op(x):
            return ops.narrow_mlp(x, self.weights, self.params, self.dims, self._acts_str)
        return dispatch.narrow_mlp(x, self.weights, self.params, self.dims, self.acts)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        old = state_dict.pop(prefix + "weights", None)
        if old is not None and prefix + "weight_pack" not in state_dict:
            state_dict[prefix + "weight_pack"] = _transpose_layers(old, self.dims)
        # load_state_dict would silently cast an int8 checkpoint into fp16 buffers (or the reverse): refuse
        for name, buf in self._buffers.items():
            key = prefix + name
            if key in state_dict and (state_dict[key].dtype != buf.dtype or state_dict[key].shape != buf.shape):
                src = state_dict[key]
                raise ValueError(f"checkpoint key {key!r}: expected {buf.dtype} {tuple(buf.shape)}, got {src.dtype} "
                                 f"{tuple(src.shape)} (checkpoint made with another config or architecture?)")
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)

    def _apply(self, fn, recurse=True):
        # model.half() / .to(dtype) must not re-cast the packed weights (their dtype is the config's) nor
        # the fp32 params: apply only the device move
        fixed = dict(self._buffers)
        super()._apply(fn, recurse)
        for name, old in fixed.items():
            new = self._buffers[name]
            if new.dtype != old.dtype:
                self._buffers[name] = old.to(device=new.device)
        return self

    def extra_repr(self):
        arch = " -> ".join(str(d) for d in self.dims)
        return f"{arch}, acts={self._acts_str}, weights={self.fmt}, one launch"


# -------------------------------------------------------------------------------------------- config

@dataclass
class FusedNarrowMLPConfig(AOBaseConfig):
    """``quantize_(model, FusedNarrowMLPConfig("fp16"), filter_fn=fused.is_narrow_mlp)``: every narrow
    nn.Sequential becomes a FusedNarrowMLP. ``weight_dtype``: "fp16", "bf16" or "int8" (weight-only,
    per-output-channel scales)."""

    weight_dtype: str = "fp16"

    def __post_init__(self):
        if self.weight_dtype not in WEIGHT_DTYPES:
            raise ValueError(f"FusedNarrowMLPConfig.weight_dtype must be one of {tuple(WEIGHT_DTYPES)}, "
                             f"got {self.weight_dtype!r}")


@register_quantize_module_handler(FusedNarrowMLPConfig)
def _transform_narrow(module: nn.Module, config: FusedNarrowMLPConfig) -> nn.Module:
    from fused.matching import _caller_fqn

    where = _caller_fqn() or type(module).__name__
    if not isinstance(module, nn.Sequential):
        raise TypeError(f"{where}: FusedNarrowMLPConfig converts nn.Sequential MLPs, got {type(module).__name__}; "
                        "use filter_fn=fused.is_narrow_mlp")
    return FusedNarrowMLP.from_module(module, config.weight_dtype, where=where)
