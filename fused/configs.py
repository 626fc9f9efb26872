"""torchao configs: ``quantize_(model, FusedInt8MLP())`` and ``quantize_(model, FusedFloat8MLP())``.

With torchao's default filter every ``nn.Linear`` becomes a FusedLinear. With ``filter_fn=fused.is_mlp``
(or an ``FqnToConfig`` naming the block) a whole MLP block becomes one FusedMLP / FusedGatedMLP.
Converting an already converted module is a no-op: Fused* modules are not ``nn.Linear`` and not MLPs
by `is_mlp`, so filters skip them (and `fused.quantize` then warns that nothing was converted).

``sparsity="2:4"`` packs the weights 2:4 (sparsity.packing) into FusedSparseLinear / FusedSparseGatedLinear:
a weight that is already 2:4 (e.g. after ``sparsity.prune_24_(model, "wanda", calibration)``) is packed as
it is; any other is magnitude-pruned first (``prune=False`` makes that an error instead). int8 and fp8
values carry per-row scales; ``FusedBF16MLP()`` keeps bf16 values (2:4 only: 1.125 bytes per weight).

``smoothing=fused.calibrate_smoothing(model, calibration)`` (W8A8, dense): SmoothQuant-style per-input-
channel factors, looked up by each Linear's fqn (a block's children as ``<block>.<child>``).
``gptq=fused.calibrate_gptq(model, calibration)`` (dense, weight-only or W8A8): GPTQ rounding of the weights
on the same scales (lowbit.gptq), looked up the same way; Linears without an entry round to nearest.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch
from torch import nn
from torchao.core.config import AOBaseConfig
from torchao.quantization.transform_module import register_quantize_module_handler

from fused.activations import activation_of
from fused.matching import _act_attr, _caller_fqn, _linear, is_mlp, mlp_kind  # noqa: F401  (re-exported)
from fused.modules import FusedGatedLinear, FusedGatedMLP, FusedLinear, FusedMLP
from fused.gptq import check_gptq
from fused.smoothing import check_smoothing
from fused.sparse_modules import FusedSparseGatedLinear, FusedSparseLinear

SPARSITY = (None, "2:4")


@dataclass
class FusedInt8MLP(AOBaseConfig):
    """int8 symmetric per-channel weights. ``weight_only=True``: W8A16 (bf16/fp16 activations);
    ``False``: W8A8 with per-token dynamic int8 activations. ``sparsity="2:4"``: packed 2:4 weights
    (0.625 bytes per weight + scales); ``prune``: magnitude-prune weights that are not 2:4 yet.
    ``smoothing``: {linear fqn: s} from ``fused.calibrate_smoothing`` (W8A8 dense only): a Linear whose
    fqn is a key quantizes W * s and divides its input by s (SmoothQuant).
    ``gptq``: {linear fqn: XᵀX} from ``fused.calibrate_gptq`` (dense only): GPTQ rounding of those weights."""

    weight_only: bool = True
    sparsity: str | None = None
    prune: bool = True
    smoothing: dict[str, torch.Tensor] | None = field(default=None, repr=False)
    gptq: dict[str, torch.Tensor] | None = field(default=None, repr=False)

    fmt = "int8"

    def __post_init__(self):
        _check_common(self)


@dataclass
class FusedFloat8MLP(AOBaseConfig):
    """float8 e4m3 per-channel ("rowwise") weights. ``weight_only=False`` (default): per-token dynamic
    fp8 activations (W8A8); ``True``: fp8 weights, bf16/fp16 activations. Needs compute capability
    >= 8.9 on CUDA; emulated exactly on the CPU. ``sparsity``/``prune``/``smoothing``/``gptq`` as in
    FusedInt8MLP."""

    weight_only: bool = False
    sparsity: str | None = None
    prune: bool = True
    smoothing: dict[str, torch.Tensor] | None = field(default=None, repr=False)
    gptq: dict[str, torch.Tensor] | None = field(default=None, repr=False)

    fmt = "float8_e4m3"

    def __post_init__(self):
        _check_common(self)


@dataclass
class FusedBF16MLP(AOBaseConfig):
    """2:4-sparse bfloat16 weights (no quantization): values bf16 + 2-bit positions, 1.125 bytes per
    weight instead of 2, activations as they come (weight-only). Only the 2:4 form exists: a dense bf16
    model is what ``nn.Linear`` already runs. ``prune`` as in FusedInt8MLP."""

    sparsity: str | None = "2:4"
    prune: bool = True

    fmt = "bfloat16"
    weight_only = True

    def __post_init__(self):
        _check_common(self)
        if self.sparsity is None:
            raise ValueError("FusedBF16MLP only has a 2:4 form (sparsity='2:4'); dense bf16 weights are what "
                             "nn.Linear runs, use FusedInt8MLP / FusedFloat8MLP for dense 8-bit weights")


def _check_common(cfg) -> None:
    if not isinstance(cfg.weight_only, bool):
        raise TypeError(f"{type(cfg).__name__}.weight_only must be a bool, got {cfg.weight_only!r}")
    if cfg.sparsity not in SPARSITY:
        raise ValueError(f"{type(cfg).__name__}.sparsity must be one of {SPARSITY}, got {cfg.sparsity!r}")
    if not isinstance(cfg.prune, bool):
        raise TypeError(f"{type(cfg).__name__}.prune must be a bool, got {cfg.prune!r}")
    smoothing = getattr(cfg, "smoothing", None)
    if smoothing is not None:
        name = type(cfg).__name__
        check_smoothing(smoothing, name)
        # Smoothing moves activation outliers into the weights: it only pays when activations are
        # quantized, and with weight-only it would just make the weights harder to quantize.
        if cfg.weight_only:
            raise ValueError(f"{name}: smoothing needs quantized activations (weight_only=False); "
                             "with weight-only quantization it only makes the weights harder to quantize")
        if cfg.sparsity is not None:
            raise ValueError(f"{name}: smoothing is not supported with sparsity={cfg.sparsity!r} "
                             "(it would change which weights 2:4 pruning keeps)")
    gptq = getattr(cfg, "gptq", None)
    if gptq is not None:
        name = type(cfg).__name__
        check_gptq(gptq, name)
        if cfg.sparsity is not None:
            raise ValueError(f"{name}: gptq is not supported with sparsity={cfg.sparsity!r} (2:4 values are "
                             "rounded to nearest after pruning)")


# -------------------------------------------------------------------------------------------- conversion

def _checked_weight(lin: nn.Linear, where: str) -> torch.Tensor:
    w = lin.weight
    if w.is_meta:
        raise ValueError(f"{where}: the weight is on the meta device (not loaded yet), so there are no values to "
                         "quantize; load the weights first (e.g. model.to_empty(device=...) and load_state_dict, or "
                         "from_pretrained without device_map='meta'), then convert")
    bad = (~torch.isfinite(w)).sum().item()
    if bad:
        raise ValueError(f"{where}: weight has {bad} NaN/Inf value(s); refusing to quantize")
    return w


def _check_device(cfg, w: torch.Tensor, where: str) -> None:
    if cfg.fmt == "float8_e4m3" and w.is_cuda and torch.cuda.get_device_capability(w.device) < (8, 9):
        cap = torch.cuda.get_device_capability(w.device)
        raise RuntimeError(
            f"{where}: float8 needs compute capability >= 8.9 (Ada/Hopper), this GPU has {cap[0]}.{cap[1]}; "
            "use FusedInt8MLP, or convert on the CPU for the emulated path")


def _calibrated_for(cfg, field_name: str, fqn: str | None, where: str) -> torch.Tensor | None:
    """The config's calibrated tensor (``smoothing`` factors, ``gptq`` hessian) for the module named ``fqn``
    (None: the module has none)."""
    table = getattr(cfg, field_name, None)
    if not table:
        return None
    if fqn is None:
        raise RuntimeError(f"{where}: cannot tell this module's fqn, so cannot look up its {_CALIBRATED[field_name]}; "
                           "convert with fused.quantize or torchao's quantize_")
    return table.get(fqn)


_CALIBRATED = {"smoothing": "smoothing factors", "gptq": "GPTQ hessian"}


def _smoothing_for(cfg, fqn: str | None, where: str) -> torch.Tensor | None:
    return _calibrated_for(cfg, "smoothing", fqn, where)


def _gptq_for(cfg, fqn: str | None, where: str) -> torch.Tensor | None:
    return _calibrated_for(cfg, "gptq", fqn, where)


def _child(prefix: str | None, name: str) -> str | None:
    return None if prefix is None else (f"{prefix}.{name}" if prefix else name)


def _smoothed(w, s, where):
    if s is not None and s.shape != (w.shape[1],):
        raise ValueError(f"{where}: smoothing vector has shape {tuple(s.shape)}, the weight has in_features={w.shape[1]} "
                         "(factors calibrated on another model?)")
    return s


def convert_linear(lin: nn.Linear, cfg, act: str = "none", where: str = "Linear", fqn: str | None = None) -> nn.Module:
    """``fqn``: the module's name in the model, for the config's smoothing lookup (default: ``where``)."""
    w = _checked_weight(lin, where)
    _check_device(cfg, w, where)
    if cfg.sparsity == "2:4":
        return FusedSparseLinear.from_float(w, lin.bias, cfg.fmt, dynamic=not cfg.weight_only, act=act,
                                            prune=cfg.prune, where=where)
    name = fqn if fqn is not None else where
    s = _smoothed(w, _smoothing_for(cfg, name, where), where)
    return FusedLinear.from_float(w, lin.bias, cfg.fmt, dynamic=not cfg.weight_only, act=act, smooth=s,
                                  hessian=_gptq_for(cfg, name, where))


def convert_block(block: nn.Module, cfg, where: str = "MLP", fqn: str | None = None) -> nn.Module:
    """``fqn``: the block's name in the model ("" for the root), for the smoothing lookup (default: ``where``)."""
    prefix = fqn if fqn is not None else where
    kind = mlp_kind(block)
    dynamic = not cfg.weight_only
    if kind in ("sequential", "fc"):
        if kind == "sequential":
            # the children's real names ("0", "2"), so an error names the module's actual fqn
            layers = [(n, m) for n, m in block._modules.items() if not isinstance(m, nn.Dropout)]
            (n1, fc1), (_, act_mod), (n2, fc2) = layers
            act = activation_of(act_mod)
        else:
            (n1, fc1), act, (n2, fc2) = ("fc1", block.fc1), _act_attr(block), ("fc2", block.fc2)
        return FusedMLP(convert_linear(fc1, cfg, act, f"{where}.{n1}", _child(prefix, n1)),
                        convert_linear(fc2, cfg, "none", f"{where}.{n2}", _child(prefix, n2)))
    if kind == "gated":
        g, u = block.gate_proj, block.up_proj
        w = torch.cat([_checked_weight(g, f"{where}.gate_proj"), _checked_weight(u, f"{where}.up_proj")])
        b = None
        if g.bias is not None or u.bias is not None:
            zeros = lambda lin: torch.zeros(lin.out_features, dtype=w.dtype, device=w.device)  # noqa: E731
            b = torch.cat([g.bias if g.bias is not None else zeros(g), u.bias if u.bias is not None else zeros(u)])
        # one x feeds the stacked weight: gate and up need one vector (calibrate_smoothing gives them one)
        sg = _smoothing_for(cfg, _child(prefix, "gate_proj"), where)
        su = _smoothing_for(cfg, _child(prefix, "up_proj"), where)
        if (sg is None) != (su is None) or (sg is not None and not torch.equal(sg, su)):
            raise ValueError(f"{where}: gate_proj and up_proj share their input and are fused into one weight; "
                             "their smoothing factors must be one vector (fused.calibrate_smoothing gives them one)")
        s = _smoothed(w, sg, where)
        # gate and up see the same x, so their calibrated hessians are the same matrix: either serves
        hg = _gptq_for(cfg, _child(prefix, "gate_proj"), where)
        hu = _gptq_for(cfg, _child(prefix, "up_proj"), where)
        if (hg is None) != (hu is None):
            raise ValueError(f"{where}: gate_proj and up_proj are fused into one weight; give both a GPTQ hessian "
                             "or neither (fused.calibrate_gptq gives both)")
        h = hg
    elif kind == "gate_up":
        w, b = _checked_weight(block.gate_up_proj, f"{where}.gate_up_proj"), block.gate_up_proj.bias
        s = _smoothed(w, _smoothing_for(cfg, _child(prefix, "gate_up_proj"), where), where)
        h = _gptq_for(cfg, _child(prefix, "gate_up_proj"), where)
    else:
        raise TypeError(f"{where}: {type(block).__name__} is not an MLP block fused.is_mlp recognises")
    _check_device(cfg, w, where)
    if cfg.sparsity == "2:4":
        gate_up = FusedSparseGatedLinear.from_float(w, b, cfg.fmt, dynamic=dynamic, act=_act_attr(block),
                                                    prune=cfg.prune, where=f"{where}.gate_up")
    else:
        gate_up = FusedGatedLinear.from_float(w, b, cfg.fmt, dynamic=dynamic, act=_act_attr(block), smooth=s,
                                              hessian=h)
    return FusedGatedMLP(gate_up, convert_linear(block.down_proj, cfg, "none", f"{where}.down_proj",
                                                 _child(prefix, "down_proj")))


