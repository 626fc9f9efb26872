"""Dense int8 decode on mma.sync (w8_mma) against the pure-torch reference.

On the CPU (TRITON_INTERPRET=1) the lanes' loads (the permuted K order), the split-K and the epilogue run as on the
GPU and the warp product comes from _mma_emu (the PTX fragment rules); the cuda tests check the rules against the
tensor cores. Shapes: M = 1, 3, 4 with two planes (token, plane column pairs), 5 and 8 with one; N multiples of 16,
K of 128; split-K over 2 and 3 ranges; outputs poisoned with NaN; accuracy as SQNR on the same planes."""
import pytest
import torch

from fused.kernels import w8_mma as wm
from fused.kernels.w8_mma import check_w8_mma_args, w8_mma
from fused.reference import gated_ref, linear_ref
from lowbit import quantize_weight, sqnr
from lowbit.quant import FP8_SPLIT_LO, split_activation, split_activation_fp8


def weight(R, K, seed=0, fmt="int8"):
    g = torch.Generator().manual_seed(seed)
    q, s = quantize_weight(torch.randn(R, K, generator=g), fmt)
    q[R // 2] = 0  # a zero row
    return q, s


def planes_of(x, planes, fp8=False):
    """(planes [P, M, K] (int8 or e4m3), scale [M], x as the kernel sees it: fp32 [M, K])."""
    if fp8:
        hi, lo, s = split_activation_fp8(x)
        if planes == 1:
            return hi[None].contiguous(), s.squeeze(-1).contiguous(), hi.float() * s
        return torch.stack([hi, lo]), s.squeeze(-1).contiguous(), (hi.float() + lo.float() / FP8_SPLIT_LO) * s
    hi, lo, s = split_activation(x)
    if planes == 1:
        return hi[None].contiguous(), (s * 256).squeeze(-1).contiguous(), hi.float() * (s * 256)
    return torch.stack([hi, lo]), s.squeeze(-1).contiguous(), (hi.float() * 256 + lo.float()) * s


CASES = [  # M, N, K, gated, planes, act, bias, config, fp8
    (1, 32, 128, False, 2, "none", False, None, False),
    (3, 48, 384, True, 2, "silu", True, dict(W=1, SPLIT_K=3, STAGES=1, num_warps=1), False),
    (4, 64, 256, True, 2, "gelu_tanh", False, dict(W=2, SPLIT_K=2, STAGES=3, num_warps=2), False),
    (5, 32, 256, False, 1, "relu", True, None, False),
    (8, 16, 128, True, 1, "gelu", True, dict(W=1, SPLIT_K=1, STAGES=4, num_warps=1), False),
    (2, 32, 256, True, 2, "silu", True, dict(W=2, SPLIT_K=2, STAGES=1, num_warps=2), True),
    (6, 16, 128, False, 1, "none", False, None, True),
    (7, 32, 256, True, 2, "silu", False, dict(W=1, SPLIT_K=2, STAGES=1, num_warps=1), False),  # two column sets
    (16, 32, 128, False, 2, "gelu", True, None, False),  # two planes x two token tiles: four sets
    (11, 48, 256, True, 1, "relu", True, dict(W=1, SPLIT_K=2, STAGES=3, num_warps=1), False),
    (13, 16, 256, False, 2, "none", False, None, True),
]


@pytest.mark.parametrize("M,N,K,gated,planes,act,has_bias,cfg,fp8", CASES)
def test_w8_mma_matches_reference(M, N, K, gated, planes, act, has_bias, cfg, fp8):
    torch.manual_seed(M * 7 + N + K)
    R = 2 * N if gated else N
    q, s = weight(R, K, seed=M, fmt="float8_e4m3" if fp8 else "int8")
    xq, xs, xh = planes_of(torch.randn(M, K, dtype=torch.bfloat16), planes, fp8)
    bias = torch.randn(R, dtype=torch.bfloat16) if has_bias else None
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    y = w8_mma(xq, xs, q, s, bias, act, gated, out=out, config=cfg)
    assert y.data_ptr() == out.data_ptr() and not y.isnan().any()
    ref = (gated_ref if gated else linear_ref)(xh, q.float(), s, bias, act)
    assert sqnr(ref, y.float()) > 40


def test_w8_mma_bad_inputs():
    M, N, K = 2, 32, 128
    q, s = weight(N, K)
    xq, xs, _ = planes_of(torch.randn(M, K, dtype=torch.bfloat16), 2)
    assert check_w8_mma_args(xq, xs, q) is None
    with pytest.raises(ValueError, match="1 or 2 planes of M <= 16"):
        w8_mma(torch.zeros(2, 17, K, dtype=torch.int8), torch.ones(17), q, s)
    with pytest.raises(ValueError, match="int8"):
        w8_mma(xq, xs, q.float(), s)
    with pytest.raises(ValueError, match="multiple of 128"):
        w8_mma(xq[:, :, :64].contiguous(), xs, q[:, :64].contiguous(), s)
    with pytest.raises(ValueError, match="32-byte aligned"):
        w8_mma(xq, xs, torch.cat([q, q], 1)[:, 16:144], s)
    with pytest.raises(ValueError, match="token scales"):
        w8_mma(xq, xs.double(), q, s)
    with pytest.raises(ValueError, match="wscale"):
        w8_mma(xq, xs, q, s[:-1])
    with pytest.raises(ValueError, match="gate and up"):
        w8_mma(xq, xs, q[:16], s[:16], gated=True)


@pytest.mark.parametrize("gated,dtype,fmt", [(True, torch.bfloat16, "int8"), (False, torch.float16, "int8"),
                                            (True, torch.bfloat16, "float8_e4m3")])
def test_w8a16_gemv_mma_config(gated, dtype, fmt):
    """w8a16_gemv's MMA configs (offered to its tuner with w8a16_gemv.MMA_CANDIDATES = True on CUDA) run act_split + w8_mma into
    the call's output: W8A16 numerics on a strided x (the split planes carry x to ~15 bits)."""
    from fused.kernels.w8a16_gemv import w8a16_gemv

    M, N, K = 3, 32, 256
    R = 2 * N if gated else N
    q, s = weight(R, K, seed=5, fmt=fmt)
    b = torch.randn(R)
    x = torch.randn(M, 2 * K, dtype=dtype)[:, ::2]
    act = "silu" if gated else "none"
    out = torch.full((M, N), float("nan"), dtype=dtype)
    y = w8a16_gemv(x, q, s, b, act, gated, out=out, config=dict(MMA=True, W=1, SPLIT_K=2, STAGES=1, num_warps=1))
    assert y.data_ptr() == out.data_ptr() and not y.isnan().any()
    ref = (gated_ref if gated else linear_ref)(x.float(), q.float(), s, b, act)
    assert sqnr(ref, y.float()) > (40 if fmt == "int8" else 30)  # e4m3 planes carry ~8 significant bits


def test_w8_mma_compiles_for_sm90():
    """sm_90 compile (no GPU needed): mma.sync m16n8k32 in the loop, the weights through cp.async (Triton 3.6's
    pipeliner; 3.9 does not pipeline these loads) and no layout conversion (lanes stay in their threads)."""
    from sm90_compile import facts_in_subprocess

    for label, (mmas, converts) in facts_in_subprocess("w8_mma_facts").items():
        assert mmas >= 4 and converts == 0, (label, mmas, converts)


# ---- CUDA (H200) ----

@pytest.mark.cuda
@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
@pytest.mark.parametrize("N,K,gated", [(14336, 4096, True), (4096, 14336, False)], ids=["gate_up", "down"])
def test_cuda_w8_mma_every_candidate_llama(N, K, gated, fmt):
    R = 2 * N if gated else N
    q, s = weight(R, K, fmt=fmt)
    q, s = q.cuda(), s.cuda()
    for M, planes in ((1, 2), (4, 2), (8, 1), (16, 2)):
        xq, xs, xh = planes_of(torch.randn(M, K, dtype=torch.bfloat16), planes, fmt != "int8")
        xq, xs, xh = xq.cuda(), xs.cuda(), xh.cuda()
        ref = (gated_ref if gated else linear_ref)(xh, q.float(), s, None, "silu" if gated else "none")
        cands = wm._candidates(N, K, gated)
        for cfg in cands if fmt == "int8" else cands[:3]:
            y = w8_mma(xq, xs, q, s, None, "silu" if gated else "none", gated, config=cfg)
            assert sqnr(ref.float(), y.float()) > 40, (M, cfg)
            assert torch.equal(y, w8_mma(xq, xs, q, s, None, "silu" if gated else "none", gated, config=cfg))


@pytest.mark.cuda
def test_cuda_w8a16_gemv_mma_route_and_pdl(monkeypatch):
    """With w8a16_gemv.MMA_CANDIDATES's candidates the tuner may pick act_split + w8_mma: right at M = 1 / 3 / 16 and strided x,
    the PDL chain bit-equal to plain launches, eagerly and replayed in a CUDA graph with fresh inputs."""
    from fused.kernels import sparse24_mma as sm
    from fused.kernels import w8a16_gemv as gv

    monkeypatch.setattr(gv, "MMA_CANDIDATES", True)
    N, K = 1024, 2048
    q, s = weight(2 * N, K)
    q, s = q.cuda(), s.cuda()
    for M in (1, 3, 16):
        x = torch.randn(M, 2 * K, device="cuda", dtype=torch.bfloat16)[:, ::2]
        ref = gated_ref(x.float(), q.float(), s, None, "silu")
        assert sqnr(ref, gv.w8a16_gemv(x, q, s, None, "silu", True).float()) > 40
        cfg = dict(MMA=True, **wm._candidates(N, K, True)[0])
        monkeypatch.setattr(sm, "PDL", False)
        want = gv.w8a16_gemv(x, q, s, None, "silu", True, config=cfg)
        monkeypatch.setattr(sm, "PDL", True)
        assert torch.equal(gv.w8a16_gemv(x, q, s, None, "silu", True, config=cfg), want)
        xg = x.clone()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            yg = gv.w8a16_gemv(xg, q, s, None, "silu", True, config=cfg)
        for _ in range(3):
            x2 = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            xg.copy_(x2)
            g.replay()
            monkeypatch.setattr(sm, "PDL", False)
            assert torch.equal(yg, gv.w8a16_gemv(x2, q, s, None, "silu", True, config=cfg)), M
            monkeypatch.setattr(sm, "PDL", True)
