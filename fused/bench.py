"""`python -m fused bench`: our fused configs side by side with bf16 and torchao, in one process.

Method (../shared/gpu/README.md): build the block, convert it, run it once (compile, tune), check the
output against the pure-torch reference, capture one forward in a CUDA graph and report the median of
triton.testing.do_bench(graph.replay) as GPU time; the plain call's median too (difference = host
overhead). Fresh random inputs, weights far larger than L2. On the CPU it runs at small sizes with
wall-clock timing (a smoke test of the same code).
"""
from __future__ import annotations

import copy
import json
import sys
import time
from dataclasses import asdict, dataclass

import torch
from torch import nn

import fused
from fused import dispatch
from fused.demo import LlamaMLP
from lowbit import sqnr

OURS = {
    "ours int8 W8A16": lambda: fused.FusedInt8MLP(),
    "ours int8 W8A8": lambda: fused.FusedInt8MLP(weight_only=False),
    "ours fp8 W8A8": lambda: fused.FusedFloat8MLP(),
    "ours fp8 W8A16": lambda: fused.FusedFloat8MLP(weight_only=True),
    "ours int8 2:4 W8A16": lambda: fused.FusedInt8MLP(sparsity="2:4"),
}
# 2:4 W8A8 (int8 / fp8 values): not in the default set; `--configs` can name them. Their route also times
# cuSPARSELt's 2:4 tensor cores (fused.dispatch._cslt), which CUDA-graph replays take from M=1
SPARSE_FP8 = {"ours fp8 2:4 W8A8": lambda: fused.FusedFloat8MLP(sparsity="2:4"),
              "ours int8 2:4 W8A8": lambda: fused.FusedInt8MLP(sparsity="2:4", weight_only=False)}


def _torchao_configs():
    from torchao.quantization import (
        Float8DynamicActivationFloat8WeightConfig,
        Float8WeightOnlyConfig,
        Int8DynamicActivationInt8WeightConfig,
        Int8WeightOnlyConfig,
        PerRow,
    )

    return {
        "torchao int8 wo + compile": lambda: Int8WeightOnlyConfig(),
        "torchao int8 dyn + compile": lambda: Int8DynamicActivationInt8WeightConfig(),
        "torchao fp8 rowwise + compile": lambda: Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()),
        "torchao fp8 wo + compile": lambda: Float8WeightOnlyConfig(),
    }


def _sparse_baselines():
    """2:4 baselines (`--sparse-baselines`), each on a copy of the block magnitude-pruned to 2:4 as ours is:
    torchao's fp8 2:4 (CUTLASS, rowwise scales) + compile, and PyTorch's bf16 semi-structured weights."""
    from sparsity import prune_24_

    def torchao_fp8_24(m):
        from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow, quantize_
        from torchao.quantization.quantize_.workflows.float8.float8_packing_format import Float8PackingFormat

        prune_24_(m, "magnitude")
        quantize_(m, Float8DynamicActivationFloat8WeightConfig(
            granularity=PerRow(), packing_format=Float8PackingFormat.SPARSE_2D_DATA_2D_METADATA))
        return torch.compile(m)

    def torch_bf16_24(m):
        from torch.sparse import to_sparse_semi_structured

        prune_24_(m, "magnitude")
        for mod in m.modules():
            if isinstance(mod, nn.Linear):
                mod.weight = nn.Parameter(to_sparse_semi_structured(mod.weight.detach()), requires_grad=False)
        return m

    return {"torchao fp8 2:4 + compile": torchao_fp8_24, "torch bf16 2:4 semi-structured": torch_bf16_24}


def make_block(kind: str, d: int, h: int, device, dtype=torch.bfloat16) -> nn.Module:
    torch.manual_seed(0)
    if kind == "llama":
        m = LlamaMLP(d, h)
    elif kind == "gpt":
        m = nn.Sequential(nn.Linear(d, h), nn.GELU(approximate="tanh"), nn.Linear(h, d))
    else:
        raise ValueError(f"block must be 'llama' or 'gpt', got {kind!r}")
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * (p.shape[-1] ** -0.5 if p.dim() == 2 else 0.02))
    return m.to(device=device, dtype=dtype).eval()


@dataclass
class Row:
    block: str
    config: str
    M: int
    gpu_us: float | None
    plain_us: float | None
    sqnr_vs_ref_db: float | None  # our kernels vs the pure-torch reference of the same weights
    sqnr_vs_bf16_db: float | None
    weight_mib: float
    note: str = ""


