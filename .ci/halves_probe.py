"""Does cuBLAS run the stacked gate|up GEMM (N = 2H) slower than two GEMMs of N = H into one [2, M, H] buffer?
(twenty-eighth session: in the M=1024 Llama profile our stacked bf16 GEMM took 339.9 µs against 314.1 / 328.5 for
torchao's / bf16 eager's two N=14336 GEMMs, with another tile: 256x128 coopA vs 176x128.) bf16 mm, fp8 _scaled_mm
(bf16 out), int8 _int_mm; CUDA-graph µs, alternating rounds. usage: python .ci/halves_probe.py [M,...]
Result (H200, twenty-eighth session): bf16 even, fp8 and int8 halves 3-10% slower; the stacked op keeps one GEMM."""
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.getcwd())
from fused import dispatch  # noqa: E402

Ms = [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "128,1024,8192").split(",")]
H, K = 14336, 4096
dev = "cuda"
torch.manual_seed(0)


def forms(kind, M):
    if kind == "bf16":
        x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        w = torch.randn(2 * H, K, device=dev, dtype=torch.bfloat16)
        mm = lambda a, b, out=None: torch.mm(a, b, out=out)  # noqa: E731
        odt = torch.bfloat16
    elif kind == "fp8":
        x = torch.randn(M, K, device=dev).to(torch.float8_e4m3fn)
        w = torch.randn(2 * H, K, device=dev).to(torch.float8_e4m3fn)
        one = torch.ones((), device=dev)
        mm = lambda a, b, out=None: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16, out=out)  # noqa
        odt = torch.bfloat16
    else:
        x = torch.randint(-127, 128, (M, K), device=dev, dtype=torch.int8)
        w = torch.randint(-127, 128, (2 * H, K), device=dev, dtype=torch.int8)
        mm = lambda a, b, out=None: torch._int_mm(a, b, out=out) if out is not None else torch._int_mm(a, b)  # noqa
        odt = torch.int32
    y = torch.empty(M, 2 * H, device=dev, dtype=odt)
    y2 = torch.empty(2, M, H, device=dev, dtype=odt)

    def stacked():
        mm(x, w.t(), out=y)

    def halves():
        mm(x, w[:H].t(), out=y2[0])
        mm(x, w[H:].t(), out=y2[1])

    stacked(); halves()
    ref = y.float()
    got = torch.cat([y2[0], y2[1]], 1).float()
    assert torch.equal(ref, got) or (ref - got).abs().max() / ref.abs().max() < 1e-2, kind
    return {"stacked": stacked, "halves": halves}


for M in Ms:
    for kind in ("bf16", "fp8", "int8"):
        f = forms(kind, M)
        gs = {k: dispatch._graph_replay(v) for k, v in f.items()}
        res = {k: [] for k in gs}
        rep = 1000 if M >= 4096 else 200
        for _ in range(3):
            for k, g in gs.items():
                res[k].append(do_bench(g.replay, warmup=100, rep=rep, return_mode="median") * 1e3)
        print(f"M={M:5d} {kind:5s} " + "  ".join(f"{k} {' / '.join(f'{t:.1f}' for t in v)}" for k, v in res.items()),
              flush=True)
        del gs