def _transform(module: nn.Module, config) -> nn.Module:
    fqn = _caller_fqn()
    where = fqn or type(module).__name__
    for field_name in _CALIBRATED:
        _calibrated_for(config, field_name, fqn, where)  # raises when there is a table but no fqn
    fqn = "" if fqn == "<root>" else fqn
    if _linear(module):
        return convert_linear(module, config, where=where, fqn=fqn)
    if is_mlp(module):
        return convert_block(module, config, where=where, fqn=fqn)
    raise TypeError(
        f"{where}: {type(module).__name__} is neither an nn.Linear nor an MLP block that fused.is_mlp "
        "recognises; use the default filter or filter_fn=fused.is_mlp")


register_quantize_module_handler(FusedInt8MLP)(_transform)
register_quantize_module_handler(FusedFloat8MLP)(_transform)
register_quantize_module_handler(FusedBF16MLP)(_transform)


def quantize(model: nn.Module, config, blocks: bool = True, filter_fn=None) -> nn.Module:
    """torchao's ``quantize_`` with the block filter by default, and a warning if nothing was converted.
    Returns the converted model: use the return value, since a model that *is* one MLP block (the root)
    cannot be swapped in place and comes back as a new fused module.

    (torchao's ``quantize_`` itself cannot warn: it has no hook after its walk. `fused.explain`
    warns too when a model holds no converted module.)"""
    from torchao.quantization import quantize_

    from fused.explain import converted_modules

    if filter_fn is None and blocks and is_mlp(model):
        return convert_block(model, config, where=type(model).__name__, fqn="")

    converted = converted_modules(model)
    before = len(converted)
    want = f"{config.fmt} {'weight-only' if getattr(config, 'weight_only', True) else 'W8A8'}"
    other = sorted({f"{m.fmt} {'W8A8' if m.dynamic else 'weight-only'}" for _, m in converted
                    if hasattr(m, "dynamic")} - {want})
    if other:  # Fused* modules are not nn.Linear: the walk below leaves them as they are
        warnings.warn(f"fused.quantize: {type(model).__name__} is already converted ({', '.join(other)}); those "
                      f"modules keep their format, not {config}. Convert the original float model instead",
                      stacklevel=2)
    if filter_fn is None and blocks:
        # blocks first, then the Linears outside any block
        quantize_(model, config, filter_fn=is_mlp)
        quantize_(model, config)
    else:
        quantize_(model, config, filter_fn=filter_fn)
    if len(converted_modules(model)) == before:
        warnings.warn(f"fused.quantize: nothing in {type(model).__name__} was converted with {config} "
                      "(no nn.Linear or recognised MLP block matched)", stacklevel=2)
    return model
