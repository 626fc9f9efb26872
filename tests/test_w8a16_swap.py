"""fused.kernels.w8a16_swap (yᵀ = W·xᵀ, the widened weight as the tensor cores' register operand) against the
weight-only reference: in Triton's interpreter on odd shapes on the CPU, with the H200 shapes on CUDA."""
import pytest
import torch

from fused.kernels import w8a16_swap as ws
from fused.reference import gated_ref, linear_ref
from lowbit import quantize_weight, sqnr
from test_kernels_w8 import ACTS, FMTS, _case, _min_db, _poison_empty, _replayed


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("gated,il", [(False, False), (True, False), (True, True)])
def test_swap_interpreted(fmt, gated, il, monkeypatch):
    """Odd M / N / K (K not a multiple of the tile: the K tail), bias or not, every activation, strided and
    transposed x, fp16 and bf16, over a poisoned output; gated with two accumulators or one interleaved (IL)."""
    _poison_empty(monkeypatch, ws)
    cfg = dict(BLOCK_N=32 if il else 16, BLOCK_M=16, BLOCK_K=32, GROUP_N=2, num_stages=1, num_warps=4, IL=il)
    cases = [(1, 37, 50, True, torch.bfloat16, "plain"), (3, 20, 70, False, torch.float16, "transposed"),
             (17, 9, 64, True, torch.bfloat16, "3d_offset"), (300, 33, 45, True, torch.float16, "plain")]
    for i, (M, N, K, bias, dtype, view) in enumerate(cases):
        torch.manual_seed(i)
        act = ACTS[i % len(ACTS)] if not gated else ["silu", "gelu_tanh", "relu", "none"][i]
        x, q, s, b = _case(M, N, K, fmt, gated, bias, dtype, "cpu", view)
        y = ws.w8a16_swap(x, q, s, b, act, gated, config=cfg)
        ref = (gated_ref if gated else linear_ref)(x, q, s, b, act)
        assert y.shape == ref.shape and y.dtype == dtype
        assert sqnr(ref, y) > _min_db(dtype), (M, N, K, dtype, view, act)


@pytest.mark.parametrize("il", [False, True])
def test_swap_separate_up_and_out(il):
    """The up projection in tensors of its own (``up=``), and a caller's strided output; IL tiles refused where
    gate and up have different K strides."""
    torch.manual_seed(3)
    M, N, K = 19, 24, 40
    x = torch.randn(M, K, dtype=torch.bfloat16)
    qg, sg = quantize_weight(torch.randn(N, K), "int8")
    qu, su = quantize_weight(torch.randn(N, K), "int8")
    bg, bu = torch.randn(N), torch.randn(N)
    out = torch.full((M, N + 5), float("nan"), dtype=torch.bfloat16)[:, 2:N + 2]
    cfg = dict(BLOCK_N=32 if il else 16, BLOCK_M=16, BLOCK_K=32, GROUP_N=2, num_stages=1, num_warps=4, IL=il)
    y = ws.w8a16_swap(x, qg, sg, bg, "silu", True, up=(qu, su, bu), out=out, config=cfg)
    ref = gated_ref(x, torch.cat([qg, qu]), torch.cat([sg, su]), torch.cat([bg, bu]), "silu")
    assert y.data_ptr() == out.data_ptr() and sqnr(ref, y) > 40
    if il:
        with pytest.raises(ValueError, match="K stride"):
            ws.w8a16_swap(x, qg, sg, bg, "silu", True, up=(qu.t().contiguous().t(), su, bu), config=cfg)


def test_swap_bad_inputs():
    q, s = quantize_weight(torch.randn(8, 16), "int8")
    with pytest.raises(TypeError, match="bf16 or fp16"):
        ws.w8a16_swap(torch.randn(4, 16), q, s)
    with pytest.raises(ValueError, match=r"\[M, K\]"):
        ws.w8a16_swap(torch.randn(4, 12, dtype=torch.bfloat16), q, s)
    with pytest.raises(TypeError, match="int8 or float8"):
        ws.w8a16_swap(torch.randn(4, 16, dtype=torch.bfloat16), q.float(), s)
    assert ws.w8a16_swap(torch.randn(0, 16, dtype=torch.bfloat16), q, s).shape == (0, 8)


@pytest.mark.parametrize("gated,il", [(False, False), (True, True)])
def test_swap_persistent_interpreted(gated, il, monkeypatch):
    """The persistent grid (two programs striding over 4 x 3 tiles here) gives the one-program-per-tile kernel's
    output; a split-K config with PERSIST runs unsplit-persistent only when its split is 1."""
    _poison_empty(monkeypatch, ws)
    torch.manual_seed(8)
    x, q, s, b = _case(45, 37, 70, "int8", gated, True, torch.bfloat16, "cpu", "transposed")
    ref = (gated_ref if gated else linear_ref)(x, q, s, b, "gelu_tanh")
    base = dict(BLOCK_N=32 if il else 16, BLOCK_M=16, BLOCK_K=32, GROUP_N=2, num_stages=1, num_warps=4, IL=il,
                SPLIT_K=1)
    want = ws.w8a16_swap(x, q, s, b, "gelu_tanh", gated, config=base)
    got = ws.w8a16_swap(x, q, s, b, "gelu_tanh", gated, config=dict(base, PERSIST=True))
    assert torch.equal(got, want) and sqnr(ref, got) > 40


