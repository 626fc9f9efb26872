"""`fused.save(model, path)` / `fused.load(path, model)`: a converted model's state as safetensors.

The file holds ``model.state_dict()`` (plain tensors: int8 / float8 weights, fp32 scales, biases, and
whatever unconverted parameters the model has) and a metadata header:

  format            "fusedmlp.checkpoint"        format_version   "1"
  fusedmlp_version  the package that wrote it    torch_version    the torch that wrote it
  config            JSON: one entry per converted module (class, format, mode, activation, sizes, bias,
                    and smoothed=true where it holds a ``smooth_inv`` buffer, see fused.smoothing)
  tensors           JSON: dtype and shape of every key

`load` checks everything before it copies anything: a checkpoint from another config (int8 vs float8,
weight-only vs W8A8, another activation), another model, or a file that is not ours is refused with
an error naming the module or key. Tensors are read on the CPU and copied into the model's own
buffers, so they land on the model's device (a checkpoint written from a GPU model loads into a CPU
model and the reverse: safetensors stores no device).

``model.state_dict()`` of a converted model is plain tensors too, so ``torch.save`` /
``torch.load(weights_only=True)`` + ``load_state_dict`` works as well (and refuses a mismatching
dtype or shape, see `modules._Fused8bit._load_from_state_dict`).
"""
from __future__ import annotations

import json
import os

import torch
from torch import nn

from fused import cpu

FORMAT = "fusedmlp.checkpoint"
# safetensors' dtype codes -> torch dtype names
_SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
                       "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
                       "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
FORMAT_VERSION = "1"


def describe(model: nn.Module) -> dict[str, dict]:
    """fqn -> what each converted module is (the ``config`` of a checkpoint)."""
    from fused.explain import converted_modules

    out = {}
    for name, mod in converted_modules(model):
        out[name] = {
            "class": type(mod).__name__,
            "format": mod.fmt,
            "mode": "W8A8" if mod.dynamic else "weight-only",
            "act": mod.act,
            "in_features": mod.in_features,
            # gated modules (dense and 2:4) name their width hidden_features
            "out_features": mod.hidden_features if hasattr(mod, "hidden_features") else mod.out_features,
            "bias": mod.bias is not None,
            "source_bytes": int(getattr(mod, "source_bytes", 0)),
        }
        if mod._buffers.get("smooth_inv") is not None:  # only then: unsmoothed headers stay as they were
            out[name]["smoothed"] = True
    return out


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def save(model: nn.Module, path: str | os.PathLike) -> dict[str, str]:
    """Write ``model``'s state and a header to ``path`` (safetensors). Returns the header metadata."""
    from safetensors.torch import save_file

    import fused

    config = describe(model)
    if not config:
        raise ValueError(f"fused.save: {type(model).__name__} holds no converted module; convert it first "
                         "(fused.quantize(model, fused.FusedInt8MLP()))")
    tensors, seen = {}, {}
    for key, t in model.state_dict().items():
        t = t.detach().to("cpu").contiguous()
        # safetensors refuses tensors sharing memory (tied weights): store a copy, load copies back in
        ptr = (t.untyped_storage().data_ptr(), t.storage_offset(), t.numel(), t.dtype)
        tensors[key] = t.clone() if ptr in seen else t
        seen[ptr] = key
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "fusedmlp_version": fused.__version__,
        "torch_version": torch.__version__.split("+")[0],
        "config": json.dumps(config, sort_keys=True),
        "tensors": json.dumps({k: {"dtype": _dtype_name(t.dtype), "shape": list(t.shape)} for k, t in tensors.items()},
                              sort_keys=True),
    }
    save_file(tensors, os.fspath(path), metadata=meta)
    return meta


def read_metadata(path: str | os.PathLike) -> dict:
    """The header of a checkpoint written by `save` (config and tensors decoded), checked for format."""
    from safetensors import safe_open

    with safe_open(os.fspath(path), framework="pt", device="cpu") as f:
        meta = f.metadata() or {}
    if meta.get("format") != FORMAT:
        raise ValueError(f"{os.fspath(path)}: not a fusedmlp checkpoint (metadata format={meta.get('format')!r}, "
                         f"expected {FORMAT!r}); write it with fused.save")
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{os.fspath(path)}: checkpoint format_version {meta.get('format_version')!r} is not "
                         f"supported by this fusedmlp (reads {FORMAT_VERSION!r})")
    out = dict(meta)
    out["config"] = json.loads(meta["config"])
    out["tensors"] = json.loads(meta["tensors"])
    return out


