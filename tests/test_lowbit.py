"""lowbit: the numeric definitions (scales, rounding, zero rows, per-token activations, sqnr)."""
import copy
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lowbit import QuantizedWeight, dequantize, get_format, quantize_activation, quantize_weight, sqnr
from lowbit.quant import MIN_SCALE

QMAX = {"int8": 127.0, "float8_e4m3": 448.0}
DTYPE = {"int8": torch.int8, "float8_e4m3": torch.float8_e4m3fn}


def fp8_error_bound(v: torch.Tensor) -> torch.Tensor:
    """Largest rounding error of e4m3 at |v| (in units of the scaled value): half a step, where the step
    is 2^(e-3) for normals (e >= -6) and 2^-9 for subnormals."""
    e = torch.floor(torch.log2(v.abs().clamp(min=2.0**-6)))
    return 2.0 ** (e - 4)


@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
def test_weight_scale_is_row_absmax_over_qmax(fmt):
    w = torch.randn(7, 33) * torch.logspace(-3, 2, 7)[:, None]  # rows of very different magnitude
    q, s = quantize_weight(w, fmt)
    assert q.dtype == DTYPE[fmt] and q.shape == w.shape
    assert s.dtype == torch.float32 and s.shape == (7,)
    torch.testing.assert_close(s, w.abs().amax(1) / QMAX[fmt], rtol=0, atol=0)
    # the largest entry of each row lands exactly on ±qmax
    assert torch.equal(q.float().abs().amax(1), torch.full((7,), QMAX[fmt]))


def test_int8_rounds_to_nearest():
    w = torch.randn(5, 40)
    q, s = quantize_weight(w, "int8")
    expect = torch.round(w / s[:, None]).clamp(-127, 127).to(torch.int8)
    assert torch.equal(q, expect)
    err = (dequantize(q, s) - w).abs()
    assert (err <= s[:, None] / 2 * (1 + 1e-6)).all()


def test_fp8_rounding_error_within_half_a_step():
    w = torch.randn(6, 64)
    q, s = quantize_weight(w, "float8_e4m3")
    scaled = w / s[:, None]
    assert ((q.float() - scaled).abs() <= fp8_error_bound(scaled) * (1 + 1e-6)).all()
    assert sqnr(w, dequantize(q, s)) > 28  # ~31 dB for 3 mantissa bits; a wrong scale gives < 10


@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
def test_zero_row_gives_exact_zeros_not_nan(fmt):
    w = torch.randn(4, 16)
    w[2] = 0.0
    q, s = quantize_weight(w, fmt)
    assert torch.isfinite(s).all() and (s > 0).all() and s[2] == MIN_SCALE
    d = dequantize(q, s)
    assert torch.isfinite(d).all()
    assert torch.equal(d[2], torch.zeros(16))
    # a zero token of an activation too
    x = torch.randn(3, 16)
    x[1] = 0.0
    xq, xs = quantize_activation(x, fmt)
    assert torch.equal(dequantize(xq, xs)[1], torch.zeros(16))


@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
def test_activation_quant_is_per_token_nd(fmt):
    x = torch.randn(2, 3, 24, dtype=torch.bfloat16)
    x[1, 2] *= 100  # one loud token must not change the others' scales
    q, s = quantize_activation(x, fmt)
    assert q.shape == x.shape and q.dtype == DTYPE[fmt]
    assert s.shape == (2, 3, 1) and s.dtype == torch.float32
    torch.testing.assert_close(s, x.float().abs().amax(-1, keepdim=True) / QMAX[fmt], rtol=0, atol=0)
    assert sqnr(x.float(), dequantize(q, s)) > 28


@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
def test_activation_quant_empty_and_nan(fmt):
    q, s = quantize_activation(torch.empty(0, 8), fmt)
    assert q.shape == (0, 8) and s.shape == (0, 1)
    q, s = quantize_activation(torch.empty(2, 0, 8), fmt)
    assert q.shape == (2, 0, 8) and s.shape == (2, 0, 1)
    x = torch.randn(3, 8)
    x[1, 4] = float("nan")
    q, s = quantize_activation(x, fmt)
    d = dequantize(q, s)
    assert torch.isnan(d[1]).all()  # the NaN token stays NaN ...
    assert torch.isfinite(d[[0, 2]]).all()  # ... and does not leak into the others