@pytest.mark.parametrize("gated,il", [(False, False), (True, False), (True, True)])
def test_swap_split_k_interpreted(gated, il, monkeypatch):
    """Split-K (the partials summed in a fixed order by the program that finishes the tile), with a K tail in the
    last split, against the unsplit kernel and the reference; the counters are left at zero for the next call."""
    from fused.kernels import splitk

    _poison_empty(monkeypatch, ws)
    monkeypatch.setattr(splitk, "_workspace", {})
    torch.manual_seed(6)
    x, q, s, b = _case(19, 21, 200, "int8", gated, True, torch.bfloat16, "cpu", "plain")
    ref = (gated_ref if gated else linear_ref)(x, q, s, b, "silu")
    base = dict(BLOCK_N=32 if il else 16, BLOCK_M=16, BLOCK_K=32, GROUP_N=2, num_stages=1, num_warps=4, IL=il)
    want = ws.w8a16_swap(x, q, s, b, "silu", gated, config=dict(base, SPLIT_K=1))
    for split in (2, 3):
        got = ws.w8a16_swap(x, q, s, b, "silu", gated, config=dict(base, SPLIT_K=split))
        assert sqnr(ref, got) > 40 and sqnr(want.float(), got.float()) > 50, split
        assert not splitk._workspace[x.device][1].any()


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("M", [1029, 129])
def test_swap_cuda(fmt, gated, M, monkeypatch):
    """Candidates of the tuner's list for M (the first two, up to two split-K ones below 1024, a persistent grid at
    1024 and up) on a Llama-like shape with odd M, and a strided x."""
    _poison_empty(monkeypatch, ws)
    torch.manual_seed(0)
    N, K = 1024 + 8, 2048
    x, q, s, b = _case(M, N, K, fmt, gated, True, torch.bfloat16, "cuda", "3d_offset")
    ref = (gated_ref if gated else linear_ref)(x, q, s, b, "silu")
    cands = ws._candidates(M, N, K, gated)
    # a persistent grid with 64-token tiles: more tiles than SMs at M=1029, so programs stride over tiles
    persist = [dict(c, BLOCK_M=64) for c in cands if c.get("PERSIST")][:1]
    for cfg in cands[:2] + [c for c in cands if c["SPLIT_K"] > 1][:2] + persist:
        y = ws.w8a16_swap(x, q, s, b, "silu", gated, config=cfg)
        assert sqnr(ref.float(), y.float()) > 40, cfg


@pytest.mark.parametrize("gated", [False, True])
def test_swap_path_in_dispatch(gated):
    """dispatch.SWAP_PATH runs the kernel (interpreter here) on 2-D x."""
    from fused import dispatch

    torch.manual_seed(4)
    x, q, s, b = _case(21, 19, 40, "int8", gated, True, torch.bfloat16, "cpu", "plain")
    y = dispatch._triton_dense(dispatch.SWAP_PATH, x, q, s, b, "gelu", gated, False)
    assert sqnr((gated_ref if gated else linear_ref)(x, q, s, b, "gelu"), y) > 40


@pytest.mark.cuda
@pytest.mark.parametrize("gated,M", [(False, 1100), (True, 1100), ("pair", 1100), (False, 300), (True, 300)])
def test_swap_route_cuda(gated, M, monkeypatch):
    """With FUSED_W8A16_SWAP the route of a W8A16 shape offers the transposed product, at M >= WIDEN_MIN_M (against
    the widening routes) and below (against split activations); picked, it runs in eager calls and under CUDA-graph
    capture, against the reference."""
    from fused import dispatch

    monkeypatch.setattr(dispatch, "W8A16_SWAP", True)
    monkeypatch.setenv("FUSED_TUNE", "1")
    monkeypatch.setattr(dispatch, "_dense_routes", {})
    offered = []
    monkeypatch.setattr(dispatch, "measure_route", lambda kind, key, cands, untimed=None, graph=False:
                        offered.extend(cands) or ("swap", "swap"))
    dispatch.stats.clear()
    torch.manual_seed(0)
    x, q, s, b = _case(M, 256, 512, "int8", bool(gated), True, torch.bfloat16, "cuda", "plain")
    ref = (gated_ref if gated else linear_ref)(x, q, s, b, "silu")
    if gated == "pair":  # gate and up in tensors of their own (torch.compile's pass)
        name, H = "gated_pair", q.shape[0] // 2
        op = lambda x, q, s, b, act: dispatch.gated_pair(x, q[:H], s[:H], b[:H], q[H:], s[H:], b[H:], act)  # noqa
    else:
        op, name = (dispatch.gated, "gated") if gated else (dispatch.linear, "linear")
    got = op(x, q, s, b, "silu")
    assert "swap" in offered and dispatch.stats[(name, dispatch.SWAP_PATH)] == 1
    assert sqnr(ref.float(), got.float()) > 40
    out = _replayed(lambda: op(x, q, s, b, "silu"))
    assert dispatch.stats[(name, dispatch.SWAP_PATH)] == 2 and sqnr(ref.float(), out.float()) > 40


def test_swap_in_explain(monkeypatch):
    """`explain`'s text says when the transposed product is offered (W8A16_SWAP), and not otherwise."""
    from fused import dispatch

    for on in (False, True):
        monkeypatch.setattr(dispatch, "W8A16_SWAP", on)
        _, why = dispatch.plan("gated", "int8", False, "cuda")
        assert ("transposed product" in why) == on, why
