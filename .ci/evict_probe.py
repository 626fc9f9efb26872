"""Does the benchmark's L2 flush cost the first weight stream after it? (twenty-fifth session)

triton.testing.do_bench flushes L2 by zeroing a 256 MB buffer before each call: the L2 (60 MB) is left full of
dirty lines, and a kernel that streams weights evicts them, their write-back sharing the DRAM bus with its reads.
A pure read of the Llama gate/up bytes is timed with its loads' L2 policy normal / evict_first, after the usual
flush (dirty) and after a flush followed by a read of another 256 MB buffer (clean). Prints one line per case.
The read kernel is fused.kernels.read_floor's (the session's recorded figures came from this script's own copy of
the same loop, without the column mask, before it was folded into that file).

    python .ci/evict_probe.py
"""
import pathlib
import statistics
import sys

import torch
import triton

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from fused.kernels.read_floor import CONFIGS, read_rows  # noqa: E402


def bench(fn, flush, reps=60):
    dirty = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    clean = torch.ones(256 << 20, dtype=torch.int8, device="cuda")
    fn()
    times = []
    for _ in range(reps):
        dirty.zero_()
        if flush == "clean":  # evict the dirty lines (written back here), leave clean ones
            clean.view(torch.int32).max()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def main():
    for name, (R, K) in {"gate/up 28672x4096": (28672, 4096), "down 4096x14336": (4096, 14336),
                         "block 176 MB": (43008, 4096)}.items():
        w = torch.randint(-2**31, 2**31 - 1, (R, K // 4), dtype=torch.int32, device="cuda")
        out = torch.empty(R, dtype=torch.int32, device="cuda")
        for flush in ("dirty", "clean"):
            for ev in ("", "evict_first"):
                best = None
                for cfg in CONFIGS:
                    t = bench(lambda: read_rows(w, cfg, out=out, evict=ev), flush)
                    if best is None or t < best[0]:
                        best = (t, *cfg)
                mb = R * K / 1e6
                print(f"evict {name:20s} flush {flush:5s} policy {ev or 'normal':11s} {best[0]:6.1f} us "
                      f"({mb / best[0]:.2f} TB/s; tile {best[1]}x{best[2]} int32, {best[3]} warps)", flush=True)
    # the Llama pair (gate/up then down) in one CUDA graph, after the usual (dirty) flush, as the block is timed
    wa = torch.randint(-2**31, 2**31 - 1, (28672, 1024), dtype=torch.int32, device="cuda")
    wb = torch.randint(-2**31, 2**31 - 1, (4096, 3584), dtype=torch.int32, device="cuda")
    oa, ob = torch.empty(28672, dtype=torch.int32, device="cuda"), torch.empty(4096, dtype=torch.int32, device="cuda")
    for ev in ("", "evict_first"):
        def pair():
            read_rows(wa, (16, 256, 4), out=oa, evict=ev)
            read_rows(wb, (4, 1024, 4), out=ob, evict=ev)
        pair()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            pair()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            pair()
        t = triton.testing.do_bench(g.replay, return_mode="median")
        print(f"evict pair (graph, do_bench) policy {ev or 'normal':11s} {t * 1e3:6.1f} us", flush=True)


def floor():
    """The timing method's own floor: one pure-read kernel of the Llama block's weight bytes (8-bit: 176 MB; 2:4 at
    0.626 B/weight: 110 MB), captured in a CUDA graph and timed by do_bench (its usual flush), best tile of five."""
    for name, R in (("8-bit 176 MB", 43008), ("2:4 110 MB", 26880)):
        w = torch.randint(-2**31, 2**31 - 1, (R, 1024), dtype=torch.int32, device="cuda")
        out = torch.empty(R, dtype=torch.int32, device="cuda")
        for ev in ("", "evict_first"):
            best = None
            for cfg in CONFIGS:
                def one():
                    read_rows(w, cfg, out=out, evict=ev)
                one()
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    one()
                t = triton.testing.do_bench(g.replay, return_mode="median") * 1e3
                best = min(best or (t, *cfg), (t, *cfg))
            print(f"evict floor {name:12s} graph do_bench policy {ev or 'normal':11s} {best[0]:6.1f} us "
                  f"(tile {best[1]}x{best[2]} int32, {best[3]} warps)", flush=True)


if __name__ == "__main__":
    import sys

    floor() if sys.argv[1:] == ["floor"] else main()
