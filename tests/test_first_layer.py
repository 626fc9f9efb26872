"""fused.kernels.first_layer: act_quant(x) + the W8A8 GEMM + act_quant(h) in one ticketed launch, bit for bit
against the three launches it replaces (CPU: Triton's interpreter, where programs take the tickets in order)."""
import pytest
import torch

from lowbit import quantize_weight

FMTS = ["int8", "float8_e4m3"]
# the interpreter's w8_gemm tile: the fp8 sums then run over the same K chunks as first_layer's interpreter tile
GEMM_CFG = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=4, num_stages=1, num_warps=4)


def _bits(t):
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


def _three_launches(x, q, s, b, act, gated, rows, up=None):
    from fused.kernels.act_quant import act_quant
    from fused.kernels.w8_gemm import w8_gemm

    fp8 = q.dtype == torch.float8_e4m3fn
    xq, xs = act_quant(x, fp8=fp8)
    h = w8_gemm(xq, q, s, b, act, gated, x_scale=xs, out_dtype=x.dtype, config=GEMM_CFG, up=up)
    return act_quant(h, fp8=fp8, rows=rows)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("gated", [False, True])
def test_first_layer_bit_equal_interpreted(fmt, gated, poisoned):
    """Odd shapes, transposed / offset views of x, padding rows, a NaN row, an Inf row, a zero weight row; twice
    in a row (the counters and statistics reset themselves)."""
    from fused.kernels.first_layer import first_layer

    torch.manual_seed(0)
    for M, N, K, bias, act, view, rows in [(3, 37, 50, True, "silu", "plain", 3),
                                           (17, 20, 70, False, "gelu_tanh", "transposed", 32),
                                           (5, 9, 40, True, "relu", "offset", 16)]:
        R = 2 * N if gated else N
        q, s = quantize_weight(torch.randn(R, K), fmt)
        q[2] = 0
        s[2] = 0.0
        b = torch.randn(R) if bias else None
        if view == "transposed":
            x = torch.randn(K, M, dtype=torch.bfloat16).t()
        elif view == "offset":
            x = torch.randn(M + 1, K + 3, dtype=torch.bfloat16)[1:, 3:]
        else:
            x = torch.randn(M, K, dtype=torch.bfloat16)
        x[1, 4] = float("nan")
        if M > 2:
            x[2, 7] = float("inf")
        want_q, want_s = _three_launches(x, q, s, b, act, gated, rows)
        for _ in range(2):
            hq, hs = first_layer(x, q, s, b, act, gated, rows=rows)
            assert hq.shape == (rows, N) and hq.dtype == want_q.dtype and hs.shape == (M,)
            assert torch.equal(_bits(hq), _bits(want_q)), (M, N, K, view)
            torch.testing.assert_close(hs, want_s, rtol=0, atol=0, equal_nan=True)
        assert torch.isnan(hs[1]) and not torch.isnan(hs[0])
        assert not _bits(hq[M:]).any()  # padding rows are zeros


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("gated", [False, True])
def test_first_layer_against_reference_interpreted(fmt, gated, poisoned):
    """h from first_layer (dequantized: hq · hs) against the pure-torch W8A8 layer, on odd shapes including M=1 and a
    3-D input's 2-D view; SQNR bounded by h's own 8-bit quantization."""
    from fused.kernels.first_layer import first_layer
    from fused.reference import gated_ref, linear_ref
    from lowbit import sqnr

    torch.manual_seed(5)
    for M, N, K, act in [(1, 19, 36, "silu"), (3, 37, 50, "gelu_tanh"), (17, 24, 70, "relu")]:
        R = 2 * N if gated else N
        q, s = quantize_weight(torch.randn(R, K), fmt)
        b = torch.randn(R)
        x = torch.randn(1, M, K, dtype=torch.bfloat16).view(M, K)
        hq, hs = first_layer(x, q, s, b, act, gated, rows=max(M, 16))
        h = (hq[:M].float() * hs[:, None])
        ref = (gated_ref if gated else linear_ref)(x, q, s, b, act, dynamic=True).float()
        assert sqnr(ref, h) > (35 if fmt == "int8" else 28), (M, N, K, act)  # measured 40-45 / 32-38 dB


