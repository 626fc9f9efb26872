"""Accuracy vs speed vs memory for one model under a list of configs: ``python -m fused sweep``.

For every config the fp32 reference model is copied, cast to the activation dtype, converted, and run
on the task's batches beside the reference. Measured per config:

* per-layer SQNR of each converted layer (an MLP block where ``fused.is_mlp`` matches, else an
  ``nn.Linear``), two ways: *isolated* (the converted layer fed the reference layer's own input: the
  layer's error alone) and *in model* (the layer's output inside the converted model: error so far);
* the task's end metric (output SQNR; for sentence encoders cosine similarity and retrieval top-1);
* latency (median ms per forward of the task's bench input) and weight bytes.

Configs that raise NotImplementedError (e.g. 2:4 before sparsity lands) are reported as not available.
Results: JSON, a markdown table, and a Pareto plot (error vs time, marker area = weight memory).
"""
from __future__ import annotations

import copy
import datetime
import json
import math
import platform
import re
import statistics
import time
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from fused import dispatch
from fused.configs import FusedFloat8MLP, FusedInt8MLP, _linear, is_mlp, quantize
from fused.gptq import calibrate_gptq
from fused.plots import pareto_front, plot_pareto  # noqa: F401  (sweep's API)
from fused.smoothing import calibrate_smoothing
from fused.tasks import Task, call, cast_inputs
from lowbit.metrics import ratio_db
from sparsity import prune_24_


@dataclass(frozen=True)
class SweepConfig:
    """One column of the sweep. ``make`` returns a fresh torchao config (None: no conversion, only the
    dtype cast); ``dtype`` overrides the sweep's activation dtype; ``blocks`` converts whole MLP blocks
    where fused.is_mlp matches (Linears elsewhere), False converts every Linear on its own.
    ``calibrate`` > 0: ``make(model, batches)`` gets the fp32 model and the task's first ``calibrate``
    batches (e.g. for fused.calibrate_smoothing) instead of no arguments. ``pack_cpu``: then fused.pack_for_cpu
    (int8 layers on the CPU keep only the packed weight of the CPU's int8 GEMM; "not available" where it has none)."""

    name: str
    make: Callable[..., Any] | None
    dtype: torch.dtype | None = None
    blocks: bool = True
    calibrate: int = 0
    pack_cpu: bool = False


# Adding a config is one line.
CONFIGS: list[SweepConfig] = [
    SweepConfig("bf16", None, dtype=torch.bfloat16),
    SweepConfig("int8 W8A16", lambda: FusedInt8MLP()),
    SweepConfig("int8 W8A8", lambda: FusedInt8MLP(weight_only=False)),
    # the same, then fused.pack_for_cpu: the CPU's int8 GEMM on its packed weights (a no-op on a GPU)
    SweepConfig("int8 W8A16 packed", lambda: FusedInt8MLP(), pack_cpu=True),
    SweepConfig("int8 W8A8 packed", lambda: FusedInt8MLP(weight_only=False), pack_cpu=True),
    # SmoothQuant alpha 0.5 calibrated on the first 2 batches (64 sentences for MiniLM)
    SweepConfig("int8 W8A8 smooth", lambda model, batches: FusedInt8MLP(
        weight_only=False, smoothing=calibrate_smoothing(model, batches)), calibrate=2),
    SweepConfig("fp8 W8A8", lambda: FusedFloat8MLP()),
    SweepConfig("fp8 weight-only", lambda: FusedFloat8MLP(weight_only=True)),
    # GPTQ rounding of the weights (same scales, kernels and speed), hessians from the first 2 batches
    SweepConfig("fp8 W8A8 GPTQ", lambda model, batches: FusedFloat8MLP(
        gptq=calibrate_gptq(model, batches)), calibrate=2),
    SweepConfig("fp8 weight-only GPTQ", lambda model, batches: FusedFloat8MLP(
        weight_only=True, gptq=calibrate_gptq(model, batches)), calibrate=2),
    SweepConfig("int8 W8A16 2:4", lambda: FusedInt8MLP(sparsity="2:4")),
    # SparseGPT 2:4 (mask + kept values from XᵀX) on the first 2 batches, then packed as int8 2:4
    SweepConfig("int8 W8A16 2:4 SparseGPT", lambda model, batches: _pruned(
        model, batches, FusedInt8MLP(sparsity="2:4", prune=False)), calibrate=2),
    SweepConfig("fp8 W8A8 2:4", lambda: FusedFloat8MLP(sparsity="2:4")),
]

