"""fused.reference: the pure-torch oracle, checked against an independent float64 computation."""
import pytest
import torch
import torch.nn.functional as F

from fused.reference import gated_ref, linear_ref
from lowbit import quantize_activation, quantize_weight, sqnr

ACTS = ["none", "relu", "gelu", "gelu_tanh", "silu"]
FMTS = ["int8", "float8_e4m3"]
# output rounding of each dtype bounds the agreement with float64 (a wrong scale or order gives < 10 dB)
MIN_DB = {torch.float32: 100.0, torch.float16: 60.0, torch.bfloat16: 40.0}


def act64(y, act):
    return {"none": lambda t: t, "relu": F.relu, "gelu": F.gelu,
            "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu}[act](y)


def oracle(x, q, s, bias, act, dynamic, gated):
    """float64: (dequantized x if dynamic) · (q·s)ᵀ + b, then the activation (or act(gate)·up)."""
    K = x.shape[-1]
    x2 = x.reshape(-1, K)
    if dynamic:  # the activation quantizer is the one lowbit defines (tested in test_lowbit)
        xq, xs = quantize_activation(x2, "int8" if q.dtype == torch.int8 else "float8_e4m3")
        x64 = xq.double() * xs.double()
    else:
        x64 = x2.double()
    y = x64 @ (q.double() * s.double()[:, None]).t()
    if bias is not None:
        y = y + bias.double()
    if gated:
        H = q.shape[0] // 2
        y = act64(y[:, :H], act) * y[:, H:]
    else:
        y = act64(y, act)
    return y.reshape(*x.shape[:-1], y.shape[-1])


def make(n, k, fmt, bias, dtype=torch.float32):
    q, s = quantize_weight(torch.randn(n, k), fmt)
    b = torch.randn(n, dtype=dtype) if bias else None
    return q, s, b


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("dynamic", [False, True], ids=["wo", "dyn"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("gated", [False, True], ids=["linear", "gated"])
def test_against_float64(gated, act, bias, dynamic, fmt):
    x = torch.randn(5, 24)
    q, s, b = make(2 * 6, 24, fmt, bias)
    ref = (gated_ref if gated else linear_ref)(x, q, s, b, act, dynamic)
    expect = oracle(x, q, s, b, act, dynamic, gated)
    assert ref.shape == expect.shape == (5, 6 if gated else 12)
    assert ref.dtype == torch.float32
    assert sqnr(expect, ref) >= MIN_DB[torch.float32]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("dynamic", [False, True], ids=["wo", "dyn"])
@pytest.mark.parametrize("gated", [False, True], ids=["linear", "gated"])
def test_dtypes(gated, dynamic, dtype):
    x = torch.randn(7, 40, dtype=dtype)
    q, s, b = make(2 * 9, 40, "int8", True, dtype)
    fn = gated_ref if gated else linear_ref
    out = fn(x, q, s, b, "gelu", dynamic)
    assert out.dtype == dtype
    assert sqnr(oracle(x, q, s, b, "gelu", dynamic, gated), out) >= MIN_DB[dtype]


def strided_inputs(K):
    """(name, tensor): 2-D and 3-D, contiguous and not, with storage offsets."""
    base = torch.randn(4, 3, K + 5)
    return [
        ("2d", torch.randn(6, K)),
        ("3d", torch.randn(2, 3, K)),
        ("transposed", torch.randn(K, 6).t()),
        ("offset_view", base[1:, 0, 2:K + 2]),  # storage offset, row stride K+5
        ("3d_permuted", torch.randn(3, 2, K).transpose(0, 1)),
        ("3d_sliced", base[:, :, 3:K + 3]),
        ("expanded", torch.randn(1, K).expand(4, K)),  # stride 0
    ]


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("dynamic", [False, True], ids=["wo", "dyn"])
@pytest.mark.parametrize("gated", [False, True], ids=["linear", "gated"])
def test_strided_and_nd_inputs(gated, dynamic, fmt):
    K = 20
    q, s, b = make(10, K, fmt, True)
    fn = gated_ref if gated else linear_ref
    for name, x in strided_inputs(K):
        out = fn(x, q, s, b, "silu", dynamic)
        assert out.shape == (*x.shape[:-1], 5 if gated else 10), name
        assert sqnr(oracle(x, q, s, b, "silu", dynamic, gated), out) >= 100, name
        # same numbers as the contiguous copy
        torch.testing.assert_close(out, fn(x.contiguous(), q, s, b, "silu", dynamic), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("dynamic", [False, True], ids=["wo", "dyn"])
@pytest.mark.parametrize("gated", [False, True], ids=["linear", "gated"])
def test_empty_batch(gated, dynamic, fmt):
    q, s, b = make(8, 12, fmt, True, torch.bfloat16)
    fn = gated_ref if gated else linear_ref
    n_out = 4 if gated else 8
    for shape in [(0, 12), (2, 0, 12), (0, 3, 12)]:
        out = fn(torch.randn(shape, dtype=torch.bfloat16), q, s, b, "relu", dynamic)
        assert out.shape == (*shape[:-1], n_out) and out.dtype == torch.bfloat16


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("dynamic", [False, True], ids=["wo", "dyn"])
@pytest.mark.parametrize("gated", [False, True], ids=["linear", "gated"])
def test_nonfinite_activations_propagate(gated, dynamic, fmt, bad):
    x = torch.randn(4, 16)
    x[2, 5] = bad
    q, s, b = make(8, 16, fmt, False)
    out = (gated_ref if gated else linear_ref)(x, q, s, b, "none", dynamic)
    assert not torch.isfinite(out[2]).any()  # that token's output is NaN/Inf, as in nn.Linear ...
    assert torch.isfinite(out[[0, 1, 3]]).all()  # ... and only that token's
    if bad != bad:
        assert torch.isnan(out[2]).all()


def test_zero_weight_row():
    q, s = quantize_weight(torch.cat([torch.randn(3, 16), torch.zeros(1, 16)]), "int8")
    out = linear_ref(torch.randn(5, 16), q, s, None, "gelu", True)
    assert torch.isfinite(out).all() and torch.equal(out[:, 3], torch.zeros(5))


@pytest.mark.parametrize("dynamic", [False, True], ids=["wo", "dyn"])
def test_result_does_not_depend_on_autocast(dynamic):
    """Under autocast the fp32 matmuls would silently run in bf16; the oracle keeps fp32 accumulation."""
    x = torch.randn(8, 256, dtype=torch.bfloat16)
    q, s, b = make(64, 256, "int8", True)
    plain = linear_ref(x, q, s, b, "none", dynamic), gated_ref(x, q, s, b, "silu", dynamic)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(linear_ref(x, q, s, b, "none", dynamic), plain[0])
        assert torch.equal(gated_ref(x, q, s, b, "silu", dynamic), plain[1])