def test_first_layer_separate_up_and_errors(poisoned):
    """The gated form with the up projection in tensors of its own equals the stacked one; bad calls are refused."""
    from fused.kernels.first_layer import first_layer

    torch.manual_seed(1)
    M, N, K = 4, 24, 64
    qg, sg = quantize_weight(torch.randn(N, K), "int8")
    qu, su = quantize_weight(torch.randn(N, K), "int8")
    bg, bu = torch.randn(N), torch.randn(N)
    x = torch.randn(M, K, dtype=torch.bfloat16)
    hq, hs = first_layer(x, qg, sg, bg, "silu", True, up=(qu, su, bu))
    hq2, hs2 = first_layer(x, torch.cat([qg, qu]), torch.cat([sg, su]), torch.cat([bg, bu]), "silu", True)
    assert torch.equal(hq, hq2) and torch.equal(hs, hs2)
    want_q, want_s = _three_launches(x, qg, sg, bg, "silu", True, M, up=(qu, su, bu))
    assert torch.equal(hq, want_q) and torch.equal(hs, want_s)
    assert first_layer(x[:0], qg, sg, bg, "silu", True, up=(qu, su, bu))[0].shape == (0, N)
    with pytest.raises(ValueError, match="rows=2"):
        first_layer(x, qg, sg, rows=2)
    with pytest.raises(ValueError, match="8-bit weights"):
        first_layer(x, qg.float(), sg)


def test_gemm_config_follows_the_w8a8_gemm(monkeypatch):
    """first_layer takes the W8A8 GEMM's tile for the shape (picked in this process, else the shipped table) when it
    can run it; split-K and stacked-plane picks, and shapes never picked, leave it to its default."""
    from fused.kernels import tuning
    from fused.kernels.first_layer import gemm_config

    tile = dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=128, GROUP_M=8, num_stages=3, num_warps=8)
    assert gemm_config(100, 14336, 4096, True, torch.int8) == tile  # the shipped H200 table, bucket 128
    assert gemm_config(100, 14336, 4096, True, torch.float8_e4m3fn) == tile
    assert gemm_config(100, 14000, 4096, True, torch.int8) is None
    monkeypatch.setattr(tuning, "_cache", {})
    key = ("w8_gemm", 32, 100, 64, False, True, torch.int8)
    tuning._cache[key] = dict(tile, BLOCK_M=32, SPLIT_K=1)
    assert gemm_config(20, 100, 64, False, torch.int8) == dict(tile, BLOCK_M=32)
    tuning._cache[key] = dict(tile, SPLIT_K=2)
    assert gemm_config(20, 100, 64, False, torch.int8) is None
    monkeypatch.setattr(tuning, "RETUNE", True)  # the shipped table is not taken as it is
    assert gemm_config(100, 14336, 4096, True, torch.int8) is None
    monkeypatch.setattr(tuning, "RETUNE", False)  # FUSED_RETUNE=<kernel list>: those kernels only
    monkeypatch.setattr(tuning, "RETUNE_KERNELS", frozenset({"sparse24_gemv"}))
    assert gemm_config(100, 14336, 4096, True, torch.int8) == tile
    monkeypatch.setattr(tuning, "RETUNE_KERNELS", frozenset({"w8_gemm"}))
    assert gemm_config(100, 14336, 4096, True, torch.int8) is None


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
def test_first_layer_cuda(fmt):
    """On the GPU (the H200's default tile): int8 bit-equal to the three
    launches (exact int32 sums); fp8 h within the last bits of a GEMM whose K chunks may differ, so its quantized
    bytes agree but for rounding ties (checked by the scales and the share of equal bytes); every call the same."""
    from fused.kernels.first_layer import default_config, first_layer

    torch.manual_seed(0)
    for M, N, K, rows in ((128, 14336, 4096, 128), (17, 1000, 520, 32)):
        q, s = quantize_weight(torch.randn(2 * N, K, device="cuda"), fmt)
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        cfg = default_config(M)
        hq, hs = first_layer(x, q, s, None, "silu", True, rows=rows, config=cfg)
        again = first_layer(x, q, s, None, "silu", True, rows=rows, config=cfg)
        assert torch.equal(_bits(hq), _bits(again[0])) and torch.equal(hs, again[1])
        from fused.kernels.act_quant import act_quant
        from fused.kernels.w8_gemm import w8_gemm

        fp8 = fmt != "int8"
        xq, xs = act_quant(x, fp8=fp8)
        h = w8_gemm(xq, q, s, None, "silu", True, x_scale=xs, out_dtype=x.dtype,
                    config=cfg)
        wq, ws = act_quant(h, fp8=fp8, rows=rows)
        if not fp8:
            assert torch.equal(hq, wq) and torch.equal(hs, ws), (M, N, K)
        else:
            torch.testing.assert_close(hs, ws, rtol=1e-2, atol=0)
            assert (_bits(hq) == _bits(wq)).float().mean() > 0.98, (M, N, K)