def _config_hint(entry: dict) -> str:
    cls = "FusedInt8MLP" if entry["format"] == "int8" else "FusedFloat8MLP"
    return f"fused.quantize(model, fused.{cls}(weight_only={entry['mode'] == 'weight-only'}))"


def _check_config(saved: dict, have: dict, path: str) -> None:
    for name, entry in saved.items():
        if name not in have:
            raise ValueError(
                f"{path}: checkpoint module {name!r} ({entry['class']}, {entry['format']} {entry['mode']}) is not a "
                f"converted module in this model; convert the model as it was before saving, e.g. {_config_hint(entry)}")
        mine = have[name]
        for field in ("class", "format", "mode", "act", "in_features", "out_features", "bias", "smoothed"):
            theirs, ours = (entry.get(field, False), mine.get(field, False)) if field == "smoothed" else (entry[field], mine[field])
            if theirs != ours:
                hint = (f" (key {name + '.smooth_inv'!r}: convert the model with the same smoothing config)"
                        if field == "smoothed" else " (checkpoint made with another config or model?)")
                raise ValueError(f"{path}: module {name!r}: checkpoint has {field}={theirs!r}, the model has "
                                 f"{field}={ours!r}{hint}")
    extra = [n for n in have if n not in saved]
    if extra:
        raise ValueError(f"{path}: converted model module(s) {_keys(extra)} not in the checkpoint")


def _keys(keys: list[str]) -> str:
    keys = sorted(keys)
    return ", ".join(repr(k) for k in keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")


def _check_tensors(saved: dict, state: dict, path: str) -> None:
    missing = [k for k in state if k not in saved]
    if missing:
        raise ValueError(f"{path}: model key(s) {_keys(missing)} missing from the checkpoint")
    unexpected = [k for k in saved if k not in state]
    if unexpected:
        raise ValueError(f"{path}: checkpoint key(s) {_keys(unexpected)} do not exist in the model")
    for key, t in state.items():
        want = {"dtype": _dtype_name(t.dtype), "shape": list(t.shape)}
        if saved[key] != want:
            raise ValueError(f"{path}: key {key!r}: checkpoint has {saved[key]['dtype']} {tuple(saved[key]['shape'])}, "
                             f"the model expects {want['dtype']} {tuple(want['shape'])}")


def load(path: str | os.PathLike, model: nn.Module) -> nn.Module:
    """Load a `save`d checkpoint into ``model`` (converted with the same config), in place; returns it.

    Nothing is copied unless every module and key matches. Tensors are copied into the model's own
    tensors, one at a time, so they land on the model's device."""
    from safetensors import safe_open

    p = os.fspath(path)
    meta = read_metadata(p)
    _check_config(meta["config"], describe(model), p)
    # 2:4 layers with tiled meta (fused.sparse_modules) hand out a row-major copy in state_dict(): make them
    # row-major for the copy below, and tiled again after
    tiled = [m for m in model.modules() if getattr(m, "tiled_meta", False)]
    for m in tiled:
        m.set_tiled_meta(False)
    # layers packed for the CPU (fused.pack_for_cpu) hand out their plain weight rebuilt: plain for the copy, packed
    # again after
    packed = [(m, cpu.packed_act_bits(m._buffers["qweight"])) for m in model.modules()
              if cpu.packed_only(m._buffers.get("qweight"))]
    for m, _ in packed:
        m._buffers["qweight"] = cpu.unpack_weight(m._buffers["qweight"])
    state = model.state_dict()
    _check_tensors(meta["tensors"], state, p)
    with safe_open(p, framework="pt", device="cpu") as f:
        for key in f.keys():  # safetensors' own header must agree too, before anything is copied
            sl = f.get_slice(key)
            stored = (_SAFETENSORS_DTYPES.get(sl.get_dtype(), sl.get_dtype()), list(sl.get_shape()))
            if stored != (_dtype_name(state[key].dtype), list(state[key].shape)):
                raise ValueError(f"{p}: key {key!r}: stored tensor is {stored[0]} {tuple(stored[1])}, the header "
                                 f"and the model say {state[key].dtype} {tuple(state[key].shape)} (corrupt file?)")
        # One tensor at a time into the model's own storage (on its device): peak memory is the model
        # plus the largest tensor, not two copies of the model.
        with torch.no_grad():
            for key in f.keys():
                state[key].copy_(f.get_tensor(key))
    for m in tiled:
        m.set_tiled_meta(True)
    for m, bits in packed:
        m._buffers["qweight"] = cpu.pack_weight(m._buffers["qweight"], bits)
    from fused.explain import converted_modules

    for name, mod in converted_modules(model):
        mod.source_bytes = meta["config"][name]["source_bytes"]
    return model