def _pruned(model: nn.Module, batches: list, cfg):
    """SparseGPT-prune ``model`` (the copy being converted, fp32) in place, the Linears the converter replaces
    (in_features % 4 == 0; others stay dense, as with magnitude); the config then packs them."""
    prune_24_(model, "sparsegpt", calibration=batches, filter_fn=lambda m, fqn: _linear(m) and m.in_features % 4 == 0)
    return cfg


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _norm(name: str) -> str:
    return re.sub(r"[\s_\-]+", " ", name.strip().lower())


def config_names() -> list[str]:
    return [c.name for c in CONFIGS]


def get_config(name: str | SweepConfig) -> SweepConfig:
    """A config by name; case, '-', '_' and spaces are interchangeable ("int8-w8a16" = "int8 W8A16")."""
    if isinstance(name, SweepConfig):
        return name
    for c in CONFIGS:
        if _norm(c.name) == _norm(name):
            return c
    raise ValueError(f"unknown config {name!r}; choose from: {', '.join(config_names())}")


def resolve_configs(names=None) -> list[SweepConfig]:
    """None: all of CONFIGS. A comma-separated string or a list of names / SweepConfigs otherwise."""
    if names is None:
        return list(CONFIGS)
    if isinstance(names, str):
        names = [n for n in names.split(",") if n.strip()]
    out = [get_config(n) for n in names]
    if not out:
        raise ValueError(f"no configs given; choose from: {', '.join(config_names())}")
    return out


def convert(model: nn.Module, entry: SweepConfig, dtype: torch.dtype, calibration: list | None = None) -> nn.Module:
    """Cast ``model`` (in place) to the entry's dtype, then convert it with the entry's config.
    ``calibration``: the task's batches, for entries with ``calibrate`` (run on the fp32 model, before the cast).

    Cast first: ``Module.to(dtype)`` after conversion would also cast fp8 weights and fp32 scales."""
    cfg = None
    if entry.make is not None and entry.calibrate:
        if not calibration:
            raise ValueError(f"config {entry.name!r} calibrates on the task's batches; pass calibration=batches")
        cfg = entry.make(model, list(calibration[:entry.calibrate]))
    elif entry.make is not None:
        cfg = entry.make()
    model.to(entry.dtype or dtype)
    if cfg is not None:
        quantize(model, cfg, blocks=entry.blocks)
    if entry.pack_cpu:
        from fused import cpu
        from fused.modules import pack_for_cpu

        on_cpu = any(b.device.type == "cpu" for b in model.buffers())
        if on_cpu and not (cpu.onednn_ok() or cpu.fbgemm_here()):
            raise NotImplementedError("pack_for_cpu: no exact int8 GEMM with a packed weight on this CPU")
        pack_for_cpu(model)
    return model


# --------------------------------------------------------------------------------------- measurements

def layer_fqns(model: nn.Module, blocks: bool = True) -> list[str]:
    """Names of the modules a conversion replaces: MLP blocks (when ``blocks``), then Linears outside them."""
    out, skip = [], None
    for name, m in model.named_modules():
        if skip is not None and (skip == "" or name.startswith(skip)):
            continue
        if blocks and is_mlp(m):
            out.append(name)
            skip = name + "." if name else ""
        elif _linear(m):
            out.append(name)
    return out


def _leaves(t: torch.Tensor):
    """The plain tensors holding ``t``'s data: a tensor subclass (torchao's quantized weights) has no storage
    of its own; its inner tensors (``__tensor_flatten__``) do."""
    if not hasattr(t, "__tensor_flatten__"):
        yield t
        return
    for name in t.__tensor_flatten__()[0]:
        inner = getattr(t, name)
        if isinstance(inner, torch.Tensor):
            yield from _leaves(inner)


