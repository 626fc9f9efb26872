"""The warp-specialized Gluon W8A16 GEMM (fused/kernels/w8a16_ws.py): int8 and e4m3 weights, plain and gated, bias,
every activation.
Gluon does not run in Triton's interpreter, so the products are checked on the GPU (cuda) against the fp32
reference; the CPU checks the clear errors, and tests/test_triton36_compile.py compiles it for sm_90 (no wgmma
serialized, no spill in the K loop)."""
import pytest
import torch

from fused.reference import gated_pair_ref, gated_ref, linear_ref
from lowbit.metrics import sqnr
from operands import weights_8bit

sm90 = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                          reason="Hopper (sm_90) GPU")


def test_bad_operands_get_clear_errors():
    from fused.kernels.w8a16_ws import supports, w8a16_ws

    x = torch.randn(4, 64, dtype=torch.bfloat16)
    q = torch.zeros(8, 64, dtype=torch.int8)
    s = torch.ones(8)
    with pytest.raises(TypeError, match="qweight \\[N, K\\] expected"):
        w8a16_ws(x.float(), q, s)
    with pytest.raises(TypeError, match="qweight \\[N, K\\] expected"):
        w8a16_ws(x, q[:, :32], s)
    with pytest.raises(TypeError, match="qweight \\[N, K\\] expected"):
        w8a16_ws(x[None], q, s)  # 3-D: the caller flattens
    with pytest.raises(ValueError, match="multiple of 16"):
        w8a16_ws(torch.randn(4, 40, dtype=torch.bfloat16), torch.zeros(8, 40, dtype=torch.int8), s)
    with pytest.raises(ValueError, match="even row count"):
        w8a16_ws(x, torch.zeros(7, 64, dtype=torch.int8), s[:7], gated=True)
    with pytest.raises(ValueError, match="act must be"):
        w8a16_ws(x, q, s, act="tanh")
    with pytest.raises(ValueError, match="contiguous"):
        w8a16_ws(x, q, s, out=torch.empty(4, 9, dtype=torch.bfloat16))
    assert supports(x, q) == "Hopper (sm_90) only"  # a CPU tensor
    from fused.kernels.w8a16_ws import w8a16_ws_pair

    with pytest.raises(ValueError, match="must match"):
        w8a16_ws_pair(x, q, s, None, q[:4], s[:4], None)
    with pytest.raises(ValueError, match="must match"):
        w8a16_ws_pair(x, q, s, None, q, s, torch.zeros(8))


def _operands(M, N, K, seed, bias, fp8=False):
    torch.manual_seed(seed)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    q, s, b = weights_8bit(N, K, fp8, bias)
    return x, q, s, b


@pytest.mark.cuda
@sm90
@pytest.mark.parametrize("M,N,K", [(1, 64, 64), (3, 200, 1024), (17, 4136, 528), (300, 4096, 14336)])
@pytest.mark.parametrize("act,bias,fp8", [("none", False, False), ("gelu_tanh", True, False), ("relu", True, False),
                                          ("silu", False, False), ("gelu", True, False), ("none", False, True),
                                          ("gelu_tanh", True, True)])
def test_ws_matches_reference_cuda(M, N, K, act, bias, fp8):
    from fused.kernels.w8a16_ws import w8a16_ws

    x, q, s, b = _operands(M, N, K, M + N, bias, fp8)
    ref = linear_ref(x.float(), q, s, b, act)
    # None: the config for this M (128-token tiles below 1024); the 256-token tile dispatch runs from M=1024 at odd M
    # too; FP8_BITS: e4m3 widened by bit placement
    # PERSIST=5: five programs walking every tile (the stage ring and its phases carried across tiles); 256-token
    # tiles with the small-M config's 6 stages would not fit shared memory, hence STAGES=4 beside BLOCK_T=256
    for cfg in (None, dict(BLOCK_T=256, STAGES=4), dict(BLOCK_T=256, STAGES=3), dict(FP8_BITS=True),
                dict(A_HALVES=False), dict(BLOCK_T=256, STAGES=4, A_HALVES=False), dict(PERSIST=5),
                dict(BLOCK_T=256, STAGES=4, PERSIST=True)):
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)  # poisoned
        y = w8a16_ws(x, q, s, b, act, config=cfg, out=out)
        assert y.data_ptr() == out.data_ptr() and not torch.isnan(y).any()
        assert sqnr(ref, y.float()) > 40, cfg


