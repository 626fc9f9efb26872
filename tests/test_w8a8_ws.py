"""The warp-specialized Gluon W8A8 GEMM (fused/kernels/w8a8_ws.py): e4m3 and int8, plain and gated, bias, every
activation.
Gluon does not run in Triton's interpreter, so the products are checked on the GPU (cuda) against the fp32 product of
the dequantized operands; the CPU checks the clear errors, and tests/test_triton36_compile.py compiles it for sm_90."""
import pytest
import torch

from fused.reference import gated_ref, linear_ref
from lowbit.metrics import sqnr
from operands import weights_8bit

sm90 = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                          reason="Hopper (sm_90) GPU")


def test_bad_operands_get_clear_errors():
    from fused.kernels.w8a8_ws import supports, w8a8_ws, w8a8_ws_pair

    xq = torch.zeros(4, 64, dtype=torch.float8_e4m3fn)
    xs = torch.ones(4)
    q = torch.zeros(8, 64, dtype=torch.float8_e4m3fn)
    s = torch.ones(8)
    with pytest.raises(TypeError, match="both float8_e4m3fn"):
        w8a8_ws(xq.view(torch.int8), xs, q, s)  # formats differ
    with pytest.raises(TypeError, match="both float8_e4m3fn"):
        w8a8_ws(xq.view(torch.uint8), xs, q.view(torch.uint8), s)
    with pytest.raises(TypeError, match="both float8_e4m3fn"):
        w8a8_ws(xq, xs, q[:, :32], s)
    with pytest.raises(TypeError, match="both float8_e4m3fn"):
        w8a8_ws(xq[None], xs, q, s)  # 3-D: the caller flattens
    with pytest.raises(ValueError, match="multiple of 16"):
        w8a8_ws(torch.zeros(4, 40, dtype=torch.float8_e4m3fn), xs, torch.zeros(8, 40, dtype=torch.float8_e4m3fn), s)
    with pytest.raises(ValueError, match="even row count"):
        w8a8_ws(xq, xs, q[:7], s[:7], gated=True)
    with pytest.raises(ValueError, match="act must be"):
        w8a8_ws(xq, xs, q, s, act="tanh")
    with pytest.raises(ValueError, match="token scales"):
        w8a8_ws(xq, torch.ones(5), q, s)
    with pytest.raises(TypeError, match="out_dtype"):
        w8a8_ws(xq, xs, q, s, out_dtype=torch.float32)
    with pytest.raises(ValueError, match="contiguous"):
        w8a8_ws(xq, xs, q, s, out=torch.empty(4, 9, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="float32"):
        w8a8_ws(xq, xs.double(), q, s)
    with pytest.raises(ValueError, match="one value per weight row"):
        w8a8_ws(xq, xs, q, s[:5])
    with pytest.raises(RuntimeError, match="one CUDA device"):
        w8a8_ws(xq, xs, q, s)  # CPU tensors
    assert supports(q) == "Hopper (sm_90) only"
    with pytest.raises(ValueError, match="must match"):
        w8a8_ws_pair(xq, xs, q, s, None, q[:4], s[:4], None)
    with pytest.raises(ValueError, match="biases both or neither"):
        w8a8_ws_pair(xq, xs, q, s, s.bfloat16(), q, s, None)
    with pytest.raises(TypeError, match="float32"):
        w8a8_ws_pair(xq, xs, q, s, None, q, s.double(), None)  # the up scales too
    with pytest.raises(ValueError, match="one value per weight row"):
        w8a8_ws_pair(xq, xs, q, s, None, q, s[:5], None)
    with pytest.raises(RuntimeError, match="one CUDA device"):
        w8a8_ws_pair(xq, xs, q, s, None, q, s, None)
    from fused.kernels.w8a8_ws import w8a16_ws_split

    with pytest.raises(ValueError, match="2 per token"):
        w8a16_ws_split(xq, torch.ones(3), q, s)  # 4 plane rows for 3 tokens
    with pytest.raises(ValueError, match="must match"):
        w8a16_ws_split(xq, torch.ones(2), q, s, up=(q[:4], s[:4], None))
    with pytest.raises(RuntimeError, match="one CUDA device"):
        w8a16_ws_split(xq, torch.ones(2), q, s)


def _operands(M, N, K, seed, bias, fp8=True):
    """act_quant's rows of a random x (with padding rows past M, as the hand-off makes them), weights (e4m3: every
    value but NaN, subnormals included; int8: -127..127), scales, bias; and the dequantized x in fp32 for the
    reference."""
    from fused.kernels.act_quant import act_quant

    torch.manual_seed(seed)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    xq, xs = act_quant(x, fp8=fp8, rows=M + 5)
    q, s, b = weights_8bit(N, K, fp8, bias)
    return xq, xs, q, s, b, xq[:M].float() * xs[:, None]


@pytest.mark.cuda
@sm90
@pytest.mark.parametrize("M,N,K", [(1, 64, 64), (3, 200, 1040), (17, 4136, 528), (300, 4096, 14336)])
@pytest.mark.parametrize("act,bias,fp8", [("none", False, True), ("gelu_tanh", True, True), ("relu", True, True),
                                          ("silu", False, True), ("gelu", True, True), ("none", False, False),
                                          ("gelu_tanh", True, False)])
def test_ws_matches_reference_cuda(M, N, K, act, bias, fp8):
    from fused.kernels.w8a8_ws import w8a8_ws

    xq, xs, q, s, b, xf = _operands(M, N, K, M + N, bias, fp8)
    ref = linear_ref(xf, q, s, b, act)
    # PROGRAMS=3: three programs walk every tile (each consumer's ring positions and phases across tiles)
    # COOP: 256-row tiles shared by the two consumers (PROGRAMS=3: each program several tiles, the ring across them)
    for cfg in (None, dict(BLOCK_K=64, STAGES=8), dict(STAGES=3, PROGRAMS=3), dict(BLOCK_T=64), dict(COOP=True),
                dict(COOP=True, PROGRAMS=3, STAGES=3)):
        for dtype in ((torch.bfloat16, torch.float16) if cfg is None else (torch.bfloat16, )):
            out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)  # poisoned
            y = w8a8_ws(xq, xs, q, s, b, act, out_dtype=dtype, config=cfg, out=out)
            assert y.data_ptr() == out.data_ptr() and not torch.isnan(y).any()
            assert sqnr(ref, y.float()) > 40, (cfg, dtype)


