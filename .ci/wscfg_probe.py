"""Issue 3 at M=1024 (int8 W8A16 Llama block 564.6 µs against 550; NOTES lead 3 after the forty-first): the split-plane
Gluon GEMM (w8a8_ws.w8a16_ws_split, X_SPLIT) runs both layers there (gated 355.0 µs ping-pong, down 178.4 COOP), on
w8a8_ws's default stages and GROUP_N, never tuned for 2M plane rows. Times each config of the two Llama int8 layers
at M=1024 as the route timings do (a CUDA graph of the call, the GPU first held busy ~1 s, then do_bench windows of
250 ms: these products run at the 700 W cap), each output checked bit-equal against the default config's (int32
sums). Also the M=128 forms (sk: split-K "auto") when asked. (Stream-K, "stk", was removed in the forty-fourth
session after it lost here on an H100.)
Prediction: a few % at most on either layer (the default is the thirty-fifth session's W8A8 pick), i.e. the block
564.6 -> ~550 only if the best config gains ~3% on both.
usage: python .ci/wscfg_probe.py [1024|128]"""
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.getcwd())
from fused.kernels.act_split import act_split  # noqa: E402
from fused.kernels.w8a8_ws import w8a16_ws_split  # noqa: E402

D, H = 4096, 14336
M = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
ROUNDS = int(os.environ.get("ROUNDS", "1"))  # >1: the configs again in reverse order, each round's µs printed
if M >= 1024:  # GROUP_N explicit: the split forms' default went 8 -> 4 in the forty-fourth session
    CFGS = [("pp g8", dict(GROUP_N=8)), ("pp g4", dict(GROUP_N=4)), ("pp g2", dict(GROUP_N=2)),
            ("coop g8", dict(COOP=True, GROUP_N=8)), ("coop g4", dict(COOP=True, GROUP_N=4)),
            ("coop g2", dict(COOP=True, GROUP_N=2))]
    if not os.environ.get("SHORT"):
        CFGS += [("pp s3", dict(STAGES=3)), ("pp s5", dict(STAGES=5)), ("pp g16", dict(GROUP_N=16)),
                 ("coop s3", dict(COOP=True, STAGES=3)), ("coop g16", dict(COOP=True, GROUP_N=16))]
else:
    CFGS = [("pp", {}), ("coop", dict(COOP=True)), ("pp t64", dict(BLOCK_T=64)),
            ("coop t64", dict(COOP=True, BLOCK_T=64)),
            ("pp sk", dict(SPLIT_K="auto")), ("coop sk", dict(COOP=True, SPLIT_K="auto")),
            ("pp t64 sk", dict(BLOCK_T=64, SPLIT_K="auto"))]


def graph_us(fn) -> float:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    g.replay()
    end.record()
    end.synchronize()
    for _ in range(max(1, int(1000 / start.elapsed_time(end)))):  # ~1 s busy: the sustained clock
        g.replay()
    return do_bench(g.replay, warmup=25, rep=250, return_mode="median") * 1e3


torch.manual_seed(0)
x = torch.randn(M, D, device="cuda", dtype=torch.bfloat16)
for name, N, K, gated in (("gated", 2 * H, D, True), ("down", D, H, False)):
    w = torch.randint(-127, 128, (N, K), device="cuda", dtype=torch.int8)
    ws = torch.rand(N, device="cuda") * 1e-3 + 1e-4
    xin = x if K == D else torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    xq, xs = act_split(xin, interleave=True)
    act = "silu" if gated else "none"
    want = w8a16_ws_split(xq, xs, w, ws, None, act, gated, config=CFGS[0][1])
    runs = {label: [] for label, _ in CFGS}
    notes = {}
    for r in range(ROUNDS):
        for label, cfg in CFGS if r % 2 == 0 else CFGS[::-1]:
            try:
                got = w8a16_ws_split(xq, xs, w, ws, None, act, gated, config=cfg)
                notes.setdefault(label, "" if torch.equal(got, want) else "DIFFERS")
                runs[label].append(graph_us(lambda: w8a16_ws_split(xq, xs, w, ws, None, act, gated, config=cfg)))
            except Exception as e:  # noqa: BLE001  (a config that does not build or fit: say so, go on)
                notes[label] = f"{type(e).__name__}: {str(e)[:80]}"
                runs[label].append(float("inf"))
            print(name, M, label, runs[label][-1], notes[label], flush=True)
    print(f"\n{name} M={M} int8, graph µs (sustained), fastest median first (each round):")
    for label in sorted(runs, key=lambda k: sorted(runs[k])[len(runs[k]) // 2]):
        print(f"  {label:14s} {' '.join(f'{u:8.1f}' for u in runs[label])} {notes[label]}")
