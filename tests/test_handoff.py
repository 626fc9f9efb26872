"""The quantized hand-off between a W8A8 block's layers (fused.dispatch.HANDOFF): epilogue_quant against
scale_epilogue + act_quant, bit for bit; dense and 2:4 blocks against their layers called one after the other."""
import copy

import pytest
import torch

import fused
from fused import dispatch, reference
from fused.demo import LlamaMLP
from fused.kernels import epilogue_quant as eq
from fused.kernels.act_quant import act_quant
from fused.kernels.scale_epilogue import scale_epilogue
from lowbit import sqnr
from test_kernels_w8 import _poison_empty  # the kernels' allocator, filled with junk

FMTS = ["int8", "float8_e4m3"]


def _bits(t):
    return t.view(torch.uint8) if t.element_size() == 1 else t


@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("gated,act,bias,planes", [(True, "silu", False, False), (True, "gelu_tanh", True, True),
                                                   (False, "relu", True, False), (False, "none", False, True)])
@pytest.mark.parametrize("N,one_pass", [(37, True), (300, True), (300, False)])
def test_epilogue_quant_is_scale_epilogue_then_act_quant(fp8, gated, act, bias, planes, N, one_pass, monkeypatch):
    if not one_pass:  # rows longer than the one-pass block: computed twice
        monkeypatch.setattr(eq, "MAX_ONE_PASS", 64)
    from fused.kernels import act_quant as aq

    _poison_empty(monkeypatch, eq)
    _poison_empty(monkeypatch, aq)
    torch.manual_seed(N)
    M, R = 5, 16
    cols = 2 * N if gated else N
    y = (torch.randn(R * (2 if planes else 1), cols) * 50).bfloat16()
    xs = torch.rand(M) + 0.1
    ws = torch.rand(cols) * 0.02
    b = torch.randn(cols) if bias else None
    y[1] = 0.0  # a zero row: finite scale, zeros out
    y[3, 2] = float("nan")  # NaN: the token's scale is NaN, as act_quant's
    pl = (R, 256.0, 1.0) if planes else None
    h = scale_epilogue(y, xs, ws, b, act, gated, torch.bfloat16, m=M, planes=pl)
    q0, s0 = act_quant(h, fp8=fp8, rows=32)
    # the pure-torch reference (its fp32 activation may round differently: close, not bit-equal)
    rq, rs = reference.epilogue_quant_ref(y, xs, ws, b, act, gated, torch.bfloat16, fp8, M, rows=32, planes=pl)
    ok = torch.arange(M) != 3
    assert torch.equal(_bits(rq[M:]), _bits(q0[M:])) and torch.isnan(rs[3])
    assert torch.allclose(rs[ok], s0[ok], rtol=1e-2)
    deq = rq[:M][ok].float() * rs[ok, None]
    assert sqnr(deq, q0[:M][ok].float() * s0[ok, None]) > (25 if fp8 else 35)
    for cfg in (None, dict(UNFUSED=True)):  # the tuner's pick (the interpreter: the first), the two passes
        q, s = eq.epilogue_quant(y, xs, ws, b, act, gated, torch.bfloat16, fp8, M, rows=32, planes=pl, config=cfg)
        assert q.shape == (32, N) and s.shape == (M,)
        ok = torch.arange(M) != 3
        assert torch.equal(_bits(q[:M][ok]), _bits(q0[:M][ok])) and torch.equal(s[ok], s0[ok])
        assert torch.isnan(s[3]) and torch.isnan(s0[3])
        assert torch.all(_bits(q[M:]) == 0)  # padding rows over a poisoned buffer