@pytest.mark.cuda
@sm90
@pytest.mark.parametrize("M,H,K", [(1, 64, 64), (17, 208, 528), (300, 1000, 4096)])
@pytest.mark.parametrize("act,bias,fp8", [("silu", False, True), ("gelu_tanh", True, True), ("relu", False, True),
                                          ("none", True, True), ("silu", False, False), ("gelu", True, False)])
def test_ws_gated_matches_reference_cuda(M, H, K, act, bias, fp8):
    from fused.kernels.w8a8_ws import w8a8_ws

    xq, xs, q, s, b, xf = _operands(M, 2 * H, K, M + H, bias, fp8)
    ref = gated_ref(xf, q, s, b, act)
    for cfg in (None, dict(BLOCK_K=64, STAGES=8), dict(PROGRAMS=2), dict(COOP=True), dict(COOP=True, PROGRAMS=3)):
        out = torch.full((M, H), float("nan"), device="cuda", dtype=torch.bfloat16)  # poisoned
        y = w8a8_ws(xq, xs, q, s, b, act, gated=True, config=cfg, out=out)
        assert not torch.isnan(y).any() and sqnr(ref, y.float()) > 40, cfg


@pytest.mark.cuda
@sm90
@pytest.mark.parametrize("M,H,K", [(3, 64, 64), (300, 1000, 528)])
@pytest.mark.parametrize("act,bias,fp8", [("silu", False, True), ("gelu_tanh", True, True), ("silu", True, False)])
def test_ws_pair_matches_stacked_cuda(M, H, K, act, bias, fp8):
    """w8a8_ws_pair (gate and up in tensors of their own) against the reference and bit-equal to w8a8_ws on the same
    rows stacked (the same tiles and epilogue)."""
    from fused.kernels.w8a8_ws import w8a8_ws, w8a8_ws_pair

    xq, xs, q, s, b, xf = _operands(M, 2 * H, K, M + H + 7, bias, fp8)
    wg, wu = q[:H].clone(), q[H:].clone()
    bg, bu = (b[:H].clone(), b[H:].clone()) if bias else (None, None)
    ref = gated_ref(xf, q, s, b, act)
    out = torch.full((M, H), float("nan"), device="cuda", dtype=torch.bfloat16)  # poisoned
    y = w8a8_ws_pair(xq, xs, wg, s[:H].clone(), bg, wu, s[H:].clone(), bu, act, out=out)
    assert not torch.isnan(y).any() and sqnr(ref, y.float()) > 40
    assert torch.equal(y, w8a8_ws(xq, xs, q, s, b, act, gated=True))


