"""`fused.profile(model, inputs)`: where a forward spends its time, as a structured report.

Per forward (averaged over ``forwards`` profiled calls after ``warmup`` ones):

launches   CUDA: device kernels (memcpy/memset counted apart). CPU: there are no kernels; the count is the
           aten ops called directly from Python (an op's nested aten calls not counted), the CPU
           analogue of a launch. ``aten_ops`` counts every aten op, nested ones included.
fused ops  calls of the fusedmlp ops and the implementation each took, read from ``fused.dispatch.stats``
           ("gated -> triton:..." / "linear -> reference"); a reference path on CUDA is a fallback.
           "mlp_block -> per_layer" (a block run layer by layer) is listed but not counted as a call: its
           layers' calls are.
busy/idle  CUDA: busy = time at least one kernel or copy runs; idle = forward wall time (up to the end of a
           synchronize) minus busy: launch gaps and host overhead. CPU: busy = time inside top-level aten
           ops; idle = wall minus busy: Python and module overhead.
top ops    kernels by device time (CUDA) and ops by self CPU time (torch.profiler key averages).
memory     peak bytes allocated above the level before the forwards (CUDA: the caching allocator's
           counters; CPU: the profiler's memory events); weight bytes = parameters + buffers.

``compare(before, after)`` puts two reports side by side (same model, unconverted vs converted),
``Comparison.plot`` draws them as a PNG bar chart, ``trace_path`` exports a Chrome trace
(chrome://tracing or https://ui.perfetto.dev).
"""
from __future__ import annotations

import copy
import json
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, record_function

from fused import dispatch
from fused.kernels import launch
from fused.modules import FusedGatedLinear, FusedGatedMLP, FusedLinear, FusedMLP
from fused.tasks import call

FORWARD_RANGE = "fused.profile.forward"
_FUSED_OPS = (FusedLinear, FusedGatedLinear)
_BLOCKS = (FusedGatedMLP, FusedMLP)  # one mlp_block op where dispatch.block_applies (CUDA)
_DEVICE_TYPES = (DeviceType.CUDA,)


@dataclass
class OpStat:
    name: str
    calls: float  # per forward
    self_cpu_us: float  # per forward
    self_device_us: float  # per forward


@dataclass
class ProfileReport:
    label: str
    device: str
    forwards: int
    launches: float
    launch_unit: str
    device_copies: float  # memcpy/memset per forward (CUDA only)
    aten_ops: float  # every aten op per forward, nested ones included
    fused_op_calls: float
    paths: dict  # "op -> path": calls per forward, from fused.dispatch.stats
    fallbacks: float  # fused op calls per forward that took the slow reference path on CUDA
    wall_ms: float
    busy_ms: float
    idle_ms: float
    idle_definition: str
    peak_memory_bytes: int
    peak_memory_definition: str
    weight_bytes: int
    top_device: list = field(default_factory=list)  # [OpStat] kernels by device time
    top_cpu: list = field(default_factory=list)  # [OpStat] ops by self CPU time
    trace_path: str | None = None
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    def format(self, top: int = 8) -> str:
        lines = [
            f"profile [{self.label}] on {self.device}, per forward (mean of {self.forwards}):",
            f"  launches      {self.launches:g}  ({self.launch_unit}); aten ops incl. nested: {self.aten_ops:g}"
            + (f"; memcpy/memset: {self.device_copies:g}" if self.device.startswith("cuda") else ""),
            f"  fused ops     {self.fused_op_calls:g}"
            + (f"  ({', '.join(f'{k}: {v:g}' for k, v in self.paths.items())})" if self.paths else "")
            + (f"  FALLBACKS: {self.fallbacks:g}" if self.fallbacks else ""),
            f"  time          wall {self.wall_ms:.3f} ms, busy {self.busy_ms:.3f} ms, idle {self.idle_ms:.3f} ms "
            f"({self.idle_definition})",
            f"  memory        peak +{self.peak_memory_bytes / 2**20:.2f} MiB ({self.peak_memory_definition}); "
            f"weights {self.weight_bytes / 2**20:.2f} MiB",
        ]
        for title, ops, key in (("top kernels by device time", self.top_device, "self_device_us"),
                                ("top ops by self CPU time", self.top_cpu, "self_cpu_us")):
            if not ops:
                continue
            lines.append(f"  {title}:")
            for o in ops[:top]:
                o = o if isinstance(o, dict) else asdict(o)
                name = o["name"] if len(o["name"]) <= 70 else o["name"][:67] + "..."
                lines.append(f"    {o[key]:10.1f} µs  x{o['calls']:<6g} {name}")
        for n in self.notes:
            lines.append(f"  note: {n}")
        if self.trace_path:
            lines.append(f"  chrome trace: {self.trace_path}")
        return "\n".join(lines)