def param_bytes(module: nn.Module) -> int:
    """Bytes of all parameters and buffers (the inner tensors of tensor subclasses), each storage counted
    once and whole (a 2:4 layer's values and tiled meta share one), plus the compressed copies the 2:4
    cuSPARSELt route keeps for the layers it runs (fused.dispatch.cslt_cached_bytes) and the copies the CPU path
    keeps (fused.cpu.cached_bytes: oneDNN's reordered int8 weights, cast scales)."""
    from fused import cpu, dispatch

    seen, total = set(), 0
    for t in list(module.parameters()) + list(module.buffers()):
        for leaf in _leaves(t):
            key = (leaf.untyped_storage().data_ptr(), leaf.device)
            if key in seen:
                continue
            seen.add(key)
            total += leaf.untyped_storage().nbytes()
    for m in module.modules():
        if isinstance(m._buffers.get("values"), torch.Tensor):
            total += dispatch.cslt_cached_bytes(m._buffers["values"])
        if isinstance(m._buffers.get("qweight"), torch.Tensor):
            total += cpu.cached_bytes(m._buffers["qweight"], m._buffers.get("scale"), m._buffers.get("bias"))
    return total


def _sync_for(inputs):
    ts = inputs.values() if isinstance(inputs, dict) else inputs if isinstance(inputs, (tuple, list)) else [inputs]
    cuda = any(isinstance(t, torch.Tensor) and t.is_cuda for t in ts)
    return torch.cuda.synchronize if cuda else (lambda: None)


def time_ms(model: nn.Module, inputs, iters: int = 10, warmup: int = 2) -> float:
    """Median ms per forward (CUDA-synchronised on the GPU)."""
    return time_side_by_side([(model, inputs)], iters, warmup)[0]


def time_side_by_side(runs: list, iters: int = 10, warmup: int = 2) -> list[float]:
    """Median ms per forward of each (model, inputs), timed round-robin: on a shared, noisy machine a
    burst of interference then hits every config alike instead of the one being timed."""
    times = [[] for _ in runs]
    with torch.no_grad():
        for model, inputs in runs:
            for _ in range(warmup):
                call(model, inputs)
        for _ in range(iters):
            for i, (model, inputs) in enumerate(runs):
                sync = _sync_for(inputs)
                sync()
                t = time.perf_counter()
                call(model, inputs)
                sync()
                times[i].append((time.perf_counter() - t) * 1e3)
    return [statistics.median(t) for t in times]


class _LayerError:
    """Accumulates ‖ref‖² and ‖ref − out‖² over batches (float64), so SQNR covers every batch."""

    def __init__(self):
        self.calls = 0
        self.signal = 0.0
        self.noise_isolated = 0.0
        self.noise_in_model = 0.0

    @staticmethod
    def _sq(t: torch.Tensor) -> float:
        return t.double().pow(2).sum().item()

    def add(self, ref: torch.Tensor, isolated: torch.Tensor, in_model: torch.Tensor | None) -> None:
        ref = ref.double()
        self.calls += 1
        self.signal += self._sq(ref)
        self.noise_isolated += self._sq(ref - isolated.double())
        # a layer the converted model never called has no in-model error: NaN, not a perfect score
        self.noise_in_model += self._sq(ref - in_model.double()) if in_model is not None else math.nan

    def result(self) -> dict:
        if not self.calls:  # the model never ran this layer on the batches
            return {"sqnr_db": math.nan, "sqnr_in_model_db": math.nan}
        # signal and noise are sums of squares (powers): 10 dB per decade
        return {"sqnr_db": ratio_db(self.signal, self.noise_isolated, 10.0),
                "sqnr_in_model_db": ratio_db(self.signal, self.noise_in_model, 10.0)}


def _capture(model: nn.Module, fqns: list[str], store: dict, inputs_too: bool):
    hooks = []
    for fqn in fqns:
        def hook(mod, args, out, fqn=fqn):
            store[fqn] = (args[0].detach() if inputs_too else None, out.detach())
        hooks.append(model.get_submodule(fqn).register_forward_hook(hook))
    return hooks


# --------------------------------------------------------------------------------------------- results