@pytest.mark.cuda
@sm90
def test_ws_views_cuda():
    """A row slice of a wider buffer (unaligned for TMA: copied) and the hand-off's padded rows give the same y."""
    from fused.kernels.w8a8_ws import w8a8_ws

    xq, xs, q, s, _, xf = _operands(37, 320, 512, 5, False)
    wide = torch.zeros(37, 520, device="cuda", dtype=torch.float8_e4m3fn)
    v = wide[:, 8:]
    v.copy_(xq[:37])
    assert not v.is_contiguous()
    ref = linear_ref(xf, q, s)
    assert sqnr(ref, w8a8_ws(v, xs, q, s).float()) > 40
    assert torch.equal(w8a8_ws(v, xs, q, s), w8a8_ws(xq, xs, q, s))


@pytest.mark.cuda
@sm90
@pytest.mark.parametrize("M,N,K", [(1, 64, 64), (3, 200, 1040), (17, 4136, 528), (100, 320, 4096), (300, 4096, 1456)])
@pytest.mark.parametrize("gated,act,bias,fp8", [(True, "silu", False, False), (True, "gelu_tanh", True, True),
                                                (False, "none", False, False), (False, "gelu", True, True)])
def test_ws_split_matches_w8a16_reference_cuda(M, N, K, gated, act, bias, fp8):
    """w8a16_ws_split (W8A16 as one 8-bit GEMM of act_split's interleaved planes, combined per token in the
    epilogue) against the W8A16 reference on bf16 x, every config form, outputs poisoned; a transposed x view."""
    from fused.kernels.act_split import act_split
    from fused.kernels.w8a8_ws import w8a16_ws_split

    torch.manual_seed(M + N)
    x = torch.randn(K, M, device="cuda", dtype=torch.bfloat16).t()  # a transposed view
    q, s, b = weights_8bit(N, K, fp8, bias)
    ref = (gated_ref if gated else linear_ref)(x.float(), q, s, b, act)
    planes, xs = act_split(x, fp8=fp8, interleave=True)
    n_out = N // 2 if gated else N
    for cfg in (None, dict(BLOCK_T=64), dict(STAGES=3, PROGRAMS=3), dict(COOP=True), dict(COOP=True, PROGRAMS=3)):
        out = torch.full((M, n_out), float("nan"), device="cuda", dtype=torch.bfloat16)  # poisoned
        y = w8a16_ws_split(planes, xs, q, s, b, act, gated, config=cfg, out=out)
        assert y.data_ptr() == out.data_ptr() and not torch.isnan(y).any(), cfg
        assert sqnr(ref, y.float()) > (40 if fp8 else 45), (cfg, sqnr(ref, y.float()))


def _parts_case(M, N, K, gated, fp8, x_split, seed):
    """The split-K cases' operands: run(config, out) of w8a8_ws on act_quant(x), or (x_split) of
    w8a16_ws_split on act_split's interleaved planes, silu; the fp32 reference; y's columns."""
    from fused.kernels.act_quant import act_quant
    from fused.kernels.act_split import act_split
    from fused.kernels.w8a8_ws import w8a16_ws_split, w8a8_ws

    torch.manual_seed(seed)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    q, s, b = weights_8bit(N, K, fp8, gated)
    if x_split:
        xq, xs = act_split(x, fp8=fp8, interleave=True)
        fn, xr = w8a16_ws_split, x.float()
    else:
        xq, xs = act_quant(x, fp8=fp8)
        fn, xr = w8a8_ws, xq.float() * xs[:, None]
    ref = (gated_ref if gated else linear_ref)(xr, q, s, b, "silu")
    return (lambda cfg, out: fn(xq, xs, q, s, b, "silu", gated, config=cfg, out=out)), ref, N // 2 if gated else N


@pytest.mark.cuda
@sm90
@pytest.mark.parametrize("M,N,K,split", [(3, 200, 1040, 3), (17, 4136, 528, 5), (100, 320, 4096, 4),
                                         (300, 4096, 14336, 2)])
@pytest.mark.parametrize("gated,fp8,x_split", [(False, False, True), (True, False, False), (False, True, False),
                                               (True, True, True)])