@pytest.mark.cuda
@sm90
@pytest.mark.parametrize("M,H,K", [(1, 64, 64), (17, 208, 528), (300, 1000, 4096)])
@pytest.mark.parametrize("act,bias,fp8", [("silu", False, False), ("gelu_tanh", True, False), ("relu", False, False),
                                          ("none", True, False), ("silu", False, True)])
def test_ws_gated_matches_reference_cuda(M, H, K, act, bias, fp8):
    from fused.kernels.w8a16_ws import w8a16_ws

    x, q, s, b = _operands(M, 2 * H, K, M + H, bias, fp8)
    ref = gated_ref(x.float(), q, s, b, act)
    for cfg in (None, dict(BLOCK_T=256, GATED_STAGES=3), dict(BLOCK_T=256, GATED_STAGES=4), dict(FP8_BITS=True),
                dict(U_PAD=4), dict(BLOCK_T=256, GATED_STAGES=3, U_PAD=4, A_HALVES=False),  # U_PAD: rows padded
                dict(PERSIST=3), dict(BLOCK_T=256, GATED_STAGES=3, PERSIST=True)):  # PERSIST=3: u_buf reused
        out = torch.full((M, H), float("nan"), device="cuda", dtype=torch.bfloat16)  # poisoned
        y = w8a16_ws(x, q, s, b, act, gated=True, config=cfg, out=out)
        assert not torch.isnan(y).any() and sqnr(ref, y.float()) > 40, cfg


@pytest.mark.cuda
@sm90
@pytest.mark.parametrize("view", ["row slice", "transposed"])
def test_ws_views_cuda(view):
    from fused.kernels.w8a16_ws import w8a16_ws

    x, q, s, _ = _operands(37, 320, 512, 5, False)
    wide = torch.randn(37, 1024, device="cuda", dtype=torch.bfloat16)
    v = wide[:, :512] if view == "row slice" else x.t().contiguous().t()
    v.copy_(x)
    assert not v.is_contiguous()
    assert sqnr(linear_ref(x.float(), q, s), w8a16_ws(v, q, s).float()) > 40


@pytest.mark.cuda
@sm90
@pytest.mark.parametrize("M,H,K", [(3, 64, 64), (300, 1000, 4096)])
@pytest.mark.parametrize("act,bias,fp8", [("silu", False, False), ("gelu_tanh", True, False), ("silu", True, True)])
def test_ws_pair_matches_reference_cuda(M, H, K, act, bias, fp8):
    from fused.kernels.w8a16_ws import w8a16_ws_pair

    x, qg, sg, bg = _operands(M, H, K, M + H, bias, fp8)
    _, qu, su, bu = _operands(M, H, K, M + H + 1, bias, fp8)
    ref = gated_pair_ref(x.float(), qg, sg, bg, qu, su, bu, act)
    out = torch.full((M, H), float("nan"), device="cuda", dtype=torch.bfloat16)  # poisoned
    for cfg in (None, dict(PERSIST=2)):
        out.fill_(float("nan"))
        y = w8a16_ws_pair(x, qg, sg, bg, qu, su, bu, act, config=cfg, out=out)
        assert not torch.isnan(y).any() and sqnr(ref, y.float()) > 40, cfg


def test_descriptor_layout_is_triton_default():
    """The TMA descriptors' shared-memory layout, memoized per (block, dtype), is the one Gluon picks for it."""
    from triton.experimental.gluon import language as gl

    from fused.kernels.w8a16_ws import _descriptor

    for dtype, gdt in ((torch.int8, gl.int8), (torch.float8_e4m3fn, gl.float8e4nv), (torch.bfloat16, gl.bfloat16)):
        t = torch.zeros(300, 256, dtype=dtype)
        for block in ([128, 128], [64, 128], [256, 64]):
            d = _descriptor(t, block)
            assert d.layout == gl.NVMMASharedLayout.get_default_for(block, gdt) and list(d.block_shape) == block
            assert d.base is t and tuple(d.shape) == (300, 256)