def test_quantize_weight_rejects_non_2d_and_unknown_format():
    with pytest.raises(ValueError, match="2-D"):
        quantize_weight(torch.randn(8), "int8")
    with pytest.raises(ValueError, match="unknown format 'int4'"):
        get_format("int4")


@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
def test_quantized_weight_container(fmt):
    w = torch.randn(10, 24)
    qw = QuantizedWeight.from_float(w, fmt)
    assert qw.fmt is get_format(fmt) and qw.shape == (10, 24)
    assert qw.nbytes() == 10 * 24 * 1 + 10 * 4
    d = qw.dequantize(torch.bfloat16)
    assert d.dtype == torch.bfloat16
    assert sqnr(w, qw.dequantize()) > (38 if fmt == "int8" else 28)
    qw2 = copy.deepcopy(qw)
    assert torch.equal(qw2.qdata.view(torch.uint8), qw.qdata.view(torch.uint8))
    assert qw2.qdata.data_ptr() != qw.qdata.data_ptr()


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 9), k=st.integers(1, 70), log_mag=st.floats(-8, 8))
def test_int8_roundtrip_error_bound(n, k, log_mag):
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(n * 100 + k)) * 10.0**log_mag
    q, s = quantize_weight(w, "int8")
    assert ((dequantize(q, s) - w).abs() <= s[:, None] * 0.5 * (1 + 1e-5)).all()


def test_sqnr():
    x = torch.randn(50)
    assert sqnr(x, x.clone()) == math.inf
    ref = torch.ones(100)
    assert sqnr(ref, ref * 1.1) == pytest.approx(20.0)  # ‖ref‖=10, ‖noise‖=1
    assert sqnr(ref.bfloat16(), (ref * 1.25).half()) == pytest.approx(20 * math.log10(4))  # mixed dtypes
    bad = x.clone()
    bad[3] = float("nan")
    assert math.isnan(sqnr(x, bad)) and math.isnan(sqnr(bad, x))
    assert sqnr(torch.zeros(4), torch.ones(4)) == -math.inf
    with pytest.raises(ValueError, match="shapes differ"):
        sqnr(torch.zeros(4, 2), torch.zeros(8))


@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
def test_grouped_activation_quant_is_per_token_and_group(fmt):
    """quantize_activation_grouped: each run of 64 values along K quantized as its own token (odd K: the last group
    partial), 3-D inputs, a NaN poisoning its group only, an all-zero group giving exact zeros; int8 finer than per
    token on rows whose groups differ in range (e4m3's relative step does not depend on the scale: no worse)."""
    from lowbit import dequantize_activation_grouped, quantize_activation_grouped

    torch.manual_seed(0)
    x = torch.randn(2, 3, 200) * torch.logspace(-3, 1, 200)
    x[0, 0, 64:128] = 0
    x[1, 2, 5] = float("nan")
    q, s = quantize_activation_grouped(x, fmt)
    assert q.shape == x.shape and s.shape == (2, 3, 4) and q.dtype == get_format(fmt).dtype
    for g in range(4):
        part = x[..., 64 * g:64 * (g + 1)]
        qg, sg = quantize_activation(part, fmt)
        assert torch.equal(q[..., 64 * g:64 * (g + 1)].view(torch.uint8), qg.view(torch.uint8))
        assert torch.equal(s[..., g:g + 1].nan_to_num(-1), sg.nan_to_num(-1))
    back = dequantize_activation_grouped(q, s)
    assert torch.equal(back[0, 0, 64:128], torch.zeros(64))
    assert torch.isnan(back[1, 2, :64]).all() and not torch.isnan(back[1, 2, 64:]).any()
    ok = ~torch.isnan(x).any(-1)
    qt, st_ = quantize_activation(x, fmt)
    assert sqnr(x[ok], back[ok]) > sqnr(x[ok], (qt.float() * st_)[ok]) + (3 if fmt == "int8" else 0)