def test_ws_split_k_cuda(M, N, K, split, gated, fp8, x_split):
    """SPLIT_K (K cut into equal runs, the partials summed in a fixed order by the last to finish): int8 bit-equal to
    one K run (int32 sums), e4m3 within the reference's SQNR; ping-pong and COOP, programs walking several items,
    twice in a row (the counters reset), outputs poisoned; W8A8 and the split-plane W8A16 form."""
    run, ref, n_out = _parts_case(M, N, K, gated, fp8, x_split, seed=M + split)
    for base in ({}, dict(COOP=True), dict(PROGRAMS=3), dict(COOP=True, PROGRAMS=2, BLOCK_T=64)):
        one = run(base, None)
        for _ in range(2):
            out = torch.full((M, n_out), float("nan"), device="cuda", dtype=torch.bfloat16)  # poisoned
            y = run(dict(base, SPLIT_K=split), out)
            assert not torch.isnan(y).any(), base
            if fp8:
                assert sqnr(ref, y.float()) > 40, (base, sqnr(ref, y.float()))
            else:
                assert torch.equal(y, one), base
        y = run(dict(base, SPLIT_K="auto"), None)  # as many parts as keep one wave (K: 9, 5, 32, 112 steps)
        assert torch.equal(y, one) if not fp8 else sqnr(ref, y.float()) > 40, base
    with pytest.raises(ValueError, match="divisible"):
        run(dict(SPLIT_K=split + 1), None)


def test_auto_split_fills_one_wave():
    """SPLIT_K "auto": the most equal K parts (each >= 4 steps) keeping tiles x parts within the programs; the Llama
    M=128 down projections (K 14336: 112 steps) on 132 SMs, and shapes whose tiles fill the SMs alone."""
    from fused.kernels.w8a8_ws import auto_split, planned_split

    assert auto_split(32, 112, 132) == 4 and auto_split(16, 112, 132) == 8  # W8A8 down: ping-pong, COOP
    assert auto_split(64, 112, 132) == 2 and auto_split(34, 112, 132) == 2  # (3 does not divide 112)
    assert auto_split(112, 32, 132) == 1 and auto_split(8, 7, 132) == 1  # tiles fill the SMs; 7 steps: no 2 parts
    assert auto_split(2, 8, 132) == 2 and auto_split(1, 112, 132) == 28  # parts of at least 4 steps
    cpu = torch.device("cpu")
    down = lambda rows, cfg: planned_split(rows, 4096, 14336, False, dict(cfg, PROGRAMS=132), cpu)  # noqa: E731
    assert down(128, dict(SPLIT_K="auto")) == 4 and down(128, dict(COOP=True, SPLIT_K="auto")) == 8
    assert down(256, dict(SPLIT_K="auto")) == 2 and down(256, dict(COOP=True, SPLIT_K="auto")) == 4  # W8A16 planes
    assert down(256, dict(SPLIT_K=3)) == 3 and down(256, {}) == 1  # given, or none
    gated = lambda rows, cfg: planned_split(rows, 14336, 4096, True, dict(cfg, PROGRAMS=132), cpu)  # noqa: E731
    assert gated(128, dict(SPLIT_K="auto")) == 1 and gated(128, dict(COOP=True, SPLIT_K="auto")) == 1


def _block_operands(M, H, D, gated, fp8, seed, K=512):
    """x [M, K] bf16 and a block's 8-bit weights and scales: first layer [2H or H, K], down [D, H]."""
    torch.manual_seed(seed)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    wdt, lim = (torch.float8_e4m3fn, 448) if fp8 else (torch.int8, 127)
    q1 = (torch.randn(2 * H if gated else H, K, device="cuda") * 60).clamp(-lim, lim).to(wdt)
    s1 = torch.rand(q1.shape[0], device="cuda") * 0.01 + 1e-3
    q2 = (torch.randn(D, H, device="cuda") * 60).clamp(-lim, lim).to(wdt)
    return x, q1, s1, q2, torch.rand(D, device="cuda") * 0.01 + 1e-3