SLOW_US = 200_000  # a call slower than this is timed once, plainly, not repeated
# Calls longer than SUSTAINED_US are timed over SUSTAINED_REP_MS instead of do_bench's 100 ms. Why: on the H200 the
# 8-bit blocks at M=8192 run at the 700 W power cap (nvidia-smi: SW power cap, SM clock 1380-1560 MHz instead of
# 1980, twenty-seventh session, `bash .ci/h200_next.sh spread`), and a 100 ms window lands wherever the power
# controller is: five captures of one fp8 block took 2462-2776 µs over 100 ms and 2462-2494 over 1 s (int8:
# 2638-2825 vs 2689-2695). M=1024 (~330 µs per call) spreads 8 µs either way.
SUSTAINED_US, SUSTAINED_REP_MS = 1000, 1000


def _time(fn, device) -> tuple[float | None, float | None]:
    """(CUDA-graph GPU µs, plain-call µs); on the CPU (None, wall µs)."""
    if device.type != "cuda":
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            for _ in range(3):
                fn()
            best = min(best, (time.perf_counter() - t) / 3)
        return None, best * 1e6
    from triton.testing import do_bench

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    once = (time.perf_counter() - t0) * 1e6
    if once > SLOW_US:  # e.g. torchao int8 weight-only + compile at large M (seconds per call)
        return None, once
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    rep = SUSTAINED_REP_MS if once > SUSTAINED_US else 100
    gpu = do_bench(g.replay, warmup=25, rep=rep, return_mode="median") * 1e3
    plain = do_bench(fn, warmup=25, rep=rep, return_mode="median") * 1e3
    del g
    return gpu, plain


def _weight_mib(model) -> float:
    """Parameters and buffers, plus the compressed copies the 2:4 cuSPARSELt route keeps (fused.sweep)."""
    from fused.sweep import param_bytes

    return param_bytes(model) / 2**20


FLOOR_MAX_M = 16  # the read floor is reported where decode is bound by weight bytes (it does not depend on M)


