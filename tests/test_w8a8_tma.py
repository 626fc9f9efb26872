"""fused.kernels.w8a8_tma: the W8A8 GEMM as persistent TMA tiles, against w8_gemm with the same tile (bit for bit:
the same tile arithmetic) and the pure-torch reference; CPU through Triton's interpreter, and on the GPU."""
import pytest
import torch

from fused.reference import gated_ref, linear_ref
from lowbit import quantize_weight, sqnr

FMTS = ["int8", "float8_e4m3"]
TILE = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=4, num_stages=1, num_warps=4, SPLIT_K=1)


def _run(x, q, s, b, act, gated, cfg, up=None, out=None):
    from fused.kernels.act_quant import act_quant
    from fused.kernels.w8_gemm import w8_gemm

    xq, xs = act_quant(x, fp8=q.dtype == torch.float8_e4m3fn)
    return w8_gemm(xq, q, s, b, act, gated, x_scale=xs, out_dtype=x.dtype, config=cfg, up=up, out=out)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("gated", [False, True])
def test_tma_tiles_equal_w8_gemm_interpreted(fmt, gated, poisoned):
    """Odd shapes (M = 1, 3, 17, 300; N not a multiple of the tile; K a multiple of 16 but not of BLOCK_K: TMA
    zero-fills the last K tile), a 3-D input's view, bias or not, a separate up projection; more tiles than
    programs (the persistent loop), the output poisoned before the run."""
    torch.manual_seed(0)
    cfg = dict(TILE, TMA=True)
    for M, N, K, bias, act, view in [(1, 24, 48, True, "silu", "plain"), (3, 37, 80, False, "gelu_tanh", "3d"),
                                     (17, 20, 112, True, "relu", "plain"), (300, 40, 32, False, "none", "plain")]:
        R = 2 * N if gated else N
        q, s = quantize_weight(torch.randn(R, K), fmt)
        b = torch.randn(R) if bias else None
        x = torch.randn(2, M, K, dtype=torch.bfloat16)[1] if view == "3d" else torch.randn(M, K, dtype=torch.bfloat16)
        out = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
        y = _run(x, q, s, b, act, gated, cfg, out=out)
        want = _run(x, q, s, b, act, gated, dict(TILE))
        assert torch.equal(y, want), (M, N, K)
        ref = (gated_ref if gated else linear_ref)(x, q, s, b, act, dynamic=True)
        assert sqnr(ref.float(), y.float()) > (38 if fmt == "int8" else 25), (M, N, K)
        if N % 8 == 0:  # the output by TMA store (rows 16-byte aligned): the same bits
            y2 = _run(x, q, s, b, act, gated, dict(cfg, TMA_Y=True), out=torch.full((M, N), float("nan"),
                                                                                     dtype=torch.bfloat16))
            assert torch.equal(y2, want), (M, N, K)
        if gated:  # the up projection in tensors of its own (compile_passes' gated pair)
            up = (q[N:].clone(), s[N:].clone(), None if b is None else b[N:].clone())
            yu = _run(x, q[:N].clone(), s[:N].clone(), None if b is None else b[:N].clone(), act, True, cfg, up=up)
            assert torch.equal(yu, want), (M, N, K)


def test_tma_candidates_and_refusals(monkeypatch):
    """Offered only with w8a8_tma.W8_TMA, above M=256 and for K a multiple of 16; a TMA config on operands TMA cannot
    read (K not a multiple of 16, planes, weight-only) is refused with a clear error."""
    from fused.kernels import w8a8_tma

    monkeypatch.setattr(w8a8_tma, "W8_TMA", False)
    assert w8a8_tma.candidates(8192, 14336, 4096, True) == []
    monkeypatch.setattr(w8a8_tma, "W8_TMA", True)
    cands = w8a8_tma.candidates(8192, 14336, 4096, True)
    assert cands and all(c["TMA"] and c["SPLIT_K"] == 1 for c in cands) and any(c.get("TMA_Y") for c in cands)
    assert w8a8_tma.candidates(128, 14336, 4096, True) == [] and w8a8_tma.candidates(8192, 100, 4104, False) == []
    q, s = quantize_weight(torch.randn(16, 40), "int8")
    x = torch.randn(3, 40, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="TMA config"):
        _run(x, q, s, None, "none", False, dict(TILE, TMA=True))
    from fused.kernels import tuning
    from fused.kernels.w8_gemm import w8_gemm

    with pytest.raises(ValueError, match="TMA config"):
        w8_gemm(torch.randn(3, 48, dtype=torch.bfloat16), *quantize_weight(torch.randn(16, 48), "int8"),
                config=dict(TILE, TMA=True))
    # a TMA pick (tuned for aligned operands) meeting an unaligned x runs the same tile by pointers, with a warning
    from fused.kernels.act_quant import act_quant

    q, s = quantize_weight(torch.randn(16, 48), "int8")
    xq, xs = act_quant(torch.randn(3, 48, dtype=torch.bfloat16), fp8=False)
    wide = torch.zeros(3, 49, dtype=torch.int8)
    wide[:, 1:] = xq
    key = (tuning.m_bucket(3), 16, 48, False, True, torch.int8)
    monkeypatch.setitem(tuning._cache, ("w8_gemm",) + key, dict(TILE, TMA=True))
    with pytest.warns(UserWarning, match="pointer loads"):
        y = w8_gemm(wide[:, 1:], q, s, x_scale=xs, out_dtype=torch.bfloat16)
    assert torch.equal(y, w8_gemm(xq, q, s, x_scale=xs, out_dtype=torch.bfloat16, config=dict(TILE)))
    # empty outputs (N = 0, M = 0): the right shapes, no launch
    assert w8_gemm(xq, q[:0], s[:0], x_scale=xs, out_dtype=torch.bfloat16, config=dict(TILE, TMA=True)).shape == (3, 0)
    assert w8_gemm(xq[:0], q, s, x_scale=xs[:0], out_dtype=torch.bfloat16, config=dict(TILE, TMA=True)).shape == (0, 16)
    from fused import dispatch

    dispatch.set_strict(True)  # the same flag as the dispatch's strict mode
    try:
        with pytest.raises(RuntimeError, match="strict mode"):
            w8_gemm(wide[:, 1:], q, s, x_scale=xs, out_dtype=torch.bfloat16)
    finally:
        dispatch.set_strict(False)