@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("act,bias", [("silu", False), ("gelu_tanh", True)])
def test_epilogues_read_gate_and_up_apart(fp8, act, bias, monkeypatch):
    """A gated product as [2, R, H] (two GEMMs of H columns: the cuBLAS route of a gate / up pair in tensors of their
    own; here a strided view) gives scale_epilogue and epilogue_quant the same bits as the stacked [R, 2H] one."""
    _poison_empty(monkeypatch, eq)
    torch.manual_seed(1)
    M, R, N = 5, 16, 37
    y = (torch.randn(R, 2 * N) * 50).bfloat16()
    y3 = torch.full((2, R, N + 3), float("nan"), dtype=torch.bfloat16)[:, :, :N]  # row stride N + 3
    y3[0], y3[1] = y[:, :N], y[:, N:]
    xs, ws = torch.rand(M) + 0.1, torch.rand(2 * N) * 0.02
    b = torch.randn(2 * N) if bias else None
    h = scale_epilogue(y, xs, ws, b, act, True, torch.bfloat16, m=M)
    assert torch.equal(scale_epilogue(y3, xs, ws, b, act, True, torch.bfloat16, m=M), h)
    assert torch.equal(scale_epilogue(y3[:, :M], xs, ws, b, act, True, torch.bfloat16), h)  # m from y3's rows
    assert torch.equal(reference.scale_epilogue_ref(y3, xs, ws, b, act, True, torch.bfloat16, m=M),
                       reference.scale_epilogue_ref(y, xs, ws, b, act, True, torch.bfloat16, m=M))
    for cfg in (None, dict(UNFUSED=True)):
        q, s = eq.epilogue_quant(y, xs, ws, b, act, True, torch.bfloat16, fp8, M, rows=16, config=cfg)
        q3, s3 = eq.epilogue_quant(y3, xs, ws, b, act, True, torch.bfloat16, fp8, M, rows=16, config=cfg)
        assert torch.equal(_bits(q3), _bits(q)) and torch.equal(s3, s)
    with pytest.raises(ValueError, match="3-D"):
        scale_epilogue(y3, xs, ws, b, act, False, torch.bfloat16, m=M)  # not gated
    with pytest.raises(ValueError, match="3-D"):
        scale_epilogue(y3[:1], xs, ws, b, act, True, torch.bfloat16, m=M)
    with pytest.raises(ValueError, match="3-D"):
        eq.epilogue_quant(y3, xs, ws, b, act, True, torch.bfloat16, fp8, M, planes=(8, 256.0, 1.0))
    with pytest.raises(ValueError, match="w_scale"):
        scale_epilogue(y3, xs, ws[:N], b, act, True, torch.bfloat16, m=M)
    # the up projection's scale and bias in tensors of their own (gated_pair: no concatenated copy per call)
    gb, ub = (b[:N].clone(), b[N:].clone()) if bias else (None, None)
    up = (ws[N:].clone(), ub)
    assert torch.equal(scale_epilogue(y3, xs, ws[:N].clone(), gb, act, True, torch.bfloat16, m=M, up=up), h)
    assert torch.equal(scale_epilogue(y, xs, ws[:N].clone(), gb, act, True, torch.bfloat16, m=M, up=up), h)
    with pytest.raises(ValueError, match="up="):
        scale_epilogue(y3, xs, ws, gb, act, True, torch.bfloat16, m=M, up=up)  # the stacked scales with up=
    with pytest.raises(ValueError, match="both given"):
        scale_epilogue(y3, xs, ws[:N], gb, act, True, torch.bfloat16, m=M, up=(None, ub))
    with pytest.raises(ValueError, match="gated"):
        scale_epilogue(y[:, :N], xs, ws[:N], gb, act, False, torch.bfloat16, m=M, up=up)


def test_epilogue_quant_bad_arguments():
    y = torch.randn(4, 10).bfloat16()
    with pytest.raises(ValueError, match="below"):
        eq.epilogue_quant(y, None, None, None, "none", False, torch.bfloat16, False, 4, rows=3)
    with pytest.raises(ValueError, match="x_scale"):
        eq.epilogue_quant(y, torch.ones(3), None, None, "none", False, torch.bfloat16, False, 4)
    with pytest.raises(ValueError, match="even"):
        eq.epilogue_quant(torch.randn(4, 9).bfloat16(), None, None, None, "silu", True, torch.bfloat16, False, 4)
    with pytest.raises(TypeError, match="h_dtype"):
        eq.epilogue_quant(y, None, None, None, "none", False, torch.int8, False, 4)
    q, s = eq.epilogue_quant(y, None, None, None, "none", False, torch.bfloat16, True, 0, rows=0)
    assert q.shape == (0, 10) and s.shape == (0,)


def _block(fmt, sparsity=None, d=64, h=96):
    torch.manual_seed(0)
    base = LlamaMLP(d, h).eval()
    cfg = (fused.FusedInt8MLP if fmt == "int8" else fused.FusedFloat8MLP)(weight_only=False, sparsity=sparsity)
    return fused.quantize(copy.deepcopy(base), cfg, blocks=True)


def _inputs(d=64):
    x3 = torch.randn(2, 9, d).bfloat16()  # 3-D, M=18
    wide = torch.randn(17, 2 * d).bfloat16()
    return [torch.randn(17, d).bfloat16(), x3, wide[:, ::2]]  # M=17, 3-D, a strided view


@pytest.mark.parametrize("fmt", FMTS)
def test_dense_block_handoff_matches_the_two_layers(fmt, monkeypatch):
    m = _block(fmt)
    assert isinstance(m, fused.FusedGatedMLP)
    with torch.no_grad(), dispatch.force_path("triton"):
        for x in _inputs():
            dispatch.stats.clear()
            y = m(x)
            assert dispatch.stats[("gated", "triton:w8_gemm_w8a8+act_quant (h out)")] == 1
            assert dispatch.stats[("linear", "triton:w8_gemm_w8a8 (h in)")] == 1
            monkeypatch.setattr(dispatch, "HANDOFF", False)
            ref = m(x)
            monkeypatch.setattr(dispatch, "HANDOFF", True)
            assert y.shape == ref.shape and torch.equal(y, ref)
            monkeypatch.setattr(dispatch, "FIRST_LAYER", True)  # the first layer in one launch (first_layer)
            dispatch.stats.clear()
            y1 = m(x)
            monkeypatch.setattr(dispatch, "FIRST_LAYER", False)
            assert dispatch.stats[("gated", "triton:first_layer (h out)")] == 1
            assert dispatch.stats[("linear", "triton:w8_gemm_w8a8 (h in)")] == 1
            assert torch.equal(y1, ref)
        # at M <= 16 both layers run the weight-only GEMV: no hand-off
        dispatch.stats.clear()
        m(torch.randn(16, 64).bfloat16())
        assert not any("h out" in k[1] for k in dispatch.stats)


