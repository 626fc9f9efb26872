"""Per-config check of the Gluon W8A16 GEMM (fused/kernels/w8a16_ws.py): SQNR against the reference or the error,
and which (token tile, output tile) blocks are wrong, for a failing cuda test's configs."""
import sys
import traceback

import torch

from fused.kernels.w8a16_ws import w8a16_ws
from fused.reference import gated_ref, linear_ref
from lowbit.metrics import sqnr

# 256-token tiles with the 256-token form's stage counts: below M=1024 the merged config would keep the 128-token
# form's 6 / 5 stages, which do not fit shared memory (the thirty-third session's failing tests)
T256 = dict(BLOCK_T=256, STAGES=4, GATED_STAGES=3)
CFGS = [None, dict(A_HALVES=False), T256, dict(T256, A_HALVES=False), dict(PERSIST=1), dict(PERSIST=5),
        dict(PERSIST=5, A_HALVES=False), dict(T256, PERSIST=True), dict(FP8_BITS=True), dict(U_PAD=4)]


def check(M, N, K, gated, fp8):
    torch.manual_seed(M + N)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    if fp8:
        q = torch.randn(N, K, device="cuda").clamp(-400, 400).to(torch.float8_e4m3fn)
    else:
        q = torch.randint(-127, 128, (N, K), device="cuda", dtype=torch.int8)
    s = torch.rand(N, device="cuda") * 0.01 + 1e-3
    ref = (gated_ref if gated else linear_ref)(x.float(), q, s, None, "silu")
    for cfg in CFGS:
        if cfg and "U_PAD" in cfg and not gated:
            continue
        n_out = N // 2 if gated else N
        out = torch.full((M, n_out), float("nan"), device="cuda", dtype=torch.bfloat16)
        try:
            y = w8a16_ws(x, q, s, None, "silu", gated=gated, config=cfg, out=out)
            torch.cuda.synchronize()
            bad = (~torch.isclose(y.float(), ref, rtol=0.05, atol=0.05 * ref.abs().mean().item()))
            tiles = sorted({(int(t) // 128, int(o) // 64) for t, o in bad.nonzero().tolist()[:100000]})
            print(f"{'gated' if gated else 'plain'} {'fp8' if fp8 else 'int8'} M={M} N={N} K={K} {cfg}: "
                  f"sqnr {sqnr(ref, y.float()):.1f} nan {int(torch.isnan(y).sum())} bad {int(bad.sum())} "
                  f"(token tile, 64-output block) {tiles[:12]}", flush=True)
        except Exception:
            name = f"{'gated' if gated else 'plain'} {'fp8' if fp8 else 'int8'}"
            print(f"{name} M={M} N={N} K={K} {cfg}: ERROR", flush=True)
            traceback.print_exc(limit=-3)


if __name__ == "__main__":
    for spec in sys.argv[1:]:  # M,N,K,gated,fp8
        M, N, K, g, f = (int(v) for v in spec.split(","))
        check(M, N, K, bool(g), bool(f))
