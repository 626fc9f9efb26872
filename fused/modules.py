"""Converted modules: 8-bit weights as plain buffers, forward through the fused ops.

FusedLinear      one Linear (+ optional activation)           -> 1 op
FusedGatedLinear gate and up stacked in one [2H, K] weight     -> 1 op: act(gate) ⊙ up
FusedGatedMLP    FusedGatedLinear + FusedLinear (down)        -> 1 op (mlp_block) on CUDA, else 2 ops
FusedMLP         FusedLinear(act) + FusedLinear (fc1-act-fc2) -> 1 op (mlp_block) on CUDA, else 2 ops
The block op runs both layers in one decode_block launch at small M and each layer's own kernel above
(fused.dispatch.mlp_block); the buffers and checkpoints are those of the two layer modules either way.
"""
from __future__ import annotations

import torch
from torch import nn

from fused import cpu, dispatch, ops
from fused.activations import check_activation
from lowbit import get_format, quantize_weight
from lowbit.gptq import gptq_quantize


def _input_for(x: torch.Tensor) -> torch.Tensor:
    # Under autocast, a Linear runs in the autocast dtype; do the same (custom ops are not autocast-aware).
    dev = x.device.type
    if torch.is_autocast_enabled(dev) and x.is_floating_point():
        return x.to(torch.get_autocast_dtype(dev))
    return x


def _use_op(x: torch.Tensor) -> bool:
    # Eager calls go straight to the dispatch (a custom op costs ~10 µs of host time per call); the
    # compiler and autograd see the registered op (its backward raises: inference only).
    return torch.compiler.is_compiling() or (x.requires_grad and torch.is_grad_enabled())


class _Replayable(nn.Module):
    """Eager CUDA calls replay their recorded launches (fused.dispatch.eager); any change to a module's
    attributes, buffers or device drops every recording (dispatch.epoch)."""

    def __setattr__(self, name, value):
        if name != "training":  # model.eval() / .train(): no forward here depends on it (inference only)
            dispatch.epoch += 1
        super().__setattr__(name, value)

    def __delattr__(self, name):
        dispatch.epoch += 1
        super().__delattr__(name)

    def _apply(self, fn, recurse=True):
        dispatch.epoch += 1
        return super()._apply(fn, recurse)

    def _load_from_state_dict(self, *args, **kw):
        dispatch.epoch += 1
        return super()._load_from_state_dict(*args, **kw)

    def forward(self, x):
        if torch.compiler.is_compiling():
            return self._forward(x)
        return dispatch.eager(self, x, self._forward)


def _write_mode(module, state_dict, prefix, local_metadata) -> None:
    """state_dict hook: what the layer is (format, mode, activation), in the state dict's metadata for its prefix, so
    load_state_dict into a layer converted with another config is refused (`_Fused8bit._load_from_state_dict`)."""
    local_metadata["fused_mode"] = module.mode_tag()


def check_pair_rows(gate_up_weight: torch.Tensor) -> None:
    if gate_up_weight.shape[0] % 2:
        raise ValueError(f"stacked gate/up weight needs an even row count, got {gate_up_weight.shape[0]}")