@pytest.mark.parametrize("route", [None, "unpacked"])
@pytest.mark.parametrize("fmt", FMTS)
def test_sparse_block_handoff_matches_the_two_layers(fmt, route, monkeypatch):
    m = _block(fmt, "2:4")
    assert m.sparse_handoff()
    monkeypatch.setattr(dispatch, "SPARSE_ROUTE", route)
    monkeypatch.setattr(dispatch, "_sparse_routes", {})
    with torch.no_grad(), dispatch.force_path("triton"):
        for x in _inputs():
            dispatch.stats.clear()
            y = m(x)
            assert dispatch.stats[("sparse24_mlp_block", "per_layer (h quantized)")] == 1
            assert any(k[0] == "sparse24_gated" and k[1].endswith("(h out)") for k in dispatch.stats)
            ref = m.down(m.gate_up(x))  # the layers one after the other
            assert y.shape == ref.shape and torch.equal(y, ref)


def test_sparse_block_weight_only_keeps_the_layers():
    m = _block("int8", "2:4")
    m.gate_up.dynamic = m.down.dynamic = False
    assert not m.sparse_handoff()


@pytest.mark.parametrize("fmt", ["int8"])  # opcheck's schema test has no float8 CPU kernel (see test_ops)
def test_sparse_block_opcheck(fmt):
    m = _block(fmt, "2:4")
    g, d = m.gate_up, m.down
    for x in (torch.randn(3, 64), torch.randn(2, 5, 64).bfloat16(), torch.randn(0, 64)):
        args = (x, g.values, g.meta, g.scale, g.bias, d.values, d.meta, d.scale, d.bias, "silu", True, True)
        torch.library.opcheck(torch.ops.fusedmlp.sparse24_mlp_block.default, args)


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("sparsity", [None, "2:4"])
def test_handoff_cuda(fmt, sparsity, monkeypatch):
    """On the GPU, with each layer's route forced in turn (dense: Triton or cuBLAS; 2:4: packed, unpacked or
    cuSPARSELt): the block with h handed over quantized equals the block without, bit for bit, eager and
    replayed; a CUDA-graph replay equals the eager call; and the output is close to the reference."""
    base = LlamaMLP(256, 512).eval().cuda()
    cfg = (fused.FusedInt8MLP if fmt == "int8" else fused.FusedFloat8MLP)(weight_only=False, sparsity=sparsity)
    m = fused.quantize(copy.deepcopy(base), cfg, blocks=True)
    routes = [None] if sparsity is None else ["packed", "unpacked", "cslt"]
    with torch.no_grad():
        for route in routes:
            monkeypatch.setattr(dispatch, "SPARSE_ROUTE", route)
            for pick in ("triton", "cublas", "first_layer"):
                monkeypatch.setattr(dispatch, "_graph_pick", lambda key, t, c, op, pick=pick, **kw: pick)
                monkeypatch.setattr(dispatch, "FIRST_LAYER", pick == "first_layer")
                for M in (17, 64, 300):
                    x = torch.randn(M, 256, device="cuda", dtype=torch.bfloat16)
                    monkeypatch.setattr(dispatch, "HANDOFF", False)
                    ref = m(x)
                    monkeypatch.setattr(dispatch, "HANDOFF", True)
                    for _ in range(3):  # the first call, then replayed ones
                        if fmt == "float8_e4m3" and pick == "first_layer":
                            # its own tile (default_config), not the tuned GEMM's: fp32 sums of fp8 products in
                            # another order (int8 sums are exact)
                            assert sqnr(m(x).float(), ref.float()) > 40, (route, pick, M)
                        else:
                            assert torch.equal(m(x), ref), (route, pick, M)
                    with dispatch.force_path("reference"):
                        assert sqnr(m(x).float(), ref.float()) > 25, (route, pick, M)
                    s = torch.cuda.Stream()
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):
                        m(x)
                    torch.cuda.current_stream().wait_stream(s)
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        yg = m(x)
                    x.copy_(torch.randn_like(x))
                    g.replay()
                    if fmt == "float8_e4m3" and pick == "cublas":
                        # cuBLAS picks its fp8 algorithm per mode (eager / capture): fp32 sums in another order
                        assert sqnr(m(x).float(), yg.float()) > 30, (route, pick, M)
                    else:
                        assert torch.equal(yg, m(x)), (route, pick, M)