def test_tma_kernel_compiles_for_sm90():
    """Every candidate on the Llama shapes compiles for sm_90 (ptxas, no GPU) without spills, int8 and fp8."""
    import os
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(root)
    code = """
import sys
sys.path.insert(0, "tests")
from sm90_compile import compile_sm90
from fused.kernels import w8a8_tma as t
t.W8_TMA = True
for fp8 in (True, False):
    w = "*fp8e4nv" if fp8 else "*i8"
    for gated, N, K in ((True, 14336, 4096), (False, 4096, 14336)):
        cfg = t.candidates(8192, N, K, gated)[-1]  # the TMA-store form of the first tile
        ptrs = dict(x_ptr=w, xs_ptr="*fp32", w_ptr=w, ws_ptr="*fp32", b_ptr="*fp32", wu_ptr=w, su_ptr="*fp32",
                    bu_ptr="*fp32", y_ptr="*bf16")
        ints = dict(M=8192, N=N, K=K, RW=2 * N if gated else N, RU=2 * N if gated else N, u_row0=N if gated else 0,
                    stride_xm=K, stride_wn=K, stride_un=K, stride_ym=N, stride_yn=1)
        consts = dict(GATED=gated, FP8=fp8, HAS_BIAS=False, ACT="silu" if gated else "none", AS_U8=False,
                      BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=8, NUM_PROGS=132,
                      TMA_Y=cfg.get("TMA_Y", False))
        ptx = compile_sm90(t._w8a8_tma_kernel, ptrs, ints, consts, cfg["num_warps"], cfg["num_stages"])["ptx"]
        print("ok", fp8, gated, "cp.async.bulk.tensor" in ptx, "wgmma" in ptx, "st.local" in ptx,
              "cp.async.bulk.tensor.2d.global.shared" in ptx)
"""
    run = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=900)
    if run.returncode != 0 and "ptxas" in run.stderr and "not found" in run.stderr:
        pytest.skip("no ptxas in this Triton")
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [line.split() for line in run.stdout.splitlines() if line.startswith("ok")]
    assert len(rows) == 4, run.stdout
    # TMA copies, wgmma, no spills, the output by TMA store
    assert all(r[3:] == ["True", "True", "False", "True"] for r in rows), run.stdout


# ------------------------------------------------------------------------------------------ on the GPU

@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
def test_tma_candidates_cuda(fmt, monkeypatch):
    """Every TMA candidate on the Llama shapes at M = 300 and 1024: int8 bit-equal to w8_gemm with the same tile's
    pointer form, fp8 close to it and to the reference; the output poisoned."""
    from fused.kernels import w8a8_tma

    monkeypatch.setattr(w8a8_tma, "W8_TMA", True)
    torch.manual_seed(0)
    for gated, (N, K) in ((True, (14336, 4096)), (False, (4096, 14336))):
        R = 2 * N if gated else N
        q, s = quantize_weight(torch.randn(R, K, device="cuda"), fmt)
        for M in (300, 1024):
            x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            act = "silu" if gated else "none"
            ref = (gated_ref if gated else linear_ref)(x, q, s, None, act, dynamic=True)
            for cfg in w8a8_tma.candidates(M, N, K, gated):
                out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                y = _run(x, q, s, None, act, gated, cfg, out=out)
                want = _run(x, q, s, None, act, gated, {k: v for k, v in cfg.items() if k != "TMA"})
                if fmt == "int8":
                    assert torch.equal(y, want), (gated, M, cfg)
                else:
                    assert sqnr(want.float(), y.float()) > 40, (gated, M, cfg)
                assert sqnr(ref.float(), y.float()) > (38 if fmt == "int8" else 25), (gated, M, cfg)