def floor_rows(kind: str, base: nn.Module, Ms, device, log=print) -> list[Row]:
    """The memory floor of the block's decode, measured (CUDA only): one kernel that only reads as many bytes as
    the block's weights take in 8 bits (1 B per weight) and in 8-bit 2:4 (0.625 B), timed as the blocks are (a
    CUDA graph, do_bench), best of the read kernel's tiles. Reported at every M <= FLOOR_MAX_M."""
    from fused.kernels.read_floor import CONFIGS, read_rows

    if device.type != "cuda":
        log("floor: CUDA only (a CPU read time is no floor for these kernels); skipped")
        return []
    n = sum(mod.weight.numel() for mod in base.modules() if isinstance(mod, nn.Linear))
    rows = []
    for label, nbytes in (("floor: read 8-bit weights once", n), ("floor: read 8-bit 2:4 weights once", n * 5 // 8)):
        w = torch.randint(-2**31, 2**31 - 1, (-(-nbytes // 4096), 1024), dtype=torch.int32, device=device)
        out = torch.empty(w.shape[0], dtype=torch.int32, device=device)
        timed = []
        for c in CONFIGS:
            read_rows(w, c, out=out)  # compile first: _time reports no graph time for a slow first call
            timed.append((_time(lambda w=w, c=c: read_rows(w, c, out=out), device)[0], c))
        if any(t is None for t, _ in timed):
            raise RuntimeError(f"floor: a read tile was too slow to time: {timed}")
        best = min(timed, key=lambda t: t[0])
        del w
        for M in Ms:
            if M <= FLOOR_MAX_M:
                r = Row(kind, label, M, best[0], None, None, None, nbytes / 2**20,
                        f"a pure read, independent of M; tile {best[1]}")
                rows.append(r)
                log(_fmt_row(r))
    return rows


def run(blocks=("llama", "gpt"), Ms=(1, 16, 128, 1024, 8192), configs=None, baselines=True,
        device=None, d=4096, h=None, log=print, sparse_baselines=False, floor=False) -> list[Row]:
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    rows: list[Row] = []

    def want(name):  # ``baselines``: True (all), False, or the names to run
        return baselines is True or bool(baselines) and name in baselines
    torch._dynamo.config.cache_size_limit = 64
    for kind in blocks:
        hidden = h or (14336 if kind == "llama" else 16384)
        base = make_block(kind, d, hidden, device)
        variants: dict[str, tuple] = {"bf16 eager": (base, None)}
        if want("bf16 compile"):
            variants["bf16 compile"] = (torch.compile(base), None)  # default settings: what users type
        for name, cfg in (configs or OURS).items():
            m = copy.deepcopy(base)
            try:
                m = fused.quantize(m, cfg(), blocks=True)
            except (RuntimeError, NotImplementedError) as e:
                rows.append(Row(kind, name, 0, None, None, None, None, 0.0, f"unavailable: {e}"))
                continue
            variants[name] = (m, "ours")
        if baselines and device.type == "cuda":
            from torchao.quantization import quantize_

            for name, cfg in _torchao_configs().items():
                if not want(name):
                    continue
                m = copy.deepcopy(base)
                try:
                    quantize_(m, cfg())
                except Exception as e:  # report, keep going
                    rows.append(Row(kind, name, 0, None, None, None, None, 0.0, f"error: {type(e).__name__}: {e}"))
                    continue
                variants[name] = (torch.compile(m), "torchao")
        if floor:
            rows += floor_rows(kind, base, Ms, device, log)
        if sparse_baselines and device.type == "cuda":
            for name, make in _sparse_baselines().items():
                try:
                    variants[name] = (make(copy.deepcopy(base)), "baseline")
                except Exception as e:  # report, keep going
                    rows.append(Row(kind, name, 0, None, None, None, None, 0.0, f"error: {type(e).__name__}: {e}"))
        for M in Ms:
            x = torch.randn(M, d, device=device, dtype=torch.bfloat16)
            with torch.no_grad():
                ref_bf16 = base(x)
            for name, (model, who) in variants.items():
                note = ""
                try:
                    with torch.no_grad():
                        out = model(x)
                        gpu, plain = _time(lambda: model(x), device)
                        vs_ref = None
                        if who == "ours":  # the worse of the first call and one after the timing (replayed)
                            later = model(x)
                            with dispatch.force_path("reference"):
                                ref = model(x)
                            a, b = sqnr(ref, out), sqnr(ref, later)
                            vs_ref = a if a != a or a <= b else b  # NaN wins
                    vs_bf16 = sqnr(ref_bf16, out)
                except Exception as e:
                    gpu = plain = vs_ref = vs_bf16 = None
                    note = f"error: {type(e).__name__}: {str(e)[:120]}"
                if not note and device.type == "cuda" and gpu is None and plain is not None:
                    note = "one plain call (too slow to repeat)"
                r = Row(kind, name, M, gpu, plain, vs_ref, vs_bf16, _weight_mib(getattr(model, "_orig_mod", model)), note)
                rows.append(r)
                log(_fmt_row(r))
        del variants, base
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def _f(v, nd=1):
    return "–" if v is None else f"{v:.{nd}f}"


def _fmt_row(r: Row) -> str:
    return (f"{r.block:6s} {r.config:30s} M={r.M:<5d} gpu {_f(r.gpu_us):>8s} µs  plain {_f(r.plain_us):>8s} µs  "
            f"vs-ref {_f(r.sqnr_vs_ref_db):>6s} dB  vs-bf16 {_f(r.sqnr_vs_bf16_db):>6s} dB  {r.weight_mib:.0f} MiB {r.note}")


def markdown(rows: list[Row], field: str = "gpu_us") -> str:
    Ms = sorted({r.M for r in rows if r.M})
    out = []
    for block in dict.fromkeys(r.block for r in rows):
        out.append(f"\n**{block}** ({field}; µs)\n")
        out.append("| config | " + " | ".join(f"M={m}" for m in Ms) + " | weights MiB |")
        out.append("|---" * (len(Ms) + 2) + "|")
        for cfg in dict.fromkeys(r.config for r in rows if r.block == block):
            cells, mib = [], 0.0
            for m in Ms:
                rr = [r for r in rows if r.block == block and r.config == cfg and r.M == m]
                if rr:
                    mib = rr[0].weight_mib or mib
                if rr and getattr(rr[0], field) is not None:
                    cells.append(_f(getattr(rr[0], field)))
                elif rr and rr[0].note.startswith("one plain call"):
                    cells.append(f"{rr[0].plain_us / 1e3:.0f} ms (1 call)")
                else:
                    cells.append("err" if rr and rr[0].note.startswith(("error", "unavailable")) else "–")
            out.append(f"| {cfg} | " + " | ".join(cells) + f" | {mib:.0f} |")
    return "\n".join(out)


def plot(rows: list[Row], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    blocks = list(dict.fromkeys(r.block for r in rows))
    fig, axes = plt.subplots(1, len(blocks), figsize=(7 * len(blocks), 5), squeeze=False)
    for ax, block in zip(axes[0], blocks):
        for cfg in dict.fromkeys(r.config for r in rows if r.block == block):
            pts = [(r.M, r.gpu_us if r.gpu_us is not None else r.plain_us) for r in rows
                   if r.block == block and r.config == cfg and r.M and (r.gpu_us or r.plain_us)]
            if pts:
                xs, ys = zip(*pts)
                style = "-" if cfg.startswith("ours") else ":" if cfg.startswith("floor") else "--"
                ax.plot(xs, ys, marker="o", label=cfg, linestyle=style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("M (tokens)")
        ax.set_ylabel("µs per block (CUDA graph)" if rows and rows[0].gpu_us is not None else "µs per block (wall)")
        ax.set_title(f"{block} MLP block")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def host_profile(d=4096, h=14336, M=1, calls=200) -> str:
    """cProfile of plain eager calls of our int8 W8A16 Llama block: where the host time goes."""
    import cProfile
    import io
    import pstats

    m = fused.quantize(make_block("llama", d, h, "cuda"), fused.FusedInt8MLP())
    x = torch.randn(M, d, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        for _ in range(3):
            m(x)
        torch.cuda.synchronize()
        pr = cProfile.Profile()
        t = time.perf_counter()
        pr.enable()
        for _ in range(calls):
            m(x)
        pr.disable()
        torch.cuda.synchronize()
    s = io.StringIO()
    s.write(f"host profile: {(time.perf_counter() - t) / calls * 1e6:.1f} µs per call (profiled)\n")
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
    return s.getvalue()


def main(args) -> int:
    import os

    from fused.kernels import tuning

    if getattr(args, "host_profile", False):
        print(host_profile())

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    small = device.type != "cuda" and not args.full
    d = args.d or (256 if small else 4096)
    h = args.h or (704 if small else None)
    Ms = [int(m) for m in args.m.split(",")] if args.m else ([1, 3, 17, 64] if small else [1, 16, 128, 1024, 8192])
    configs = None
    if getattr(args, "configs", None):
        names = [n.strip() for n in args.configs.split(",") if n.strip()]
        known = {**OURS, **SPARSE_FP8}
        unknown = [n for n in names if n not in known]
        if unknown:
            print(f"fused bench: unknown config(s) {unknown}; choose from {list(known)}", file=sys.stderr)
            return 2
        configs = {n: known[n] for n in names}
    baselines = not args.no_baselines
    if baselines and getattr(args, "baselines", None):
        baselines = {n.strip() for n in args.baselines.split(",") if n.strip()}
        unknown = baselines - {"bf16 compile", *_torchao_configs()}
        if unknown:
            print(f"fused bench: unknown baseline(s) {sorted(unknown)}; choose from "
                  f"{['bf16 compile', *_torchao_configs()]}", file=sys.stderr)
            return 2
    rows = run(blocks=args.blocks.split(","), Ms=Ms, configs=configs, baselines=baselines, device=device,
               d=d, h=h, sparse_baselines=getattr(args, "sparse_baselines", False), floor=getattr(args, "floor", False))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                   "torch": torch.__version__, "d": d, "h": h, "rows": [asdict(r) for r in rows],
                   "tuned": {str(k): v for k, v in tuning.picks.items()},
                   # the same picks as `python -m fused tuned` reads them into the shipped table
                   "picks": [{"key": [str(x) for x in k], "config": v} for k, v in tuning.picks.items()],
                   "timings": {str(k): v for k, v in tuning.timings.items()},
                   "failed_candidates": {str(k): v for k, v in tuning.failures.items()},
                   "refused_routes": {str(k): v for k, v in dispatch.route_refusals.items()}},
                  f, indent=1)
    md = markdown(rows, "gpu_us" if device.type == "cuda" else "plain_us")
    if device.type == "cuda":
        md += "\n\nPlain call (host overhead included):\n" + markdown(rows, "plain_us")
    with open(os.path.join(args.out, "bench.md"), "w") as f:
        f.write(md + "\n")
    try:
        plot(rows, os.path.join(args.out, "bench.png"))
    except ImportError:
        print("matplotlib not installed: no plot")
    print(md)
    return 0
