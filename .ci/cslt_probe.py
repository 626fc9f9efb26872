"""What torch's cuSPARSELt takes and how fast it is on this GPU (the 2:4 "cslt" route, issue 5)."""
import torch
from triton.testing import do_bench

torch.manual_seed(0)
dev = "cuda"


def mask24(w):
    i = w.abs().reshape(-1, 4).topk(2, dim=1).indices
    m = torch.zeros_like(w.reshape(-1, 4), dtype=torch.bool).scatter_(1, i, True)
    return (w.reshape(-1, 4) * m).reshape(w.shape)


def case(dt, N, K, M, alpha, out_dtype, tr=True):
    w = mask24(torch.randn(N, K, device=dev))
    if dt == torch.int8:
        wq = w.clamp(-127, 127).round().to(dt)
        x = torch.randint(-100, 100, (M, K), device=dev, dtype=torch.int8)
    elif dt == torch.float8_e4m3fn:
        wq = w.to(dt); x = torch.randn(M, K, device=dev).to(dt)
    else:
        wq = w.to(dt); x = torch.randn(M, K, device=dev, dtype=dt)
    a = torch.rand(N, device=dev) + 0.5 if alpha else None
    c = torch._cslt_compress(wq)
    y = torch._cslt_sparse_mm(c, x.t(), alpha=a, out_dtype=out_dtype, transpose_result=tr)
    ref = x.float() @ wq.float().t()
    if a is not None:
        ref = ref * a
    got = y.float() if tr else y.float().t()
    err = ((got - ref).norm() / ref.norm()).item()
    return c, x, a, y, err


for dt, od in ((torch.int8, torch.bfloat16), (torch.int8, None), (torch.int8, torch.int32), (torch.float8_e4m3fn, torch.bfloat16),
               (torch.float8_e4m3fn, torch.float32), (torch.bfloat16, None), (torch.float16, None)):
    for alpha in (True, False):
        try:
            c, x, a, y, err = case(dt, 256, 512, 304, alpha, od)
            print(f"OK   {dt} out={od} alpha={alpha}: y {y.dtype} {tuple(y.shape)} stride {y.stride()} rel.err {err:.2e}")
        except Exception as e:
            print(f"FAIL {dt} out={od} alpha={alpha}: {str(e).splitlines()[0][:300]}")

# timing at the Llama shapes in CUDA graphs (no host cost): compress once, matmul per M with the searched alg
def graph_us(fn, n=20):
    from fused.dispatch import _graph_replay

    g = _graph_replay(lambda: [fn() for _ in range(n)])
    return do_bench(g.replay, warmup=3, rep=50) * 1e3 / n


for dt, od in ((torch.int8, torch.bfloat16), (torch.float8_e4m3fn, torch.bfloat16), (torch.bfloat16, None)):
    for N, K in ((28672, 4096), (4096, 14336)):
        try:
            w = mask24(torch.randn(N, K, device=dev))
            wq = w.clamp(-127, 127).round().to(dt) if dt == torch.int8 else w.to(dt)
            c = torch._cslt_compress(wq)
            row = []
            for M in (16, 128, 1024, 8192):
                x = (torch.randint(-100, 100, (M, K), device=dev, dtype=torch.int8) if dt == torch.int8
                     else torch.randn(M, K, device=dev).to(dt))
                alg = torch._cslt_sparse_mm_search(c, x.t(), out_dtype=od, transpose_result=True)
                t0 = graph_us(lambda: torch._cslt_sparse_mm(c, x.t(), out_dtype=od, transpose_result=True))
                t1 = graph_us(lambda: torch._cslt_sparse_mm(c, x.t(), out_dtype=od, transpose_result=True, alg_id=alg))
                if dt == torch.int8:
                    xd = x
                    td = graph_us(lambda: torch._int_mm(xd, wq.t()))
                elif dt == torch.float8_e4m3fn:
                    one = torch.ones((), device=dev)
                    td = graph_us(lambda: torch._scaled_mm(x, wq.t(), one, one, out_dtype=torch.bfloat16))
                else:
                    td = graph_us(lambda: x @ wq.t())
                row.append(f"M={M}: {t0:.1f} / alg {alg} {t1:.1f} (dense {td:.1f})")
            print(f"{dt} [{N},{K}] graph us, cslt default / searched (dense torch): " + "; ".join(row))
        except Exception as e:
            print(f"FAIL timing {dt} [{N},{K}]: {str(e).splitlines()[0][:300]}")
