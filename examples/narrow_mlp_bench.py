"""Narrow fully-fused MLP vs PyTorch: one launch for the whole MLP against eager and torch.compile.

    python examples/narrow_mlp_bench.py                 # GPU: width 64 x 5 layers, ReLU, fp16, batch 2**21
    python examples/narrow_mlp_bench.py --sweep         # GPU: widths 16/32/64/128 x batch 2**14 .. 2**22
    python examples/narrow_mlp_bench.py --weight-dtype int8

The MLP: ``layers`` Linear(width, width) with ReLU after every one but the last (as in tiny-cuda-nn's
hidden layers), fp16 activations. Timed on the GPU with triton.testing.do_bench (median, ms -> µs):
  ours      fused.FusedNarrowMLP (first call tunes the kernel config; the pick is reported)
  eager     the nn.Sequential in fp16
  compiled  torch.compile(mode="reduce-overhead"): Inductor kernels replayed as a CUDA graph
  floor     read the input + write the output once at --hbm-tbps (H200: 4.8 TB/s)
On the CPU (no GPU) it runs a tiny smoke version with wall-clock medians: "ours" is then the pure-torch
reference path, not the kernel, and compiled is skipped.
Writes <out>/narrow_mlp.json, narrow_mlp.md (table) and narrow_mlp.png (plot).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402
from torch import nn  # noqa: E402

import fused  # noqa: E402
from fused.kernels import tuning  # noqa: E402
from fused.kernels.narrow_mlp import rows_bucket  # noqa: E402
from lowbit import sqnr  # noqa: E402


def make_mlp(width: int, layers: int, device, dtype) -> nn.Sequential:
    mods = []
    for i in range(layers):
        mods.append(nn.Linear(width, width))
        if i < layers - 1:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods).to(device=device, dtype=dtype).eval()


def time_gpu(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3  # µs


def time_cpu(fn, reps: int = 5) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6


def bench_one(width, layers, batch, weight_dtype, device, hbm_tbps, compile_it) -> dict:
    torch.manual_seed(0)
    dtype = torch.float16
    seq = make_mlp(width, layers, device, dtype)
    ours = fused.FusedNarrowMLP.from_module(seq, weight_dtype)
    x = torch.randn(batch, width, device=device, dtype=dtype)
    gpu = device == "cuda"
    timer = time_gpu if gpu else time_cpu
    row = dict(width=width, layers=layers, batch=batch, weight_dtype=weight_dtype, device=device,
               timer="do_bench median" if gpu else "wall-clock median")
    with torch.no_grad():
        y = ours(x)  # tunes on the first GPU call
        fp32 = make_mlp(width, layers, device, torch.float32)
        fp32.load_state_dict({k: v.float() for k, v in seq.state_dict().items()})
        ref = fp32(x.float())
        row["sqnr_ours_db"] = round(sqnr(ref, y.float()), 1)
        row["sqnr_eager_db"] = round(sqnr(ref, seq(x).float()), 1)
        row["ours_us"] = round(timer(lambda: ours(x)), 2)
        row["eager_us"] = round(timer(lambda: seq(x)), 2)
        if compile_it:
            torch.compiler.reset()
            comp = torch.compile(seq, mode="reduce-overhead", dynamic=False)
            for _ in range(3):  # compile, record the CUDA graph, replay
                comp(x)
            row["compiled_us"] = round(timer(lambda: comp(x)), 2)
        else:
            row["compiled_us"] = None
    row["floor_us"] = round(batch * width * 2 * 2 / (hbm_tbps * 1e12) * 1e6, 2)
    row["speedup_vs_eager"] = round(row["eager_us"] / row["ours_us"], 2)
    if row["compiled_us"]:
        row["speedup_vs_compiled"] = round(row["compiled_us"] / row["ours_us"], 2)
    picked = [cfg for key, cfg in tuning.picks.items()
              if key[0] == "narrow_mlp" and key[1] == rows_bucket(batch) and key[2][0] == width]
    row["config"] = picked[-1] if picked else None
    return row


def table(rows) -> str:
    head = "| width | layers | batch | weights | ours µs | eager µs | compiled µs | floor µs | x eager | x compiled | SQNR ours dB | config |"
    lines = [head, "|" + "|".join("---" for _ in range(12)) + "|"]
    for r in rows:
        comp = f'{r["compiled_us"]:.1f}' if r["compiled_us"] else "-"
        xc = f'{r["speedup_vs_compiled"]:.2f}' if r.get("speedup_vs_compiled") else "-"
        cfg = r["config"]
        cfg_s = (f'BM{cfg["BLOCK_M"]} w{cfg["num_warps"]} s{cfg["num_stages"]} p{cfg.get("programs_per_sm", 0)}'
                 f'{" pf" if cfg.get("prefetch") else ""}{" hoist" if cfg.get("hoist") else ""}{" tma" if cfg.get("tma") else ""}'
                 f'{" r" + str(cfg["maxnreg"]) if cfg.get("maxnreg") else ""}') if cfg else "-"
        lines.append(f'| {r["width"]} | {r["layers"]} | 2^{r["batch"].bit_length() - 1} | {r["weight_dtype"]} | '
                     f'{r["ours_us"]:.1f} | {r["eager_us"]:.1f} | {comp} | {r["floor_us"]:.1f} | '
                     f'{r["speedup_vs_eager"]:.2f} | {xc} | {r["sqnr_ours_db"]} | {cfg_s} |')
    return "\n".join(lines)


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    widths = sorted({r["width"] for r in rows})
    fig, axes = plt.subplots(1, len(widths), figsize=(4.2 * len(widths), 3.8), squeeze=False)
    for ax, w in zip(axes[0], widths):
        rs = sorted((r for r in rows if r["width"] == w), key=lambda r: r["batch"])
        b = [r["batch"] for r in rs]
        for key, label, style in (("ours_us", "fused (one launch)", "o-"), ("eager_us", "PyTorch eager", "s--"),
                                  ("compiled_us", "torch.compile + CUDA graphs", "^--"), ("floor_us", "HBM floor", ":")):
            ys = [r[key] for r in rs]
            if all(v is not None for v in ys):
                ax.plot(b, ys, style, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"width {w}, {rs[0]['layers']} layers, {rs[0]['weight_dtype']} ({rs[0]['device']})")
        ax.set_xlabel("batch")
        ax.set_ylabel("µs")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _write(rows, out: Path, gpu: bool) -> str:
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(device=torch.cuda.get_device_name() if gpu else "cpu", torch=torch.__version__,
                argv=sys.argv[1:], rows=rows, tuning_timings={str(k): v for k, v in tuning.timings.items()})
    (out / "narrow_mlp.json").write_text(json.dumps(meta, indent=1, default=str))
    md = table(rows)
    (out / "narrow_mlp.md").write_text(f"Device: {meta['device']}, torch {torch.__version__}\n\n{md}\n")
    return md


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sweep", action="store_true", help="widths 16/32/64/128 x batch 2**14, 2**16 .. 2**22 (GPU)")
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--widths", default="16,32,64,128", help="the sweep's widths (comma-separated)")
    p.add_argument("--layers", type=int, default=5)
    p.add_argument("--batch", type=int, default=2 ** 21)
    p.add_argument("--weight-dtype", default="fp16", choices=["fp16", "bf16", "int8"])
    p.add_argument("--hbm-tbps", type=float, default=4.8, help="HBM bandwidth for the floor (H200: 4.8)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    p.add_argument("--out", default="out/narrow-mlp-bench", help="output directory")
    args = p.parse_args(argv)
    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    if gpu:
        if args.sweep:
            cases = [(int(w), b) for w in args.widths.split(",") for b in (2 ** e for e in range(14, 23, 2))]
        else:
            cases = [(args.width, args.batch)]
    else:
        print("no CUDA GPU: tiny CPU smoke run (wall clock; 'ours' is the pure-torch reference path)")
        cases = [(16, 256), (32, 256)] if args.sweep else [(16, 512)]
    rows = []
    for w, b in cases:
        r = bench_one(w, args.layers if gpu else min(args.layers, 3), b, args.weight_dtype, device, args.hbm_tbps,
                      compile_it=gpu and not args.no_compile)
        rows.append(r)
        print(f'width {w:4d} batch {b:8d}: ours {r["ours_us"]:9.1f} µs  eager {r["eager_us"]:9.1f} µs  '
              f'compiled {r["compiled_us"] or float("nan"):9.1f} µs  floor {r["floor_us"]:7.1f} µs  '
              f'SQNR {r["sqnr_ours_db"]} dB', flush=True)
        md = _write(rows, Path(args.out), gpu)  # after every case: a long sweep cut short keeps its rows
    out = Path(args.out)
    plot(rows, out / "narrow_mlp.png")
    print()
    print(md)
    print(f"wrote {out}/narrow_mlp.json, narrow_mlp.md, narrow_mlp.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