class _Fused8bit(_Replayable):
    """Shared buffer layout and checkpoint checks for an 8-bit weight + per-row fp32 scale (+ bias)."""

    def _setup(self, in_features: int, rows: int, fmt, dynamic: bool, act: str, bias: bool, bias_dtype, device):
        """What every 8-bit layer's __init__ sets after its feature counts (``rows``: the weight's rows, 2H for
        a stacked gate/up pair)."""
        self.dynamic = dynamic
        self.act = check_activation(act)
        self._init_weight(rows, in_features, fmt, bias, bias_dtype, device)
        self._register_state_dict_hook(_write_mode)
        self.source_bytes = 0  # bytes of the floating-point weights this replaced (for explain)

    @classmethod
    def _for_weight(cls, weight, bias, fmt, dynamic, act, gated: bool):
        """An empty module shaped for a float ``weight`` [N, K] (a stacked [2H, K] gate/up pair if ``gated``)."""
        return cls(weight.shape[1], weight.shape[0] // (2 if gated else 1), bias is not None, fmt, dynamic, act,
                   bias_dtype=bias.dtype if bias is not None else torch.float32, device=weight.device)

    def _init_weight(self, n: int, k: int, fmt, bias: bool, bias_dtype, device):
        fmt = get_format(fmt)
        self.register_buffer("qweight", torch.empty(n, k, dtype=fmt.dtype, device=device))
        self.register_buffer("scale", torch.empty(n, dtype=torch.float32, device=device))
        self.register_buffer("bias", torch.empty(n, dtype=bias_dtype, device=device) if bias else None)
        # 1/s [K] of SmoothQuant-style smoothing (fused.smoothing), None when not smoothed: a None buffer
        # is not in the state_dict, so unsmoothed checkpoints keep their keys
        self.register_buffer("smooth_inv", None)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        # load_state_dict would silently cast an fp8 checkpoint into int8 buffers (or the reverse), or
        # load a tensor of another shape's bytes: refuse, naming the key.
        key, qkey, smooth_inv = prefix + "smooth_inv", prefix + "qweight", self._buffers.get("smooth_inv")
        if smooth_inv is None and key in state_dict:
            raise ValueError(f"checkpoint key {key!r}: the checkpoint is smoothed (fused.calibrate_smoothing) and "
                             "this module is not; convert the model with the same smoothing config")
        if smooth_inv is not None and key not in state_dict and qkey in state_dict:
            raise ValueError(f"checkpoint key {key!r} missing: this module is smoothed and the checkpoint is not; "
                             "convert the model without smoothing")
        for name, buf in self._buffers.items():
            key = prefix + name
            if key in state_dict and buf is not None:
                src = state_dict[key]
                if src.dtype != buf.dtype or src.shape != buf.shape:
                    raise ValueError(
                        f"checkpoint key {key!r}: expected {buf.dtype} {tuple(buf.shape)}, got {src.dtype} "
                        f"{tuple(src.shape)} (checkpoint made with another config or model?)")
        saved = local_metadata.get("fused_mode")
        mine = [prefix + n for n, b in self._buffers.items() if b is not None]
        # without it (safetensors: fused.load checks) or without this layer's keys (load_state_dict names them): skip
        if saved is not None and saved != self.mode_tag() and all(k in state_dict for k in mine):
            raise ValueError(f"state dict for {prefix.rstrip('.') or 'the root module'!r} was saved from a {saved} "
                             f"layer; this layer is {self.mode_tag()}: convert the model with the same config")
        packed = cpu.packed_only(self._buffers.get("qweight"))
        bits = cpu.packed_act_bits(self._buffers.get("qweight"))
        if packed:  # load into the plain weight, then pack it again
            self._buffers["qweight"] = cpu.unpack_weight(self._buffers["qweight"])
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
        if packed:
            self._buffers["qweight"] = cpu.pack_weight(self._buffers["qweight"], bits)

    def __getstate__(self):
        # pickle / copy.deepcopy of a layer packed for the CPU: the plain weight goes in its state, packed again by
        # __setstate__ (the stand-in alone would come back as a tensor of -128s)
        state = self.__dict__.copy()
        if cpu.packed_only(self._buffers.get("qweight")):
            state["_buffers"] = dict(self._buffers, qweight=cpu.unpack_weight(self._buffers["qweight"]))
            state["_fused_cpu_packed"] = cpu.packed_act_bits(self._buffers["qweight"])  # its activation bits
        return state

    def __setstate__(self, state):
        packed = state.pop("_fused_cpu_packed", False)
        super().__setstate__(state)
        if packed:
            self._buffers["qweight"] = cpu.pack_weight(self._buffers["qweight"], 8 if packed is True else packed)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if cpu.packed_only(self._buffers.get("qweight")):  # a checkpoint holds the plain weight, as unpacked layers'
            destination[prefix + "qweight"] = cpu.unpack_weight(self._buffers["qweight"])

    def _apply(self, fn, recurse=True):
        if cpu.packed_only(self._buffers.get("qweight")):  # moves and casts act on the plain weight; packed again
            bits = cpu.packed_act_bits(self._buffers["qweight"])  # if it stays on the CPU
            self._buffers["qweight"] = cpu.unpack_weight(self._buffers["qweight"])
            self._apply_plain(fn, recurse)
            if self._buffers["qweight"].device.type == "cpu":
                self._buffers["qweight"] = cpu.pack_weight(self._buffers["qweight"], bits)
            return self
        return self._apply_plain(fn, recurse)

    def _apply_plain(self, fn, recurse=True):
        # Module.to(dtype) / .half() cast every floating buffer, and float8 counts as floating: the fp8
        # qweight would silently become bf16 (2x bytes) and the fp32 scales lose precision (the kernels
        # need fp32). Keep both dtypes and apply only the device move, as torchao's weight formats do.
        # The bias follows the model's dtype, as nn.Linear's does.
        # (2:4 modules hold "values" instead of "qweight"; smooth_inv, when present, stays fp32 too.)
        fixed = {n: self._buffers[n] for n in ("qweight", "values", "scale", "smooth_inv") if n in self._buffers}
        super()._apply(fn, recurse)
        for name, old in fixed.items():
            new = self._buffers[name]
            if new is not None and old is not None and new.dtype != old.dtype:
                self._buffers[name] = old.to(device=new.device)
        return self

    def _quantize_from(self, weight, bias, fmt, smooth=None, hessian=None):
        """``hessian``: the input's XᵀX (fused.calibrate_gptq): GPTQ rounding instead of round-to-nearest."""
        w = weight.detach()
        if hessian is not None and hessian.shape != (w.shape[1], w.shape[1]):
            raise ValueError(f"GPTQ hessian has shape {tuple(hessian.shape)}, the weight needs "
                             f"[{w.shape[1]}, {w.shape[1]}] (calibrated on another model?)")
        if smooth is not None:
            if smooth.shape != (w.shape[1],):
                raise ValueError(f"smoothing vector has shape {tuple(smooth.shape)}, the weight needs [{w.shape[1]}]")
            smooth = smooth.detach().to(device=w.device, dtype=torch.float32)
            w = w.float() * smooth  # W * s per input column, quantized from fp32
            self.smooth_inv = 1.0 / smooth
            if hessian is not None:  # the layer now sees x / s: H_ij / (s_i s_j)
                hessian = hessian.to(device=w.device, dtype=torch.float32) / (smooth[:, None] * smooth[None, :])
        q, s = quantize_weight(w, fmt) if hessian is None else gptq_quantize(w, hessian, fmt)
        self.qweight.copy_(q)
        self.scale.copy_(s)
        if bias is not None:
            self.bias.copy_(bias.detach())
        self.source_bytes = weight.numel() * weight.element_size() + (
            bias.numel() * bias.element_size() if bias is not None else 0)
        return self

    @property
    def fmt(self) -> str:
        return "int8" if self.qweight.dtype == torch.int8 else "float8_e4m3"

    def mode_tag(self) -> str:
        """What the layer computes, e.g. "int8 W8A8 act=silu" (a state dict's metadata carries it)."""
        return f"{self.fmt}{' 2:4' if getattr(self, 'sparsity', None) else ''} " \
               f"{'W8A8' if self.dynamic else 'weight-only'} act={self.act}"

    def _smooth(self, x: torch.Tensor) -> torch.Tensor:
        # x / s in fp32, rounded once to x's dtype (a bf16 1/s would add its own rounding)
        if self.smooth_inv is None:
            return x
        return (x.float() * self.smooth_inv).to(x.dtype)

    def weight_bytes(self) -> int:
        """Bytes of the buffers; a weight packed for the CPU (fused.pack_for_cpu) counts its stand-in's one byte, its
        oneDNN copy is in fused.cpu.cached_bytes."""
        return sum(b.untyped_storage().nbytes() if cpu.packed_only(b) else b.numel() * b.element_size()
                   for b in self.buffers())