@pytest.mark.cuda
@sm90
@pytest.mark.parametrize("gated,act,fp8", [(True, "silu", True), (False, "gelu_tanh", True), (True, "silu", False)])
def test_block_route_on_gluon_cuda(monkeypatch, gated, act, fp8):
    """The W8A8 block with both layers' routes (h out, h in) forced to "gluon" (dispatch.W8A8_WS) against the reference
    and the Triton routes (the same quantization; the GEMMs' rounding apart); the stats name the routes: the tile and
    split-K forms."""
    from fused import dispatch

    monkeypatch.setattr(dispatch, "W8A8_WS", True)
    M, H, D = 300, 1008, 512  # H: the down GEMM's K, a multiple of 16 for TMA
    x, q1, s1, q2, s2 = _block_operands(M, H, D, gated, fp8, seed=3)
    wdt = q1.dtype
    op = "gated" if gated else "linear"
    key = dispatch._h_out_key(op, M, q1, x.dtype, None, act)
    key_in = ("linear", dispatch.m_bucket(M), tuple(q2.shape), wdt, x.dtype, True, "none", "h in")
    outs = {}
    # gluon_coop: both layers on the COOP form; _t64: 64-token tiles
    # _sk: split-K "auto" (the down GEMM's 8 K steps in 2 parts; the first layer's 4 are not cut)
    routes = ("triton", "gluon", "gluon_coop", "gluon_t64", "gluon_coop_t64", "gluon_sk", "gluon_coop_sk")
    for route in routes:
        monkeypatch.setitem(dispatch._dense_routes, key, (route, route))
        monkeypatch.setitem(dispatch._dense_routes, key_in, (route, route))
        dispatch.stats.clear()
        outs[route] = dispatch.mlp_block(x, q1, s1, None, q2, s2, None, act, gated, dynamic=True)
        if route != "triton":
            assert dispatch.stats[(op, f"triton:act_quant+gluon:w8a8_ws{route[5:]}+act_quant (h out)")] == 1
            assert dispatch.stats[("linear", f"gluon:w8a8_ws{route[5:]} (h in)")] == 1
    for route in routes[2:]:
        assert sqnr(outs["gluon"].float(), outs[route].float()) > 40, route  # the same products, other tiles
    if not fp8:  # int32 sums: split-K's parts add up to the same bits
        for route in routes[3:]:
            if route.endswith("sk"):
                assert torch.equal(outs[route.replace("_sk", "")], outs[route]), route
    ref = (gated_ref if gated else linear_ref)(x, q1, s1, None, act, dynamic=True)
    ref = linear_ref(ref, q2, s2, None, "none", dynamic=True)
    assert sqnr(ref.float(), outs["gluon"].float()) > 30
    assert sqnr(outs["triton"].float(), outs["gluon"].float()) > 30


@pytest.mark.cuda
@sm90
@pytest.mark.parametrize("op", ["linear", "gated", "gated_pair"])
@pytest.mark.parametrize("fp8", [True, False])
@pytest.mark.parametrize("route", ["gluon", "gluon_coop", "gluon_coop_t64", "gluon_coop_sk"])
def test_layer_routes_on_gluon_cuda(monkeypatch, op, fp8, route):
    """A W8A8 layer outside a block (the per-layer route; gated_pair: torch.compile's per-Linear pair) with its route
    forced to "gluon": act_quant + w8a8_ws against the reference; the stats name the path."""
    from fused import dispatch
    from fused.reference import gated_pair_ref

    monkeypatch.setattr(dispatch, "W8A8_WS_LAYER", True)  # (the forced route needs no offer; as it will run)
    monkeypatch.setattr(dispatch, "W8A8_WS_COOP", True)
    torch.manual_seed(11)
    M, K, N = 300, 1024, 1008  # N and K multiples of 16 (the routes' condition, _cublas_ok); 8 K steps: sk cuts K
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    wdt, lim = (torch.float8_e4m3fn, 448) if fp8 else (torch.int8, 127)
    rows = N if op == "linear" else 2 * N
    q = (torch.randn(rows, K, device="cuda") * 60).clamp(-lim, lim).to(wdt)
    s = torch.rand(rows, device="cuda") * 0.01 + 1e-3
    b = torch.randn(rows, device="cuda", dtype=torch.bfloat16)
    act = "gelu_tanh" if op == "linear" else "silu"
    w = q[:N] if op == "gated_pair" else q
    key = (op, dispatch.m_bucket(M), tuple(w.shape), wdt, x.dtype, False, act)
    monkeypatch.setitem(dispatch._dense_routes, key, (route, route))
    dispatch.stats.clear()
    if op == "gated_pair":
        args = (q[:N].clone(), s[:N].clone(), b[:N].clone(), q[N:].clone(), s[N:].clone(), b[N:].clone())
        y = dispatch.gated_pair(x, *args, act=act, dynamic=True)
        ref = gated_pair_ref(x, *args, act=act, dynamic=True)
    else:
        y = getattr(dispatch, op)(x, q, s, b, act, dynamic=True)
        ref = (gated_ref if op == "gated" else linear_ref)(x, q, s, b, act, dynamic=True)
    assert dispatch.stats[(op, dict(dispatch._layer_ws_paths())[route])] == 1
    assert y.shape == ref.shape and sqnr(ref.float(), y.float()) > 35


@pytest.mark.cuda
@sm90
@pytest.mark.parametrize("op", ["linear", "gated", "gated_pair"])
@pytest.mark.parametrize("fp8", [True, False])
@pytest.mark.parametrize("route", ["ws split", "ws split coop", "ws split t64", "ws split coop t64", "ws split sk",
                                   "ws split coop sk"])
