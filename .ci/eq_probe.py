"""epilogue_quant's forms at large M (thirtieth session): the shipped pick at M=8192 (Llama fp8) was UNFUSED (two
passes), tuned in the eighth session when the one-row programs took 311 µs; they take ~198 now. (1) Each candidate
alone (do_bench, L2 flushed; 3 alternating rounds, bit-equal to UNFUSED checked), Llama gate/up (fp8 with no scales:
cuBLAS rowwise applied them; int8 with x / w scales: _int_mm's route) and the GPT first layer (fp8, bias, gelu_tanh).
(2) The W8A8 blocks with every epilogue_quant pick of the M bucket forced to UNFUSED / one-row 8 warps / 16 warps,
CUDA-graph µs, 3 alternating rounds in one process, and the paths taken. usage: python .ci/eq_probe.py [M,..] [raw]"""
import copy
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.getcwd())
import fused  # noqa: E402
from fused import dispatch  # noqa: E402
from fused.bench import make_block  # noqa: E402
from fused.kernels import epilogue_quant as eq  # noqa: E402
from fused.kernels import tuning  # noqa: E402

Ms = [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "2048,8192").split(",")]
RAW = "raw" in sys.argv[2:]


def raw(H, fp8, gated, act, bias, M):
    cols = 2 * H if gated else H
    y = (torch.randn(M, cols, device="cuda") * (4 if fp8 else 3e4)).bfloat16()
    xs = None if fp8 else torch.rand(M, device="cuda") * 0.01 + 1e-3
    ws = None if fp8 else torch.rand(cols, device="cuda") * 1e-3
    b = torch.randn(cols, device="cuda") if bias else None
    cands = [c for c in eq._candidates(H)]
    run = lambda c: eq.epilogue_quant(y, xs, ws, b, act, gated, torch.bfloat16, fp8, M, config=c)  # noqa: E731
    ref = run(dict(UNFUSED=True))
    times = {i: [] for i in range(len(cands))}
    for _ in range(3):
        for i, c in enumerate(cands):
            q, s = run(c)
            assert torch.equal(q.view(torch.uint8), ref[0].view(torch.uint8)) and torch.equal(s, ref[1]), c
            times[i].append(do_bench(lambda: run(c), warmup=10, rep=50) * 1e3)
    gb = (M * cols * 2 + M * H) / 1e9
    print(f"{'fp8' if fp8 else 'int8'} H={H} {act} bias={bias} M={M} epilogue_quant (bit-equal to UNFUSED), µs:")
    for i, c in enumerate(cands):
        print(f"    {c}: {' / '.join(f'{v:.1f}' for v in times[i])}  ({gb / min(times[i]) * 1e3:.2f} TB/s)")


if RAW:
    for M in Ms:
        raw(16384, True, False, "gelu_tanh", True, M)

blocks = {"llama fp8 W8A8": ("llama", 14336, fused.FusedFloat8MLP()),
          "gpt fp8 W8A8": ("gpt", 16384, fused.FusedFloat8MLP()),
          "llama fp8 2:4 W8A8": ("llama", 14336, fused.FusedFloat8MLP(sparsity="2:4"))}
forms = {"UNFUSED": lambda H: dict(UNFUSED=True),
         "one-row 8w": lambda H: dict(BLOCK_N=1 << (H - 1).bit_length(), ONE_PASS=True, num_warps=8),
         "one-row 16w": lambda H: dict(BLOCK_N=1 << (H - 1).bit_length(), ONE_PASS=True, num_warps=16)}
with torch.no_grad():
    for name, (kind, H, cfg) in blocks.items():
        model = fused.quantize(copy.deepcopy(make_block(kind, 4096, H, "cuda")), cfg, blocks=True)
        for M in Ms:
            x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
            dispatch.stats.clear()
            model(x)
            model(x)
            paths = sorted(f"{op}:{p.split(':', 1)[-1]}" for (op, p), n in dispatch.stats.items() if n)
            keys = [k for k in tuning._cache if k[0] == "epilogue_quant" and k[1] == tuning.m_bucket(M)]
            picks = {k: tuning._cache[k] for k in keys}
            res = {f: [] for f in forms}
            for _ in range(3):
                for f, make in forms.items():
                    for k in keys:
                        tuning._cache[k] = make(k[2])
                    g = dispatch._graph_replay(lambda: model(x))
                    res[f].append(do_bench(g.replay, warmup=100, rep=500, return_mode="median") * 1e3)
                    del g
            tuning._cache.update(picks)
            print(f"{name} block M={M}, graph µs per round: " + "; ".join(
                f"{f} {' / '.join(f'{v:.1f}' for v in r)}" for f, r in res.items()))
            print(f"    picks {list(picks.values())}  paths {paths}")