@dataclass
class SweepRow:
    config: str
    status: str  # "reference", "ok" or "not available"
    reason: str | None = None
    dtype: str | None = None
    metrics: dict = field(default_factory=dict)
    error: float | None = None  # the task's "lower is better" error (Pareto y axis)
    ms: float | None = None
    weight_bytes: int | None = None
    layer_bytes: int | None = None  # bytes of the layers a conversion replaces
    layers: dict = field(default_factory=dict)  # fqn -> {"sqnr_db", "sqnr_in_model_db"}
    paths: dict = field(default_factory=dict)  # "op -> path": calls per forward (fused.dispatch.stats)
    # calibrated configs: the metrics on the batches the calibration did not see (with how many batches)
    held_out: dict = field(default_factory=dict)

    @property
    def layer_sqnr(self) -> list[float]:
        """Isolated per-layer SQNRs, NaN ones (a layer never called, or NaN outputs) left out."""
        return [v["sqnr_db"] for v in self.layers.values() if not math.isnan(v["sqnr_db"])]

    def worst_layer(self) -> tuple[str, float] | None:
        known = {k: v["sqnr_db"] for k, v in self.layers.items() if not math.isnan(v["sqnr_db"])}
        if not known:
            return None
        fqn = min(known, key=known.get)
        return fqn, known[fqn]


