"""The 2:4 unpack kernel vs sparsity.packing.unpack_24: bit-identical for int8, fp8 and bf16 values,
odd row counts, K with a half-used last meta byte, strided values."""
import pytest
import torch

from sparsity.masks import magnitude_mask_24
from sparsity.packing import pack_24, unpack_24


@pytest.mark.parametrize("dtype", [torch.int8, torch.float8_e4m3fn, torch.bfloat16])
@pytest.mark.parametrize("N,K", [(1, 8), (19, 36), (33, 520)])
def test_unpack24_bit_exact(dtype, N, K, monkeypatch):
    from fused.kernels.unpack24 import unpack24

    w = torch.randn(N, K)
    w = w * magnitude_mask_24(w.abs())
    if dtype == torch.int8:
        w = (w * 40).round().clamp(-127, 127)
    values, meta = pack_24(w.to(dtype))
    real = torch.empty

    def poisoned(*a, **k):  # every output byte 0xAB first: an unwritten element fails the comparison
        t = real(*a, **k)
        if t.numel():
            t.view(torch.uint8).fill_(0xAB)
        return t
    monkeypatch.setattr(torch, "empty", poisoned)
    got = unpack24(values, meta)
    want = unpack_24(values, meta)
    assert got.dtype == dtype and got.shape == (N, K)
    bits = {1: torch.uint8, 2: torch.int16}[got.element_size()]
    assert torch.equal(got.view(bits), want.view(bits))


def test_unpack24_strided_values():
    from fused.kernels.unpack24 import unpack24

    w = torch.randn(6, 16)
    w = (w * magnitude_mask_24(w.abs()) * 30).round().to(torch.int8)
    values, meta = pack_24(w)
    wide = torch.zeros(6, 12, dtype=torch.int8)
    wide[:, :8] = values
    assert torch.equal(unpack24(wide[:, :8], meta), w)


@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
@pytest.mark.parametrize("op", ["sparse24_linear", "sparse24_gated"])
def test_sparse_ops_unpacked_route_interpreted(fmt, op, monkeypatch):
    """SPARSE_ROUTE="unpacked": the 2:4 ops unpack to dense and take the dense kernels; same weights, so the
    result matches the packed route to fp32 rounding, and the call is counted under its real path."""
    from fused import dispatch
    from lowbit import quantize_weight, sqnr

    torch.manual_seed(0)
    R = 2 * 12 if op == "sparse24_gated" else 12
    w = torch.randn(R, 40)
    w = w * magnitude_mask_24(w.abs())
    q, s = quantize_weight(w, fmt)
    values, meta = pack_24(q)
    b = torch.randn(R)
    run = getattr(dispatch, op)
    for M in (3, 20):  # the GEMV and the tiled kernel on both routes
        x = torch.randn(M, 40)
        with dispatch.force_path("triton"):
            dispatch.stats.clear()
            monkeypatch.setattr(dispatch, "SPARSE_ROUTE", "packed")
            want = run(x, values, meta, s, b, "gelu")
            monkeypatch.setattr(dispatch, "SPARSE_ROUTE", "unpacked")
            got = run(x, values, meta, s, b, "gelu")
        assert sqnr(want, got) > 100, M
        assert dispatch.stats[(op, "triton:unpack24+dense")] == 1


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
def test_unpack24_and_routes_cuda(fmt, monkeypatch):
    from fused import dispatch
    from fused.kernels.unpack24 import unpack24
    from lowbit import quantize_weight, sqnr

    w = torch.randn(2 * 176, 264, device="cuda")
    w = w * magnitude_mask_24(w.abs())
    q, s = quantize_weight(w, fmt)
    values, meta = pack_24(q)
    assert torch.equal(unpack24(values, meta).view(torch.uint8), unpack_24(values, meta).view(torch.uint8))
    for M in (1, 300):
        x = torch.randn(M, 264, device="cuda", dtype=torch.bfloat16)
        monkeypatch.setattr(dispatch, "SPARSE_ROUTE", "packed")
        want = dispatch.sparse24_gated(x, values, meta, s, None, "silu")
        monkeypatch.setattr(dispatch, "SPARSE_ROUTE", "unpacked")
        got = dispatch.sparse24_gated(x, values, meta, s, None, "silu")
        assert sqnr(want, got) > 40, M
    monkeypatch.setattr(dispatch, "SPARSE_ROUTE", None)
    dispatch.sparse24_gated(x, values, meta, s, None, "silu")  # measured: either route, timings recorded
    from fused.kernels import tuning
    assert any(k[0] == "sparse24_route" for k in tuning.picks)