def _weight_bytes(model: nn.Module) -> int:
    from fused.sweep import param_bytes

    return param_bytes(model)


def _model_device(model: nn.Module, inputs) -> torch.device:
    for t in list(model.parameters()) + list(model.buffers()):
        return t.device
    ts = inputs.values() if isinstance(inputs, dict) else inputs if isinstance(inputs, (tuple, list)) else [inputs]
    for t in ts:
        if isinstance(t, torch.Tensor):
            return t.device
    return torch.device("cpu")


def _annotate_fused_ops(model: nn.Module) -> list:
    """Name each fused op call in the trace ("fusedmlp::linear" / "fusedmlp::gated"): eager calls go
    straight to fused.dispatch, not through the torch.library op, so the profiler would not see them."""
    handles, stack = [], []

    def pre(mod, args):
        rf = None
        if isinstance(mod, _FUSED_OPS):
            rf = record_function(f"fusedmlp::{mod.op_name}")
        elif args and isinstance(args[0], torch.Tensor) and dispatch.block_applies(args[0].device) \
                and mod.block_fusable():
            rf = record_function("fusedmlp::mlp_block")
        if rf is not None:
            rf.__enter__()
        stack.append(rf)

    def post(mod, args, out):
        rf = stack.pop()
        if rf is not None:
            rf.__exit__(None, None, None)

    for m in model.modules():
        if isinstance(m, _FUSED_OPS + _BLOCKS):
            handles.append(m.register_forward_pre_hook(pre))
            handles.append(m.register_forward_hook(post))
    return handles


def _activity(e):
    # FunctionEvent.activity_type exists in newer torch only (2.13 has it, 2.11 does not)
    return getattr(e, "activity_type", None)


def _is_cpu_op(e) -> bool:
    if e.device_type != DeviceType.CPU:
        return False
    if _activity(e) is not None:
        return _activity(e) == "cpu_op"
    return not getattr(e, "is_user_annotation", False) and not e.name.startswith("[")


def _is_annotation(e) -> bool:
    return bool(getattr(e, "is_user_annotation", False)) or (_activity(e) or "").endswith("user_annotation")


