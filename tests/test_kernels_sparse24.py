"""The 2:4 sparse Triton kernel (TRITON_INTERPRET=1 on the CPU) against the pure-torch reference.

Odd shapes everywhere: M = 1, 3, 17, 70; N not a multiple of 16; K a multiple of 4 but not of 16 (K % 8 == 4
exercises the half-used last meta byte, K > BLOCK_K a second, partial K tile). Outputs are poisoned with NaN
before the run; accuracy is SQNR against the reference at the output dtype's resolution."""
import math

import pytest
import torch

from fused.kernels.sparse24_linear import sparse24_gated, sparse24_linear
from fused.reference import sparse24_gated_ref, sparse24_linear_ref
from lowbit import quantize_weight, sqnr
from sparsity import magnitude_mask_24, pack_24

VALUE_DTYPES = [torch.int8, torch.float8_e4m3fn, torch.bfloat16]
X_DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# the reference and the kernel both accumulate in fp32 and round once to the output dtype
MIN_SQNR = {torch.bfloat16: 40.0, torch.float16: 55.0, torch.float32: 100.0}
FMT = {torch.int8: "int8", torch.float8_e4m3fn: "float8_e4m3"}


def packed(n, k, vdtype):
    """(values, meta, scale) of a random 2:4 weight [n, k] with a zero row and a one-non-zero group."""
    w = torch.randn(n, k)
    w = w * magnitude_mask_24(w.abs())
    w[n // 2] = 0
    w[0, :4] = torch.tensor([0.0, 0.0, 0.0, 0.7])
    if vdtype == torch.bfloat16:
        return (*pack_24(w.to(torch.bfloat16)), None)
    q, s = quantize_weight(w, FMT[vdtype])
    return (*pack_24(q), s)


def run_both(x, v, m, s, b, act, dynamic, gated):
    kernel, ref = (sparse24_gated, sparse24_gated_ref) if gated else (sparse24_linear, sparse24_linear_ref)
    n_out = v.shape[0] // 2 if gated else v.shape[0]
    x2 = x.reshape(-1, x.shape[-1])
    out = torch.full((x2.shape[0], n_out), float("nan"), dtype=x.dtype, device=x.device)
    y = kernel(x2, v, m, s, b, act, dynamic, out=out)
    assert y is out
    return y.reshape(*x.shape[:-1], n_out), ref(x, v, m, s, b, act, dynamic)


def check(y, ref, dtype):
    assert y.dtype == ref.dtype == dtype and y.shape == ref.shape
    assert not y.isnan().any()
    db = sqnr(ref, y)
    assert db >= MIN_SQNR[dtype], f"SQNR {db:.1f} dB < {MIN_SQNR[dtype]} ({dtype})"


@pytest.mark.parametrize("gated", [False, True], ids=["linear", "gated"])
@pytest.mark.parametrize("vdtype", VALUE_DTYPES, ids=["int8", "fp8", "bf16"])
@pytest.mark.parametrize("xdtype", X_DTYPES, ids=["x_bf16", "x_fp16", "x_fp32"])
@pytest.mark.parametrize("M", [1, 3, 17])
def test_weight_only_matches_reference(M, xdtype, vdtype, gated):
    N, K = 37, 52
    v, m, s = packed(2 * N if gated else N, K, vdtype)
    b = torch.randn(v.shape[0])
    x = torch.randn(M, K, dtype=xdtype)
    check(*run_both(x, v, m, s, b, "silu" if gated else "gelu_tanh", False, gated), xdtype)


@pytest.mark.parametrize("gated", [False, True], ids=["linear", "gated"])
@pytest.mark.parametrize("vdtype", [torch.int8, torch.float8_e4m3fn], ids=["int8", "fp8"])
@pytest.mark.parametrize("M", [1, 17])
def test_dynamic_w8a8_matches_reference(M, vdtype, gated):
    N, K = 45, 140  # two K tiles, the second partial; K % 8 == 4
    v, m, s = packed(2 * N if gated else N, K, vdtype)
    x = torch.randn(M, K, dtype=torch.bfloat16)
    check(*run_both(x, v, m, s, None, "relu", True, gated), torch.bfloat16)


@pytest.mark.parametrize("act", ["none", "relu", "gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("bias", [False, True])
def test_epilogue(act, bias):
    v, m, s = packed(70, 36, torch.int8)  # two N tiles
    b = torch.randn(70, dtype=torch.bfloat16) if bias else None
    x = torch.randn(3, 36, dtype=torch.float32)
    check(*run_both(x, v, m, s, b, act, False, False), torch.float32)


@pytest.mark.parametrize("K", [20, 24, 200])
def test_many_tiles_and_k(K):
    # M = 70: two M tiles (grouped order), N = 130: three N tiles, K in one, or two partial, tiles
    v, m, s = packed(130, K, torch.float8_e4m3fn)
    x = torch.randn(70, K, dtype=torch.float32)
    check(*run_both(x, v, m, s, torch.randn(130), "none", False, False), torch.float32)


def test_3d_and_non_contiguous_inputs():
    v, m, s = packed(2 * 19, 44, torch.int8)
    base = torch.randn(2, 44, 5, dtype=torch.float32)
    x = base.transpose(1, 2)  # [2, 5, 44], stride 1 along batch-seq, not along K
    assert not x.is_contiguous()
    y, ref = run_both(x, v, m, s, None, "silu", False, True)
    assert y.shape == (2, 5, 19)
    check(y, ref, torch.float32)
    # K stride 2 and a storage offset
    xs = torch.randn(7 * 88 + 3, dtype=torch.float16)[3:].view(7, 88)[:, ::2]
    assert xs.storage_offset() == 3 and xs.stride() == (88, 2)
    check(*run_both(xs, *packed(21, 44, torch.bfloat16), None, "none", False, False), torch.float16)


def test_empty_batch():
    v, m, s = packed(10, 16, torch.int8)
    y = sparse24_linear(torch.empty(0, 16, dtype=torch.bfloat16), v, m, s)
    assert y.shape == (0, 10) and y.dtype == torch.bfloat16


def test_nan_activations_propagate_like_reference():
    v, m, s = packed(21, 24, torch.int8)
    x = torch.randn(3, 24)
    x[1, 5] = float("nan")
    y, ref = run_both(x, v, m, s, None, "none", False, False)
    assert torch.equal(y.isnan(), ref.isnan()) and y[1].isnan().all()
    assert sqnr(ref[[0, 2]], y[[0, 2]]) >= MIN_SQNR[torch.float32]


def test_threshold_catches_wrong_positions():
    # a kernel that misread the metadata (here: the meta bytes of two rows swapped) must fail the test
    v, m, s = packed(21, 48, torch.int8)
    x = torch.randn(3, 48)
    ref = sparse24_linear_ref(x, v, m, s)
    bad = m.clone()
    bad[[0, 1]] = bad[[1, 0]]
    assert sqnr(ref, sparse24_linear(x, v, bad, s)) < 20


@pytest.mark.cuda
@pytest.mark.parametrize("vdtype", [torch.int8, torch.float8_e4m3fn], ids=["int8", "fp8"])
@pytest.mark.parametrize("M", [1, 17, 300])
def test_cuda_prmt_expansion_equals_byte_selects(M, vdtype, monkeypatch):
    """W8A8 on the GPU: EXPAND="prmt" (the asm's selectors) builds the same dense bytes as the byte selects, so the
    same dots: equal bits, for the first two candidate tiles of M, linear and gated, row-major and tiled meta,
    N = 1000 (a partial row tile)."""
    from fused.kernels import sparse24_linear as sl
    from sparsity.packing import tile_meta

    if vdtype == torch.float8_e4m3fn and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 needs compute capability >= 8.9")
    x = torch.randn(M, 2048, dtype=torch.bfloat16, device="cuda")
    for gated, rows in ((False, 1000), (True, 2048)):
        v, m, s = (t.cuda() for t in packed(rows, 2048, vdtype))
        for meta in (m, tile_meta(m)) if rows % 64 == 0 else (m,):
            for cfg in sl._candidates(M, rows // 2 if gated else rows, 2048)[:2]:
                outs = []
                for ex in ("select", "prmt"):
                    monkeypatch.setattr(sl, "pick", lambda kernel, key, cands, launch, c=dict(cfg, EXPAND=ex): c)
                    y, ref = run_both(x, v, meta, s, None, "silu", True, gated)
                    check(y, ref, torch.bfloat16)
                    outs.append(y)
                assert torch.equal(outs[0], outs[1]), (cfg, gated, meta.dim())


@pytest.mark.cuda
@pytest.mark.parametrize("vdtype", VALUE_DTYPES, ids=["int8", "fp8", "bf16"])
@pytest.mark.parametrize("M", [1, 16, 300])
def test_cuda_llama_shapes(M, vdtype):
    if vdtype == torch.float8_e4m3fn and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 needs compute capability >= 8.9")
    N, K = 2 * 1024, 4096
    v, m, s = (t.cuda() if t is not None else None for t in packed(N, K, vdtype))
    x = torch.randn(M, K, dtype=torch.bfloat16, device="cuda")
    for gated in (False, True):
        y, ref = run_both(x, v, m, s, None, "silu", False, gated)
        check(y, ref, torch.bfloat16)
    if vdtype != torch.bfloat16:
        y, ref = run_both(x, v, m, s, None, "silu", True, True)
        check(y, ref, torch.bfloat16)


def test_sqnr_thresholds_are_meaningful():
    # bf16 rounding alone of a unit-variance signal is ~ 52 dB; the bf16 threshold sits below it
    r = torch.randn(10_000)
    assert 45 < sqnr(r, r.bfloat16()) < 60 and not math.isinf(sqnr(r, r.bfloat16()))


@pytest.mark.parametrize("gated", [False, True], ids=["linear", "gated"])
def test_prmt_expansion_candidates_opt_in(gated, monkeypatch):
    """EXPAND="prmt" (one PRMT per 2:4 group for 8-bit dots) joins the tuner's candidates for W8A8 only, and only
    with sparse24_linear.S24_PRMT = True; the interpreter runs the byte selects for it (the same dense bytes): the reference's
    result either way. The GPU test below checks the asm bit for bit."""
    from fused.kernels import sparse24_linear as sl

    seen = []

    def last(kernel, key, cands, launch):  # the tuner's pick replaced by the last candidate (a prmt twin if any)
        seen.append(cands())
        return seen[-1][-1]

    monkeypatch.setattr(sl, "pick", last)
    v, m, s = packed(2 * 37 if gated else 37, 260, torch.int8)
    x = torch.randn(3, 260, dtype=torch.bfloat16)
    for on in (False, True):
        monkeypatch.setattr(sl, "S24_PRMT", on)
        for dynamic in (False, True):
            seen.clear()
            check(*run_both(x, v, m, s, None, "silu", dynamic, gated), torch.bfloat16)
            assert any(c.get("EXPAND") == "prmt" for c in seen[0]) == (on and dynamic), (on, dynamic)


@pytest.mark.parametrize("K", [52, 260])  # K % 8 == 4: a half-used last meta byte; 260: a second, partial K tile
@pytest.mark.parametrize("vdtype", [torch.int8, torch.float8_e4m3fn], ids=["int8", "fp8"])
@pytest.mark.parametrize("gated", [False, True], ids=["linear", "gated"])
def test_prmt_expansion_equals_byte_selects(gated, vdtype, K, monkeypatch):
    """W8A8: the PRMT expansion's group words (here their Triton twin: the interpreter runs no asm) and the joins
    that spread them into entries give the byte selects' dense tiles: equal bits, odd N, M = 1 and 17."""
    from fused.kernels import sparse24_linear as sl

    v, m, s = packed(2 * 37 if gated else 37, K, vdtype)
    for M in (1, 17):
        x = torch.randn(M, K, dtype=torch.bfloat16)
        outs = []
        for ex in ("select", "prmt"):
            cfg = dict(sl._candidates(M, 37, K)[0], EXPAND=ex)
            monkeypatch.setattr(sl, "pick", lambda kernel, key, cands, launch, c=cfg: c)
            y, ref = run_both(x, v, m, s, None, "silu", True, gated)
            check(y, ref, torch.bfloat16)
            outs.append(y)
        assert torch.equal(outs[0], outs[1]), M


@pytest.mark.parametrize("gated", [False, True], ids=["linear", "gated"])
def test_every_candidate_config(gated, monkeypatch):
    """Each tile the tuner may pick (M > 64 adds the larger ones) gives the reference's result; the first is
    the untuned default."""
    from fused.kernels import sparse24_linear as sl

    assert sl._candidates(20, 37, 260)[0] == dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, num_stages=3, num_warps=4)
    cands = sl._candidates(70, 37, 260)
    assert len(cands) == 5 and len({tuple(c.items()) for c in cands}) == 5
    v, m, s = packed(2 * 37 if gated else 37, 260, torch.int8)
    x = torch.randn(70, 260, dtype=torch.bfloat16)
    for c in cands:
        monkeypatch.setattr(sl, "_candidates", lambda M, N, K, c=c: [c])
        monkeypatch.setattr(sl, "pick", lambda kernel, key, cands, launch: cands()[0])
        check(*run_both(x, v, m, s, None, "silu", False, gated), torch.bfloat16)