def _finite(x):
    """JSON has no inf/NaN: write them as strings."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


@dataclass
class SweepResult:
    task: str
    description: str
    device: str
    act_dtype: str
    error_label: str
    columns: list
    rows: list[SweepRow]
    meta: dict = field(default_factory=dict)
    targets: list = field(default_factory=list)

    def row(self, config: str) -> SweepRow:
        for r in self.rows:
            if _norm(r.config) == _norm(config):
                return r
        raise KeyError(config)

    def to_dict(self) -> dict:
        return _finite(asdict(self))

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    def to_markdown(self) -> str:
        m = self.meta
        lines = [
            f"## Sweep: {self.task} on {self.device}",
            "",
            f"{self.description}. Quantized configs run with {self.act_dtype} activations; the reference is the "
            f"fp32 model. Latency: median of {m.get('iters')} forwards of one batch ({m.get('bench_input')}), all configs "
            f"timed round-robin — "
            f"on the CPU the fused ops take the CPU path (fused/cpu.py: aten int8 kernels, fp8 emulated through bf16, "
            f"2:4 expanded a tile at a time), not the GPU kernels. "
            f"Per-layer SQNR: each converted layer fed the reference layer's input (isolated)"
            f"{', padding positions left out' if m.get('token_mask') else ''}; "
            f"weights MiB: whole model (converted layers). torch {m.get('torch')}, {m.get('machine')}, "
            f"{m.get('threads')} thread(s), {m.get('date')}.",
            "",
        ]
        if m.get("command"):
            lines[-1:-1] = ["", f"Command: `{m['command']}`"]
        if self.targets:
            lines[-1:-1] = ["", "Targets (dash-dot lines on the plot): " + "; ".join(
                f"{t[1]} (error {t[0]:.4g})" for t in self.targets) + "."]
        head = ["config"] + [c[1] for c in self.columns] + [
            "layer SQNR min / median (dB)", "worst layer", "ms / forward", "weights MiB (layers)", "fused paths / forward"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.rows:
            if r.status == "not available":
                lines.append(f"| {r.config} | not available: {r.reason} |" + " |" * (len(head) - 2))
                continue
            cells = [r.config if r.status != "reference" else f"{r.config} (reference)"]
            cells += [fmt.format(r.metrics[k]) if k in r.metrics else "" for k, _, fmt in self.columns]
            s = r.layer_sqnr
            nan = len(r.layers) - len(s)
            cells.append((f"{min(s):.1f} / {statistics.median(s):.1f}" if s and r.status == "ok" else "")
                         + (f" ({nan} NaN)" if nan else ""))
            w = r.worst_layer()
            cells.append(f"`{w[0]}`" if w and r.status == "ok" else "")
            cells.append(f"{r.ms:.2f}")
            cells.append(f"{r.weight_bytes / 2**20:.2f} ({r.layer_bytes / 2**20:.2f})")
            cells.append(", ".join(f"{k}: {v:g}" for k, v in r.paths.items()) or "—")
            lines.append("| " + " | ".join(cells) + " |")
        held = [r for r in self.rows if r.status == "ok" and r.held_out]
        if held:
            lines += ["", "Calibrated configs on the batches their calibration did not see (the table above includes "
                      "the calibration batches):", ""]
            for r in held:
                cells = [f"{c[1]} {fmt.format(r.held_out[k])}" for k, c, fmt in
                         ((c[0], c, c[2]) for c in self.columns) if k in r.held_out]
                lines.append(f"- {r.config} ({r.held_out['batches']} batches): " + ", ".join(cells))
        ok = [r for r in self.rows if r.status == "ok" and r.layers]
        if ok:
            lines += ["", "### Per-layer SQNR (dB): isolated (in model)", "",
                      "| layer | " + " | ".join(r.config for r in ok) + " |", "|---|" + "---|" * len(ok)]
            for fqn in ok[0].layers:
                cells = []
                for r in ok:
                    v = r.layers.get(fqn)
                    cells.append(f"{v['sqnr_db']:.1f} ({v['sqnr_in_model_db']:.1f})" if v else "")
                lines.append(f"| `{fqn}` | " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"

    def plot(self, path: str | Path) -> Path:
        points = [{"label": r.config, "ms": r.ms, "error": r.error, "mib": r.weight_bytes / 2**20}
                  for r in self.rows if r.status == "ok"]
        ref = [r for r in self.rows if r.status == "reference"]
        missing = [r.config for r in self.rows if r.status == "not available"]
        return plot_pareto(
            points, path, title=f"{self.task} on {self.device}: error vs time (marker area ∝ weight MiB)",
            ylabel=self.error_label,
            xlabel=f"ms / forward ({self.meta.get('bench_input')}, median)",
            reference=(f"fp32 reference ({ref[0].weight_bytes / 2**20:.1f} MiB)", ref[0].ms,
                       ref[0].weight_bytes / 2**20) if ref else None,
            note=("not available: " + ", ".join(missing)) if missing else None, targets=self.targets)

    def write(self, out_dir: str | Path, stem: str = "sweep") -> dict[str, Path]:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"json": out / f"{stem}.json", "markdown": out / f"{stem}.md", "plot": out / f"{stem}.png"}
        self.to_json(paths["json"])
        paths["markdown"].write_text(self.to_markdown())
        self.plot(paths["plot"])
        return paths


def _machine(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import os

    return f"{platform.processor() or platform.machine()} CPU, {os.cpu_count()} cores"


def _describe(inputs) -> str:
    if isinstance(inputs, dict):
        t = inputs.get("input_ids", next(iter(inputs.values())))
        return f"{t.shape[0]} sequences x {t.shape[1]} tokens"
    if isinstance(inputs, (tuple, list)):
        inputs = inputs[0]
    return "x".join(str(s) for s in inputs.shape) + " input"


def sweep(task: Task, configs=None, *, device: str | torch.device | None = None,
          act_dtype: torch.dtype = torch.bfloat16, iters: int = 10, progress: bool = True) -> SweepResult:
    """Run every config on ``task`` (see the module docstring). ``configs``: names or SweepConfigs
    (default: all of CONFIGS). Configs raising NotImplementedError are kept as "not available" rows."""
    entries = resolve_configs(configs)
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    device = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ref_model = task.model.to(device).eval()
    batches = [cast_inputs(b, device=device) for b in task.batches]
    bench = cast_inputs(task.bench_input, device=device)

    with torch.no_grad():
        ref_results = torch.cat([task.readout(call(ref_model, b), b) for b in batches])
    ref_metrics = task.metrics(ref_results, ref_results)
    rows = [SweepRow("fp32", "reference", dtype="float32", metrics=ref_metrics, error=0.0,
                     weight_bytes=param_bytes(ref_model),
                     layer_bytes=sum(param_bytes(ref_model.get_submodule(f)) for f in layer_fqns(ref_model)))]
    timed = [(rows[0], ref_model, bench)]

    bar = _progress(entries, progress)
    for entry in bar:
        if hasattr(bar, "set_postfix_str"):
            bar.set_postfix_str(entry.name)
        row, model = _run_one(task, entry, ref_model, batches, bench, ref_results, act_dtype)
        rows.append(row)
        if model is not None:
            timed.append((row, model, cast_inputs(bench, dtype=entry.dtype or act_dtype)))
    for (row, _, _), ms in zip(timed, time_side_by_side([(m, b) for _, m, b in timed], iters)):
        row.ms = ms

    meta = {"iters": iters, "bench_input": _describe(task.bench_input), "torch": torch.__version__,
            "machine": _machine(device), "date": datetime.date.today().isoformat(),
            "batches": len(batches), "configs": [e.name for e in entries], "threads": torch.get_num_threads(),
            "token_mask": task.token_mask is not None}
    return SweepResult(task.name, task.description, str(device), str(act_dtype).replace("torch.", ""),
                       task.error_label, task.columns, rows, meta, [list(t) for t in task.targets])


def _progress(entries, on: bool):
    if not on:
        return entries
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is in the `tools` extra; the sweep works without it
        return entries
    return tqdm(entries, desc="sweep", unit="config")


def _not_available(entry: SweepConfig, e: NotImplementedError) -> SweepRow:
    return SweepRow(entry.name, "not available", reason=str(e) or type(e).__name__)


def _run_one(task, entry, ref_model, batches, bench, ref_results, act_dtype) -> tuple[SweepRow, nn.Module | None]:
    """Accuracy, memory and paths of one config; returns the converted model for the timing pass."""
    dtype = entry.dtype or act_dtype
    fqns = layer_fqns(ref_model, entry.blocks)
    model = copy.deepcopy(ref_model)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="fused.quantize: nothing")
            convert(model, entry, dtype, batches)
    except NotImplementedError as e:
        return _not_available(entry, e), None
    model.eval()

    errors = {f: _LayerError() for f in fqns}
    results = []
    ref_io, out_io = {}, {}
    hooks = _capture(ref_model, fqns, ref_io, inputs_too=True) + _capture(model, fqns, out_io, inputs_too=False)
    try:
        with torch.no_grad():
            for b in batches:
                mask = task.token_mask(b) if task.token_mask is not None else None
                call(ref_model, b)
                results.append(task.readout(call(model, cast_inputs(b, dtype=dtype)), b))
                in_model = dict(out_io)  # the isolated calls below fire the same hooks
                for f in fqns:
                    if f not in ref_io:  # not called on this batch
                        continue
                    x_ref, y_ref = ref_io[f]
                    # isolated: this layer alone, fed exactly what the reference layer saw
                    y_iso = model.get_submodule(f)(x_ref.to(dtype))
                    y_in = in_model[f][1] if f in in_model else None
                    if mask is not None and tuple(y_ref.shape[:2]) == tuple(mask.shape):
                        y_ref, y_iso = y_ref[mask], y_iso[mask]
                        y_in = y_in[mask] if y_in is not None else None
                    errors[f].add(y_ref, y_iso, y_in)
                ref_io.clear()
                out_io.clear()
    except NotImplementedError as e:  # a config whose kernels are missing at run time
        return _not_available(entry, e), None
    finally:
        for h in hooks:
            h.remove()
    n_cal = sum(r.shape[0] for r in results[:entry.calibrate])
    results = torch.cat(results)
    metrics = task.metrics(ref_results, results)
    held_out = {}
    if entry.calibrate and len(batches) > entry.calibrate:
        held_out = dict(task.metrics(ref_results[n_cal:], results[n_cal:]), batches=len(batches) - entry.calibrate)

    before = Counter(dispatch.stats)
    with torch.no_grad():
        call(model, cast_inputs(bench, dtype=dtype))
    paths = {f"{op} -> {path}": n for (op, path), n in (Counter(dispatch.stats) - before).items()}
    row = SweepRow(
        entry.name, "ok", dtype=str(dtype).replace("torch.", ""), metrics=metrics, error=task.error(metrics),
        weight_bytes=param_bytes(model), layer_bytes=sum(param_bytes(model.get_submodule(f)) for f in fqns),
        layers={f: errors[f].result() for f in fqns}, paths=dict(sorted(paths.items())), held_out=held_out)
    return row, model