def _is_copy(e) -> bool:
    if _activity(e) in ("gpu_memcpy", "gpu_memset"):
        return True
    return e.name.startswith(("Memcpy", "Memset", "[memcpy", "[memset"))


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -float("inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def _peak_from_memory_events(prof, device_type) -> int | None:
    """Peak of the running sum of the profiler's allocation events (bytes above the start)."""
    results = getattr(prof.profiler, "kineto_results", None) if prof.profiler is not None else None
    if results is None:
        return None
    mem = sorted((e.start_ns(), e.nbytes()) for e in results.events()
                 if e.name() == "[memory]" and e.device_type() == device_type)
    run = peak = 0
    for _, n in mem:
        run += n
        peak = max(peak, run)
    return peak


def profile(model: nn.Module, inputs, *, forwards: int = 3, warmup: int = 2, label: str | None = None,
            trace_path: str | Path | None = None, top: int = 10, profile_memory: bool = True) -> ProfileReport:
    """Profile ``forwards`` calls of ``model(inputs)`` (Tensor / tuple of args / dict of kwargs) under
    torch.no_grad and return a ProfileReport (see the module docstring). ``trace_path``: also write a
    Chrome trace there. ``profile_memory=False`` drops the allocation events (a little less profiler
    overhead per op; the CPU peak is then not measured, CUDA's still is)."""
    if forwards < 1 or warmup < 0:
        raise ValueError(f"forwards must be >= 1 and warmup >= 0, got {forwards} and {warmup}")
    device = _model_device(model, inputs)
    cuda = device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    label = label or type(model).__name__

    with torch.no_grad():
        # compile and tune (call 1), record or capture for replay (call 2: see fused.dispatch.eager), warm the
        # allocator: the profiled calls are then the steady state a user's eager calls reach
        for _ in range(warmup):
            call(model, inputs)
        sync()
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
            mem_base = torch.cuda.memory_allocated(device)
        handles = _annotate_fused_ops(model)
        stats_before = Counter(dispatch.stats)
        quad_before = launch.counts["quad_as_vsel"]
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        try:
            with torch.profiler.profile(activities=activities, profile_memory=profile_memory) as prof:
                for _ in range(forwards):
                    with record_function(FORWARD_RANGE):
                        call(model, inputs)
                        sync()
        finally:
            for h in handles:
                h.remove()
        fused_calls = Counter(dispatch.stats) - stats_before
        quad_as_vsel = launch.counts["quad_as_vsel"] - quad_before

    events = prof.events()
    ranges = [(e.time_range.start, e.time_range.end) for e in events
              if e.name == FORWARD_RANGE and e.device_type == DeviceType.CPU and _is_annotation(e)]
    if len(ranges) != forwards:
        raise RuntimeError(f"fused.profile: found {len(ranges)} forward ranges in the trace, expected {forwards}")
    wall_us = sum(e - s for s, e in ranges)

    def in_forward(t: float) -> bool:
        return any(s <= t <= e for s, e in ranges)

    # CPU ops: top-level = no aten op among its ancestors (annotations do not count)
    top_level, aten = [], 0
    for e in events:
        if not _is_cpu_op(e) or not in_forward(e.time_range.start):
            continue
        aten += 1
        p = e.cpu_parent
        while p is not None and not _is_cpu_op(p):
            p = p.cpu_parent
        if p is None:
            top_level.append(e)

    notes = []
    if cuda:
        dev = [e for e in events if e.device_type in _DEVICE_TYPES and not _is_annotation(e)
               and in_forward(e.time_range.start)]
        kernels = [e for e in dev if not _is_copy(e)]
        copies = [e for e in dev if _is_copy(e)]
        busy_us = _union_us([(e.time_range.start, e.time_range.end) for e in dev])
        launches, unit = len(kernels) / forwards, "device kernels"
        idle_def = "device: forward wall time minus time with a kernel running (launch gaps + host overhead)"
        peak = torch.cuda.max_memory_allocated(device) - mem_base
        peak_def = "torch.cuda.max_memory_allocated above the level before the forwards"
        if not dev:
            notes.append("no device activity recorded (is CUPTI available?)")
    else:
        copies = []
        busy_us = sum(e.time_range.end - e.time_range.start for e in top_level)
        launches = len(top_level) / forwards
        unit = "CPU: no device kernels; aten ops called from Python (nested calls not counted)"
        idle_def = "CPU: wall minus time inside top-level aten ops (Python/module overhead)"
        peak = _peak_from_memory_events(prof, DeviceType.CPU) if profile_memory else None
        peak_def = "CPU allocations (profiler memory events) above the level before the forwards"
        if peak is None:
            peak, peak_def = 0, "not measured (profile_memory=False, or no profiler memory events in this torch)"

    avgs = [a for a in prof.key_averages() if a.key not in (FORWARD_RANGE, "[memory]")]
    dev_time = lambda a: getattr(a, "self_device_time_total", getattr(a, "self_cuda_time_total", 0.0))  # noqa: E731
    stat = lambda a: OpStat(a.key, a.count / forwards, a.self_cpu_time_total / forwards,  # noqa: E731
                            dev_time(a) / forwards)
    # device side: kernels and copies only (GPU annotation ranges would list whole forwards as "kernels")
    ours = lambda a: a.key == FORWARD_RANGE or a.key.startswith("fusedmlp::")  # noqa: E731
    top_device = sorted((a for a in avgs if a.device_type in _DEVICE_TYPES and dev_time(a) > 0
                         and not getattr(a, "is_user_annotation", False) and not ours(a)), key=dev_time, reverse=True)[:top]
    top_cpu = sorted((a for a in avgs if a.device_type == DeviceType.CPU and a.self_cpu_time_total > 0),
                     key=lambda a: a.self_cpu_time_total, reverse=True)[:top]

    paths = {f"{op} -> {path}": n / forwards for (op, path), n in sorted(fused_calls.items())}
    if quad_as_vsel:  # a 2:4 decode pick that could not read this x as aligned words (sparse24_gemv "quad")
        paths["sparse24_gemv -> quad pick ran as vsel (x not aligned 32-bit words)"] = quad_as_vsel / forwards
    fallbacks = sum(n for (op, path), n in fused_calls.items() if path == "reference") / forwards if cuda else 0.0
    if fallbacks:
        notes.append("some fused ops ran the pure-torch reference on the GPU (no kernel yet): see fused.explain")
    if trace_path is not None:
        trace_path = Path(trace_path)
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace_path))

    return ProfileReport(
        label=label, device=str(device), forwards=forwards,
        launches=launches, launch_unit=unit, device_copies=len(copies) / forwards,
        aten_ops=aten / forwards, paths=paths,
        fused_op_calls=sum(n for (op, path), n in fused_calls.items() if path != "per_layer") / forwards,
        fallbacks=fallbacks, wall_ms=wall_us / forwards / 1e3, busy_ms=busy_us / forwards / 1e3,
        idle_ms=max(wall_us - busy_us, 0.0) / forwards / 1e3, idle_definition=idle_def,
        peak_memory_bytes=int(peak), peak_memory_definition=peak_def, weight_bytes=_weight_bytes(model),
        top_device=[stat(a) for a in top_device], top_cpu=[stat(a) for a in top_cpu],
        trace_path=str(trace_path) if trace_path is not None else None, notes=notes)


# ---------------------------------------------------------------------------------------------- compare

