"""The W8A16 int8 linear kernels (split-K GEMV for M <= 16, tiled GEMM above) against linear_ref.

On the CPU this runs in Triton's interpreter (tests/conftest.py). The interpreter casts fp32 -> bf16 by
truncation, not round-to-nearest as the GPU does, so bf16 outputs differ from the reference by up to
one bf16 ulp (~47 dB SQNR): the bf16 threshold leaves room for that and nothing more.
"""
import pytest
import torch

from fused import dispatch
from fused.kernels.w8_gemm import w8_gemm
from fused.kernels.w8a16_gemv import w8a16_gemv
from fused.reference import linear_ref
from lowbit import quantize_weight, sqnr

ACTS = ["none", "relu", "gelu", "gelu_tanh", "silu"]


def int8_linear(x, q, s, b=None, act="none", out=None):
    """The kernel dispatch picks for a W8A16 linear at this M."""
    if x.shape[0] <= dispatch.GEMV_MAX_M:
        return w8a16_gemv(x, q, s, b, act, out=out)
    return w8_gemm(x, q, s, b, act, out=out)
MIN_DB = {torch.float32: 100.0, torch.float16: 60.0, torch.bfloat16: 40.0}
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def weights(n, k, bias, dtype=torch.float32, device="cpu"):
    q, s = quantize_weight(torch.randn(n, k, device=device), "int8")
    return q, s, (torch.randn(n, dtype=dtype, device=device) if bias else None)


def check(y, ref, dtype):
    assert y.shape == ref.shape and y.dtype == ref.dtype == dtype
    assert not torch.isnan(y).any()
    db = sqnr(ref, y)
    assert db >= MIN_DB[dtype], f"SQNR {db:.1f} dB < {MIN_DB[dtype]} ({dtype})"


@pytest.mark.parametrize("M", [1, 3, 17])
@pytest.mark.parametrize("N,K", [(37, 50), (100, 130)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_shapes_and_dtypes(M, N, K, dtype):
    x = torch.randn(M, K, dtype=dtype)
    q, s, b = weights(N, K, True, dtype)
    check(int8_linear(x, q, s, b, "silu"), linear_ref(x, q, s, b, "silu"), dtype)


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_activations_and_bias(act, bias, dtype):
    x = torch.randn(3, 50, dtype=dtype)
    q, s, b = weights(37, 50, bias, dtype)
    check(int8_linear(x, q, s, b, act), linear_ref(x, q, s, b, act), dtype)


def test_fp32_bias_with_bf16_activations():
    x = torch.randn(3, 50, dtype=torch.bfloat16)
    q, s, b = weights(37, 50, True, torch.float32)
    check(int8_linear(x, q, s, b, "gelu"), linear_ref(x, q, s, b, "gelu"), torch.bfloat16)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_non_contiguous_inputs(dtype):
    q, s, b = weights(37, 50, True, dtype)
    base = torch.randn(20, 60, dtype=dtype)
    for x in (torch.randn(50, 17, dtype=dtype).t(),  # transposed: stride (1, 17)
              base[2:19, 5:55],                        # storage offset, row stride 60
              base[::3, :50]):                         # every third row
        assert not x.is_contiguous()
        check(int8_linear(x, q, s, b, "gelu_tanh"), linear_ref(x, q, s, b, "gelu_tanh"), dtype)
    # a transposed weight view (qweight column-major) is read through its strides too
    qt = q.t().contiguous().t()
    x = torch.randn(5, 50, dtype=dtype)
    check(int8_linear(x, qt, s, b, "relu"), linear_ref(x, q, s, b, "relu"), dtype)


@pytest.mark.parametrize("M", [1, 17])
def test_writes_every_output_element(M):
    """A NaN-filled output buffer (contiguous and a strided view) comes back fully written."""
    x = torch.randn(M, 130, dtype=torch.float32)
    q, s, b = weights(100, 130, True)
    ref = linear_ref(x, q, s, b, "relu")  # relu zeros must be written too
    out = torch.full((M, 100), float("nan"))
    y = int8_linear(x, q, s, b, "relu", out=out)
    assert y is out
    check(out, ref, torch.float32)
    big = torch.full((100, M + 3), float("nan"))
    view = big.t()[1:M + 1]  # [M, 100] with strides (1, M + 3) and a storage offset
    int8_linear(x, q, s, b, "relu", out=view)
    check(view, ref, torch.float32)
    assert torch.isnan(big[:, 0]).all() and torch.isnan(big[:, M + 1:]).all()  # nothing outside the view


def test_out_argument_is_checked():
    x = torch.randn(3, 50)
    q, s, b = weights(37, 50, True)
    with pytest.raises(ValueError, match="out must be"):
        int8_linear(x, q, s, b, out=torch.empty(3, 36))
    with pytest.raises(ValueError, match="out must be"):
        int8_linear(x, q, s, b, out=torch.empty(3, 37, dtype=torch.bfloat16))


def test_zero_weight_row_and_empty_batch():
    w = torch.randn(37, 50)
    w[5] = 0
    q, s = quantize_weight(w, "int8")
    x = torch.randn(3, 50)
    y = int8_linear(x, q, s, None, "gelu")
    assert torch.equal(y[:, 5], torch.zeros(3))
    check(y, linear_ref(x, q, s, None, "gelu"), torch.float32)
    assert int8_linear(torch.randn(0, 50), q, s).shape == (0, 37)


def test_nan_activation_propagates():
    x = torch.randn(3, 50)
    x[1, 7] = float("nan")
    q, s, b = weights(37, 50, True)
    y = int8_linear(x, q, s, b)
    assert torch.isnan(y[1]).all() and torch.isfinite(y[[0, 2]]).all()


def test_dispatch_force_triton_3d_input():
    """dispatch.linear through the Triton path: N-D input reshaped to 2-D and back, counted in stats."""
    x = torch.randn(2, 3, 50, dtype=torch.bfloat16)
    q, s, b = weights(37, 50, True, torch.bfloat16)
    before = dispatch.stats[("linear", "triton:w8a16_gemv")]
    with dispatch.force_path("triton"):
        y = dispatch.linear(x, q, s, b, "silu")
    assert dispatch.stats[("linear", "triton:w8a16_gemv")] == before + 1
    check(y, linear_ref(x, q, s, b, "silu"), torch.bfloat16)


@pytest.mark.cuda
@pytest.mark.parametrize("M", [1, 3, 17, 300])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_cuda(M, dtype):
    x = torch.randn(M, 1000, dtype=dtype, device="cuda")
    q, s, b = weights(4100, 1000, True, dtype, "cuda")
    out = torch.full((M, 4100), float("nan"), dtype=dtype, device="cuda")
    y = int8_linear(x, q, s, b, "gelu", out=out)
    check(y, linear_ref(x, q, s, b, "gelu"), dtype)
    xt = torch.randn(1000, M, dtype=dtype, device="cuda").t()
    check(int8_linear(xt, q, s, b, "silu"), linear_ref(xt, q, s, b, "silu"), dtype)