def test_w8a16_layer_route_on_split_ws_cuda(monkeypatch, op, fp8, route):
    """A W8A16 layer at M=100 with its route forced to a split-plane Gluon form: act_split (interleaved) +
    w8a16_ws_split against the reference, 3-D x (gated_pair: torch.compile's per-Linear gate / up, bit-equal to the
    stacked weight's); the stats name the path."""
    from fused import dispatch
    from fused.reference import gated_pair_ref

    torch.manual_seed(12)
    M, K, N = 100, 512, 1008
    x = torch.randn(4, M // 4, K, device="cuda", dtype=torch.bfloat16)
    rows = N if op == "linear" else 2 * N
    q, s, b = weights_8bit(rows, K, fp8, True)
    act = "gelu_tanh" if op == "linear" else "silu"
    w = q[:N] if op == "gated_pair" else q
    key = (op, dispatch.m_bucket(M), tuple(w.shape), q.dtype, x.dtype, False, act, "ws mid")
    monkeypatch.setitem(dispatch._dense_routes, key, (route, route))
    dispatch.stats.clear()
    if op == "gated_pair":
        args = (q[:N].clone(), s[:N].clone(), b[:N].clone(), q[N:].clone(), s[N:].clone(), b[N:].clone())
        y = dispatch.gated_pair(x, *args, act=act)
        ref = gated_pair_ref(x, *args, act=act)
        from fused.kernels.act_split import act_split
        from fused.kernels.w8a8_ws import w8a16_ws_split

        planes, xs = act_split(x.reshape(M, K), fp8=fp8, interleave=True)
        stacked = w8a16_ws_split(planes, xs, q, s, b, act, True, config=dispatch._WS_SPLIT_CONFIG[
            dispatch._WS_SPLIT[route]])
        assert torch.equal(y.reshape(M, N), stacked)
    else:
        y = getattr(dispatch, op)(x, q, s, b, act, dynamic=False)
        ref = (gated_ref if op == "gated" else linear_ref)(x, q, s, b, act)
    assert dispatch.stats[(op, dispatch._WS_SPLIT[route])] == 1, dict(dispatch.stats)
    assert y.shape == ref.shape and sqnr(ref.float(), y.float()) > 40


def test_grouped_operands_get_clear_errors():
    """The grouped hand-off's own checks (x scales per 64 of K, quant_out), before any device is needed."""
    from fused.kernels.w8a8_ws import w8a8_ws

    xq = torch.zeros(4, 128, dtype=torch.float8_e4m3fn)
    q = torch.zeros(8, 128, dtype=torch.float8_e4m3fn)
    s = torch.ones(8)
    with pytest.raises(ValueError, match=r"ceil\(K / 64\) = 2 rows"):
        w8a8_ws(xq, torch.ones(3, 4), q, s)
    with pytest.raises(ValueError, match="BLOCK_K 64 or 128"):
        w8a8_ws(xq, torch.ones(2, 4), q, s, gated=True)  # the grouped GEMM is the plain (down) one
    with pytest.raises(ValueError, match="BLOCK_K 64 or 128"):
        w8a8_ws(xq, torch.ones(2, 4), q, s, config=dict(BLOCK_K=256))
    with pytest.raises(ValueError, match="BLOCK_T 128"):
        w8a8_ws(xq, torch.ones(2, 4), q, s, config=dict(BLOCK_T=64))  # a consumer's 64 tokens are wgmma's rows
    with pytest.raises(ValueError, match="quant_out makes its own"):
        w8a8_ws(xq, torch.ones(4), q, s, quant_out=True, out=torch.empty(4, 8, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="group must be 64 or 128"):
        w8a8_ws(xq, torch.ones(4), q, s, quant_out=True, group=32)
    with pytest.raises(ValueError, match=r"ceil\(K / 128\) = 1 rows"):
        w8a8_ws(xq, torch.ones(2, 4), q, s, group=128)
    with pytest.raises(ValueError, match="BLOCK_K 64 or 128"):  # a K step holds whole groups
        w8a8_ws(xq, torch.ones(1, 4), q, s, group=128, config=dict(BLOCK_K=64))
    with pytest.raises(ValueError, match="needs COOP"):  # a gated ping-pong tile holds 64 outputs
        w8a8_ws(xq, torch.ones(4), q, s, gated=True, quant_out=True, group=128)


def test_barrier_protocols_in_a_random_interleaving_model():
    """The COOP stage ring and the groups-of-128 absmax trade (tests/ring_model.py: one loader and two consumers, or two
    consumers trading per tile, their mbarrier steps interleaved at random) never deadlock and read only their own
    stage's / tile's values; one trade slot per consumer instead of two, or the wrong wait parity, would fail it."""
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "tests" / "ring_model.py"
    src = path.read_text()
    exec(compile(src, str(path), "exec"), {})  # runs every check (about a second)
    with pytest.raises(AssertionError, match="read the value of tile"):  # one slot per consumer (no tile parity)
        exec(compile(src.replace("slots[n % 2]", "slots[0]"), str(path), "exec"), {})


def test_grouped_forms_from_the_environment(monkeypatch):
    """dispatch._GROUPED_ENV: 1 times every grouped form, "a+b" those named (an unknown name is an error, not a silent
    skip)."""
    from fused import dispatch

    monkeypatch.setattr(dispatch, "_GROUPED_ENV", "1")
    assert dispatch._timed_forms() == list(dispatch.GROUPED_FORMS)
    monkeypatch.setattr(dispatch, "_GROUPED_ENV", "grouped+grouped_k128")
    assert dispatch._timed_forms() == ["grouped", "grouped_k128"]
    monkeypatch.setattr(dispatch, "_GROUPED_ENV", "grouped+g256")
    with pytest.raises(ValueError, match="unknown forms"):
        dispatch._timed_forms()


def test_grouped_handoff_says_why_not():
    """Where the grouped hand-off cannot run, dispatch says why (and the block keeps the per-token one)."""
    from fused import dispatch

    q = torch.zeros(2 * 64, 64, dtype=torch.float8_e4m3fn)
    assert dispatch._grouped_reason(torch.zeros(4, 64, dtype=torch.bfloat16), q, q[:, :64], True) == \
        "CUDA x in bf16 / fp16"


@pytest.mark.cuda
@sm90
@pytest.mark.parametrize("M,N,K", [(1, 64, 64), (3, 200, 1040), (17, 4136, 528), (300, 4096, 14336)])
@pytest.mark.parametrize("act,bias,fp8", [("none", False, True), ("gelu_tanh", True, True), ("none", False, False),
                                          ("silu", True, False)])
def test_ws_x_groups_matches_reference_cuda(M, N, K, act, bias, fp8):
    """x quantized per token and 64 of K (scales [ceil(K / 64), M], as quant_out writes them; K past a group's end
    partial where K % 64): each K step's product scaled by its group's scales, against the fp32 product of the
    dequantized operands; groups of 64 with one K group a stage or two (a partial second one where K % 128), groups
    of 128 (a partial last one where K % 128), one program walking several tiles (PROGRAMS=3), a short ring."""
    from fused.kernels.w8a8_ws import w8a8_ws
    from lowbit import dequantize_activation_grouped, quantize_activation_grouped

    _, _, q, s, b, _ = _operands(M, N, K, M + N + 1, bias, fp8)
    torch.manual_seed(M + K)
    x = torch.randn(M, K, device="cuda") * torch.rand(1, K, device="cuda") * 4  # groups of unlike ranges
    for group, cfgs in ((64, (None, dict(STAGES=3, PROGRAMS=3), dict(BLOCK_K=128, STAGES=6),
                               dict(BLOCK_K=128, STAGES=2, PROGRAMS=3))), (128, (None, dict(STAGES=2, PROGRAMS=3)))):
        xq, xs = quantize_activation_grouped(x, "float8_e4m3" if fp8 else "int8", group)
        ref = linear_ref(dequantize_activation_grouped(xq, xs, group), q, s, b, act)
        for cfg in cfgs:
            out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)  # poisoned
            y = w8a8_ws(xq.contiguous(), xs.t().contiguous(), q, s, b, act, config=cfg, out=out, group=group)
            assert y.data_ptr() == out.data_ptr() and not torch.isnan(y).any()
            assert sqnr(ref, y.float()) > 40, (group, cfg)


@pytest.mark.cuda
@sm90
@pytest.mark.parametrize("M,H,K", [(1, 64, 64), (17, 208, 528), (300, 1000, 4096)])
@pytest.mark.parametrize("gated,act,bias,fp8", [(True, "silu", False, True), (True, "gelu_tanh", True, True),
                                                (False, "relu", True, True), (True, "silu", False, False),
                                                (False, "gelu", True, False)])
def test_ws_quant_out_matches_reference_cuda(M, H, K, gated, act, bias, fp8):
    """quant_out: y quantized in the epilogue per token and 64 outputs (H % 64 gives a partial last group) against
    lowbit.quantize_activation_grouped of the fp32 reference: the scales within the products' rounding (e4m3
    products accumulate with Hopper's fast accumulation: ~40 dB from the fp32 product), the dequantized h as close to
    the reference as the reference's own quantization, less that rounding (1.5 dB e4m3, 3 dB int8, whose own
    quantization is finer); both tile forms, groups of 64 and of 128 (gated: the COOP consumers trade absmaxes; a
    program walking several tiles, PROGRAMS=3, reuses the trade's slots). A wrong group, token or scale layout costs
    tens of dB."""
    from fused.kernels.w8a8_ws import w8a8_ws
    from lowbit import dequantize_activation_grouped, quantize_activation_grouped

    xq, xs, q, s, b, xf = _operands(M, 2 * H if gated else H, K, M + H + 3, bias, fp8)
    ref = (gated_ref if gated else linear_ref)(xf, q, s, b, act)
    for group in (64, 128):
        rq, rs = quantize_activation_grouped(ref, "float8_e4m3" if fp8 else "int8", group)
        floor = sqnr(ref, dequantize_activation_grouped(rq, rs, group))
        for cfg in ((None, dict(COOP=True), dict(COOP=True, PROGRAMS=3)) if group == 64 or not gated else
                    (dict(COOP=True), dict(COOP=True, PROGRAMS=3))):
            hq, hs = w8a8_ws(xq, xs, q, s, b, act, gated, config=cfg, quant_out=True, group=group)
            assert hq.dtype == q.dtype and hq.shape == (M, H) and hs.shape == (-(-H // group), M)
            assert torch.isfinite(hs).all() and torch.allclose(hs.t(), rs, rtol=3e-2, atol=1e-12), (group, cfg)
            assert sqnr(ref, dequantize_activation_grouped(hq, hs.t(), group)) > floor - (1.5 if fp8 else 3), \
                (group, cfg)


@pytest.mark.cuda
@sm90
@pytest.mark.parametrize("gated,act,fp8,form", [(True, "silu", True, "grouped"), (False, "gelu_tanh", True, "grouped"),
                                                (True, "silu", False, "grouped_k128"),
                                                (True, "silu", True, "grouped_k128"),
                                                (True, "silu", True, "grouped_g128"),
                                                (False, "gelu_tanh", False, "grouped_g128")])
def test_grouped_block_cuda(monkeypatch, gated, act, fp8, form):
    """The W8A8 block with h handed over in groups (dispatch._GROUPED_ENV, its route forced): against the reference with
    h quantized the same way, and no further from the block with h unquantized than the per-token hand-off (the
    route forced the other way); the stats name both."""
    from fused import dispatch
    from lowbit import dequantize_activation_grouped, quantize_activation_grouped

    monkeypatch.setattr(dispatch, "W8A8_GROUPED", True)
    M, D = 300, 520
    x, q1, s1, q2, s2 = _block_operands(M, 1008, D, gated, fp8, seed=5)
    b2 = torch.randn(D, device="cuda", dtype=torch.bfloat16)
    key = dispatch._grouped_key(x, q1, None, act, q2, b2)
    monkeypatch.setitem(dispatch._dense_routes, key, (form, form))
    dispatch.stats.clear()
    y = dispatch.mlp_block(x, q1, s1, None, q2, s2, b2, act, gated, dynamic=True)
    assert dispatch.stats[("gated" if gated else "linear", dispatch.GROUPED_PATHS[0])] == 1
    assert dispatch.stats[("linear", dispatch.GROUPED_PATHS[1])] == 1
    h = (gated_ref if gated else linear_ref)(x.float(), q1, s1, None, act, dynamic=True)
    group = dispatch.GROUPED_FORMS[form][0]
    hq, hs = quantize_activation_grouped(h, "float8_e4m3" if fp8 else "int8", group)
    ref = linear_ref(dequantize_activation_grouped(hq, hs, group), q2, s2, b2)
    assert y.shape == (M, D) and y.dtype == x.dtype and sqnr(ref, y.float()) > 30
    h_exact = linear_ref(h, q2, s2, b2)  # h neither rounded nor quantized
    monkeypatch.setitem(dispatch._dense_routes, key, ("triton", "triton"))  # the per-token hand-off
    dispatch.stats.clear()
    y_tok = dispatch.mlp_block(x, q1, s1, None, q2, s2, b2, act, gated, dynamic=True)
    assert not any(path in dispatch.GROUPED_PATHS for _, path in dispatch.stats)
    assert sqnr(h_exact, y.float()) > sqnr(h_exact, y_tok.float()) - 0.5
