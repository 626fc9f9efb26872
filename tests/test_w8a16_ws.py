"""The warp-specialized Gluon W8A16 GEMMs (fused/kernels/w8a16_ws.py, not in dispatch: measured slower than widen +
cuBLAS). Gluon does not run in Triton's interpreter, so the products are checked on the GPU (cuda) against fp32 torch;
the CPU checks the clear errors, and tests/test_triton36_compile.py compiles both for sm_90."""
import pytest
import torch

from lowbit.metrics import sqnr


def _ref(x, q, s):
    return (x.float() @ q.float().t()) * s


def test_bad_operands_get_clear_errors():
    from fused.kernels.w8a16_ws import w8a16_ws, w8a16_ws_pp, w8a16_ws_swap

    x = torch.randn(4, 64, dtype=torch.bfloat16)
    q = torch.zeros(8, 64, dtype=torch.int8)
    s = torch.ones(8)
    for f in (w8a16_ws, w8a16_ws_swap, w8a16_ws_pp):
        with pytest.raises(TypeError, match="int8 qweight"):
            f(x.float(), q, s)
        with pytest.raises(TypeError, match="int8 qweight"):
            f(x, q[:, :32], s)
        with pytest.raises(ValueError, match="16-byte aligned"):
            f(torch.randn(4, 128, dtype=torch.bfloat16)[:, ::2], q, s)
        with pytest.raises(ValueError, match="contiguous"):
            f(x, q, s, out=torch.empty(4, 9, dtype=torch.bfloat16))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                    reason="Hopper (sm_90) GPU")
@pytest.mark.parametrize("form", ["widen partition", "swap", "pp"])
@pytest.mark.parametrize("M,N,K", [(1, 64, 64), (3, 200, 1024), (17, 4136, 528), (300, 4096, 14336)])
def test_ws_matches_reference_cuda(form, M, N, K):
    from fused.kernels import w8a16_ws as ws

    torch.manual_seed(M + N)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    q = torch.randint(-127, 128, (N, K), device="cuda", dtype=torch.int8)
    s = torch.rand(N, device="cuda") * 0.01
    fn, cfgs = {"widen partition": (ws.w8a16_ws, [ws.default_config()]),
                "swap": (ws.w8a16_ws_swap, [ws.swap_config(), dict(ws.swap_config(), BLOCK_T=256)]),
                "pp": (ws.w8a16_ws_pp, [ws.pp_config()])}[form]
    for cfg in cfgs:
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)  # poisoned
        y = fn(x, q, s, cfg, out=out)
        assert y.data_ptr() == out.data_ptr() and not torch.isnan(y).any()
        assert sqnr(_ref(x, q, s), y.float()) > 50, cfg


def test_interleave_gate_up_orders_rows_by_eight():
    from fused.kernels.w8a16_ws import interleave_gate_up

    t = torch.arange(32)  # H = 16: gate rows 0..15, up rows 16..31
    assert interleave_gate_up(t).tolist() == list(range(8)) + list(range(16, 24)) + list(range(8, 16)) + list(
        range(24, 32))
    w = torch.arange(64).reshape(32, 2)
    assert torch.equal(interleave_gate_up(w)[8], w[16])
    with pytest.raises(ValueError, match="multiple of 8"):
        interleave_gate_up(torch.zeros(24))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                    reason="Hopper (sm_90) GPU")
@pytest.mark.parametrize("M,H,K", [(1, 64, 64), (17, 208, 528), (300, 1024, 4096)])
def test_ws_pp_gated_matches_reference_cuda(M, H, K):
    from fused.kernels import w8a16_ws as ws

    torch.manual_seed(M + H)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    q = torch.randint(-127, 128, (2 * H, K), device="cuda", dtype=torch.int8)
    s = torch.rand(2 * H, device="cuda") * 0.01
    r = _ref(x, q, s)
    r = torch.nn.functional.silu(r[:, :H]) * r[:, H:]
    out = torch.full((M, H), float("nan"), device="cuda", dtype=torch.bfloat16)  # poisoned
    y = ws.w8a16_ws_pp(x, ws.interleave_gate_up(q), ws.interleave_gate_up(s), out=out, gated=True)
    assert not torch.isnan(y).any() and sqnr(r, y.float()) > 40