_METRICS = [  # (attribute, title, scale to the shown unit)
    ("launches", "launches / forward", 1.0),
    ("wall_ms", "wall ms / forward", 1.0),
    ("busy_ms", "busy ms / forward", 1.0),
    ("idle_ms", "idle ms / forward", 1.0),
    ("peak_memory_bytes", "peak memory MiB", 2.0**-20),
    ("weight_bytes", "weights MiB", 2.0**-20),
]


@dataclass
class Comparison:
    before: ProfileReport
    after: ProfileReport

    def rows(self) -> list[dict]:
        out = []
        for attr, title, scale in _METRICS:
            b, a = getattr(self.before, attr) * scale, getattr(self.after, attr) * scale
            out.append({"metric": title, "before": b, "after": a, "after/before": a / b if b else None})
        return out

    def to_dict(self) -> dict:
        return {"before": self.before.to_dict(), "after": self.after.to_dict(), "summary": self.rows()}

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    def format(self) -> str:
        head = f"{'':22s}{self.before.label[:22]:>22s}{self.after.label[:22]:>24s}   after/before"
        lines = [f"before vs after on {self.after.device} ({self.after.launch_unit})", head]
        for r in self.rows():
            ratio = f"{r['after/before']:.2f}x" if r["after/before"] is not None else "-"
            lines.append(f"{r['metric']:22s}{r['before']:22.3f}{r['after']:24.3f}   {ratio}")
        lines.append("fused paths after: " + (", ".join(f"{k}: {v:g}" for k, v in self.after.paths.items()) or "none"))
        return "\n".join(lines)

    def plot(self, path: str | Path) -> Path:
        """PNG: one small bar chart per metric, before vs after."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=(11, 6.5), dpi=100)
        FigureCanvasAgg(fig)
        labels = [f"before\n{self.before.label}", f"after\n{self.after.label}"]
        for i, r in enumerate(self.rows()):
            ax = fig.add_subplot(2, 3, i + 1)
            vals = [r["before"], r["after"]]
            bars = ax.bar([0, 1], vals, color=["#8c8c8c", "#1f77b4"], width=0.6)
            ax.set_xticks([0, 1], [lab if len(lab) < 30 else lab[:28] + "…" for lab in labels], fontsize=8)
            ax.set_title(r["metric"] + (f"  ({r['after/before']:.2f}x)" if r["after/before"] else ""), fontsize=10)
            for b, v in zip(bars, vals):
                ax.annotate(f"{v:.3g}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=8)
            ax.set_ylim(0, max(vals + [1e-9]) * 1.18)
            ax.grid(True, axis="y", alpha=0.3)
        unit = "device kernels" if self.after.device.startswith("cuda") else "aten ops called from Python (CPU)"
        fig.suptitle(f"fused.profile on {self.after.device}: before vs after conversion (launches = {unit})",
                     fontsize=11)
        paths = ", ".join(f"{k}: {v:g}" for k, v in self.after.paths.items()) or "none"
        fig.text(0.01, 0.01, f"fused op paths per forward after: {paths}", fontsize=8, color="dimgray")
        fig.tight_layout(rect=(0, 0.03, 1, 0.95))
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        return path


def compare(before: ProfileReport, after: ProfileReport) -> Comparison:
    """Side by side reports of the same model before and after conversion (same device)."""
    if before.device != after.device:
        raise ValueError(f"compare: reports from different devices ({before.device} vs {after.device})")
    return Comparison(before, after)


def before_after(model: nn.Module, inputs, config, *, blocks: bool = True, out_dir: str | Path | None = None,
                 label: str | None = None, **kw) -> Comparison:
    """Profile ``model`` as it is, then a converted copy (``fused.quantize(copy, config, blocks)``).
    ``out_dir``: write trace_before.json, trace_after.json, profile.json and profile.png there."""
    from fused.configs import quantize

    converted = copy.deepcopy(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quantize(converted, config, blocks=blocks)
    for w in caught:
        if str(w.message).startswith("fused.quantize: nothing"):  # the comparison would be meaningless
            raise ValueError(str(w.message))
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    out = Path(out_dir) if out_dir is not None else None
    before = profile(model, inputs, label="unconverted", trace_path=out / "trace_before.json" if out else None, **kw)
    after = profile(converted, inputs, label=label or type(config).__name__,
                    trace_path=out / "trace_after.json" if out else None, **kw)
    cmp = compare(before, after)
    if out is not None:
        cmp.to_json(out / "profile.json")
        cmp.plot(out / "profile.png")
    return cmp


# fused/__init__ exports the function `profile`, which hides this module as the attribute `fused.profile`:
# hang the rest of the API on the function so `fused.profile.compare(...)` works too.
for _name in ("compare", "before_after", "Comparison", "ProfileReport"):
    setattr(profile, _name, globals()[_name])
