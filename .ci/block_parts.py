"""Where a block's CUDA-graph time goes (thirty-first session: the Llama int8 W8A16 block at M=1024 took 608 µs in the
bench while its two layers' route timings add up to 561): the block converted as the bench does, its routes timed on
the first call, then (1) the block's graph replay timed as the bench times it, (2) each kernel's GPU time in those
replays by torch.profiler (CUPTI sees a graph's kernels), (3) the gaps: graph time minus the kernels' sum, (4) (thirty-
second session) 200 replays back to back under one event pair (no L2 flush between them), and the SM clock and power
nvidia-smi sampled every 20 ms in each phase: is the gap the flush, or the power cap (a profiler window of 20 replays
is short enough to run at boost clocks)?
usage: python .ci/block_parts.py [llama|gpt] [M,..] [config, default "int8 W8A16"]; on the CPU it runs the same at
d=64 (a smoke run: no GPU timings)"""
import copy
import os
import subprocess
import sys
import time
from collections import defaultdict

import torch

sys.path.insert(0, os.getcwd())
import fused  # noqa: E402
from fused import dispatch  # noqa: E402
from fused.bench import OURS, make_block  # noqa: E402

kind = sys.argv[1] if len(sys.argv) > 1 else "llama"
Ms = [int(v) for v in (sys.argv[2] if len(sys.argv) > 2 else "1024").split(",")]
name = sys.argv[3] if len(sys.argv) > 3 else "int8 W8A16"
cuda = torch.cuda.is_available()
dev = "cuda" if cuda else "cpu"
d, h = (4096, 14336 if kind == "llama" else 16384) if cuda else (64, 128)
cfg = OURS["ours " + name]()
base = make_block(kind, d, h, dev)
model = fused.quantize(copy.deepcopy(base), cfg, blocks=True)
smi = None
if cuda:
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "20"], stdout=subprocess.PIPE, text=True)
    samples = []

    def _read():
        for line in smi.stdout:
            try:
                samples.append((time.time(), *(float(v) for v in line.split(","))))
            except ValueError:
                pass

    import threading

    threading.Thread(target=_read, daemon=True).start()


def clocks(t0, t1) -> str:
    """Mean SM clock (MHz) and power (W) nvidia-smi saw between t0 and t1."""
    sel = [s[1:] for s in samples if t0 <= s[0] <= t1]
    if not sel:
        return "no samples"
    return f"{sum(c for c, _ in sel) / len(sel):.0f} MHz, {sum(p for _, p in sel) / len(sel):.0f} W ({len(sel)})"


with torch.no_grad():
    for M in Ms:
        x = torch.randn(M, d, device=dev, dtype=torch.bfloat16)
        for _ in range(3):
            model(x)  # route timings, tuning, recording
        dispatch.stats.clear()
        model(x)
        paths = dict(dispatch.stats)
        if not cuda:
            print(f"{kind} {name} M={M} (CPU smoke run): paths {paths}")
            continue
        from triton.testing import do_bench

        g = dispatch._graph_replay(lambda: model(x))
        time.sleep(0.5)
        t0 = time.time()
        t = sorted(do_bench(g.replay, warmup=50, rep=300, return_mode="median") * 1e3 for _ in range(3))
        t1 = time.time()
        time.sleep(0.5)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        burst = []
        for reps in (20, 200):
            time.sleep(0.3)
            t2 = time.time()
            a.record()
            for _ in range(reps):
                g.replay()
            b.record()
            torch.cuda.synchronize()
            burst.append(f"{reps} back to back {a.elapsed_time(b) * 1e3 / reps:.1f} µs ({clocks(t2, time.time())})")
        time.sleep(0.3)
        t3 = time.time()
        n = 20
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                g.replay()
            torch.cuda.synchronize()
        per = defaultdict(float)
        kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                         key=lambda e: e.time_range.start)
        each = max(len(kernels) // n, 1)  # kernels per replay: each launch of a replay keyed by its place
        for i, e in enumerate(kernels):  # (the grouped hand-off runs one kernel twice, its layers apart)
            us = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time
            per[f"#{i % each} {e.name[:86]}"] += us / n
        total = sum(per.values())
        t4 = time.time()
        print(f"{kind} {name} M={M}: graph {' / '.join(f'{v:.1f}' for v in t)} µs ({clocks(t0, t1)}); kernels "
              f"{total:.1f} µs (gaps {t[1] - total:.1f}; {clocks(t3, t4)}); {'; '.join(burst)}; paths {paths}")
        for k, v in sorted(per.items(), key=lambda kv: -kv[1]):
            print(f"    {v:8.1f} µs  {k}")
if smi is not None:
    smi.terminate()