class FusedLinear(_Fused8bit):
    """y = act(x · dequant(W)ᵀ + b) with W int8 or float8 e4m3, per-output-channel fp32 scales."""

    op_name = "linear"

    def __init__(self, in_features, out_features, bias=True, fmt="int8", dynamic=False, act="none",
                 bias_dtype=torch.float32, device=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self._setup(in_features, out_features, fmt, dynamic, act, bias, bias_dtype, device)

    @classmethod
    def from_float(cls, weight, bias=None, fmt="int8", dynamic=False, act="none", smooth=None, hessian=None):
        """``smooth``: SmoothQuant factors s [in_features]; W * s is quantized and forward divides x by s.
        ``hessian``: XᵀX of the inputs [in, in] (fused.calibrate_gptq): GPTQ rounding (lowbit.gptq)."""
        return cls._for_weight(weight, bias, fmt, dynamic, act, False)._quantize_from(weight, bias, fmt, smooth, hessian)

    def _forward(self, x):
        x = self._smooth(_input_for(x))
        run = ops.linear if _use_op(x) else dispatch.linear
        return run(x, self.qweight, self.scale, self.bias, self.act, self.dynamic)

    def extra_repr(self):
        mode = "W8A8" if self.dynamic else "weight-only"
        return f"{self.in_features}, {self.out_features}, fmt={self.fmt}, {mode}, act={self.act}, bias={self.bias is not None}{', smoothed' if self.smooth_inv is not None else ''}"


class FusedGatedLinear(_Fused8bit):
    """h = act(x · W_gᵀ + b_g) ⊙ (x · W_uᵀ + b_u), gate and up stacked as one [2H, K] weight (read in one pass)."""

    op_name = "gated"

    def __init__(self, in_features, hidden_features, bias=False, fmt="int8", dynamic=False, act="silu",
                 bias_dtype=torch.float32, device=None):
        super().__init__()
        self.in_features, self.hidden_features = in_features, hidden_features
        self._setup(in_features, 2 * hidden_features, fmt, dynamic, act, bias, bias_dtype, device)

    @classmethod
    def from_float(cls, gate_up_weight, gate_up_bias=None, fmt="int8", dynamic=False, act="silu", smooth=None,
                   hessian=None):
        """``gate_up_weight`` [2H, K]: rows 0..H-1 the gate projection, rows H..2H-1 the up projection.
        ``smooth``/``hessian`` as in FusedLinear.from_float (one x feeds both: one vector, one hessian)."""
        check_pair_rows(gate_up_weight)
        b = gate_up_bias
        mod = cls._for_weight(gate_up_weight, b, fmt, dynamic, act, True)
        return mod._quantize_from(gate_up_weight, b, fmt, smooth, hessian)

    def _forward(self, x):
        x = self._smooth(_input_for(x))
        run = ops.gated if _use_op(x) else dispatch.gated
        return run(x, self.qweight, self.scale, self.bias, self.act, self.dynamic)

    def extra_repr(self):
        mode = "W8A8" if self.dynamic else "weight-only"
        return f"{self.in_features}, 2x{self.hidden_features}, fmt={self.fmt}, {mode}, act={self.act}(gate)*up, bias={self.bias is not None}{', smoothed' if self.smooth_inv is not None else ''}"


class _Block(_Replayable):
    """A two-layer block; ``layers()`` gives (first, second, gated)."""

    def block_fusable(self) -> bool:
        """Whether the block can run as one ``mlp_block`` op: dense 8-bit layers (2:4 layers are other
        classes), no activation after the down projection, one mode. Smoothing (smooth_inv) is folded in."""
        first, second, gated = self.layers()
        return (type(first) is (FusedGatedLinear if gated else FusedLinear) and type(second) is FusedLinear
                and second.act == "none" and first.dynamic == second.dynamic)

    def sparse_handoff(self) -> bool:
        """Whether the block is two W8A8 2:4 layers with 8-bit values (FusedSparseGatedLinear or an activated
        FusedSparseLinear, then FusedSparseLinear with no activation): one ``sparse24_mlp_block`` op, which
        hands h over quantized (fused.dispatch.HANDOFF)."""
        first, second, gated = self.layers()
        return (getattr(first, "sparsity", None) == "2:4" and getattr(second, "sparsity", None) == "2:4"
                and first.op_name == ("sparse24_gated" if gated else "sparse24_linear")
                and second.op_name == "sparse24_linear" and second.act == "none" and first.dynamic and second.dynamic
                and first.values.dtype == second.values.dtype and first.values.dtype != torch.bfloat16)

    def _forward(self, x):
        first, second, gated = self.layers()
        if dispatch.HANDOFF and dispatch.block_applies(x.device) and self.sparse_handoff():
            x = _input_for(x)
            run = ops.sparse24_mlp_block if _use_op(x) else dispatch.sparse24_mlp_block
            return run(x, first.values, first.meta, first.scale, first.bias, second.values, second.meta, second.scale,
                       second.bias, first.act, gated, True)
        # where the decode block cannot run at any M (the CPU) the block keeps its per-layer forward:
        # the layers' hooks, paths and exported graph stay as they were
        if not (dispatch.block_applies(x.device) and self.block_fusable()):
            return second(first(x))
        x = _input_for(x)
        run = ops.mlp_block if _use_op(x) else dispatch.mlp_block
        return run(x, first.qweight, first.scale, first.bias, second.qweight, second.scale, second.bias, first.act,
                   gated, first.dynamic, first.smooth_inv, second.smooth_inv)


class FusedGatedMLP(_Block):
    """down(act(gate(x)) ⊙ up(x)): LlamaMLP / MistralMLP / Qwen2MLP / Phi-3 gate_up_proj blocks."""

    def __init__(self, gate_up: FusedGatedLinear, down: FusedLinear):
        super().__init__()
        self.gate_up, self.down = gate_up, down

    def layers(self):
        return self.gate_up, self.down, True


class FusedMLP(_Block):
    """fc2(act(fc1(x))): nn.Sequential(Linear, act, Linear) and fc1/act/fc2 blocks."""

    def __init__(self, fc1: FusedLinear, fc2: FusedLinear):
        super().__init__()
        self.fc1, self.fc2 = fc1, fc2

    def layers(self):
        return self.fc1, self.fc2, False


def pack_for_cpu(model: nn.Module, pack: bool = True, min_bytes: int | None = None, activation_bits: int = 8) -> int:
    """Each int8 CPU layer of ``model`` keeps only the packed copy of its weight that the CPU's int8 GEMM reads
    (fused.cpu.pack_weight: oneDNN's on VNNI / AMX x86, fbgemm's on x86 without VNNI): 1 B/weight, as stored, and the
    packed-weight paths at every M (W8A16 with x as two int8 planes, so fp32 / fp16 activations no longer get exact
    fp32 math: ~85 dB against it). ``activation_bits=7`` (x86 without VNNI only; W8A8 layers): speed over accuracy,
    7-bit per-token activations in one int8 pass instead of exact 8-bit ones in two, ~6 dB lower SQNR.
    state_dict / save, load_state_dict and ``.to()`` work on the plain weight, rebuilt when needed; the ``qweight``
    buffer itself becomes a one-byte stand-in (fused.cpu.pack_weight), so read weights through ``state_dict()``.
    ``pack=False`` restores the plain weights. Returns the number of layers changed. fp8 and 2:4 layers are left as
    they are, and so are weights under ``min_bytes``. By default that is fused.cpu.ONEDNN_MIN_BYTES, 2 MiB: such a
    weight stays in L2, where the plain-weight kernels are as fast or faster at every M (`explain` says so for each
    such layer); but W8A8 layers whose K is a multiple of 1024 (at least 2048) are packed at any size
    (fused.cpu.onednn_pays: torch._int_mm's per-call reorder is slow on them).
    For small batches (M >= 2; at M=1 the plain kernels are as fast or faster): at long prefills W8A16's two planes
    are slower than the default's bf16 GEMM on the dequantized tile (MiniLM, 608 tokens per call, 1 thread: 94.8 ->
    113.2 ms; README "CPU (edge)")."""
    if activation_bits not in (7, 8):
        raise ValueError(f"pack_for_cpu: activation_bits must be 8 or 7, got {activation_bits!r}")
    if pack and activation_bits == 7 and not cpu.fbgemm_here():
        raise RuntimeError("pack_for_cpu: activation_bits=7 is for x86 CPUs without VNNI, where exact 8-bit "
                           "activations take two int8 passes; on this CPU they take one")
    n = 0
    for m in model.modules():
        w = m._buffers.get("qweight") if isinstance(m, _Fused8bit) else None
        if w is None or w.dtype != torch.int8 or w.device.type != "cpu":
            continue
        if pack and cpu.packed_only(w) and m.dynamic and cpu.packed_act_bits(w) != activation_bits:
            w = m._buffers["qweight"] = cpu.unpack_weight(w)  # packed before with the other activation bits
        elif cpu.packed_only(w) == pack:
            continue
        small = not cpu.fbgemm_here() and not cpu.onednn_pays(*w.shape, m.dynamic)  # fbgemm: every weight gains
        if pack and (small if min_bytes is None else w.numel() < min_bytes):
            continue
        bits = activation_bits if m.dynamic else 8
        m._buffers["qweight"] = cpu.pack_weight(w, bits) if pack else cpu.unpack_weight(w)
        n += 1
    dispatch.epoch += 1
    return n
