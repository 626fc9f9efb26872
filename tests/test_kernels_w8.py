"""The 8-bit kernels (split-K GEMV, tiled GEMM W8A16/W8A8, activation quantization) vs the reference.

On the CPU they run in Triton's interpreter (tiny odd shapes); the `cuda` copies run on the H200 with
real shapes. Outputs are poisoned with NaN first so an unwritten element fails the SQNR check.
"""
import pytest
import torch

from fused.reference import gated_ref, linear_ref
from lowbit import quantize_activation, quantize_weight, sqnr

ACTS = ["none", "relu", "gelu", "gelu_tanh", "silu"]
FMTS = ["int8", "float8_e4m3"]


def _min_db(dtype):
    return {torch.bfloat16: 40.0, torch.float16: 50.0, torch.float32: 90.0}[dtype]


def _case(M, N, K, fmt, gated, bias, dtype, device, view):
    R = 2 * N if gated else N
    w = torch.randn(R, K, device=device)
    q, s = quantize_weight(w, fmt)
    b = torch.randn(R, device=device) if bias else None
    if view == "transposed":
        x = torch.randn(K, M, device=device, dtype=dtype).t()
    elif view == "3d_offset":
        x = torch.randn(1, M + 1, K + 3, device=device, dtype=dtype)[0, 1:, 3:]
    else:
        x = torch.randn(M, K, device=device, dtype=dtype)
    return x, q, s, b


def _poisoned_empty(monkeypatch):
    """Every torch.empty float tensor starts as NaN: an output element the kernel never writes fails SQNR."""
    real = torch.empty

    def empty(*a, **k):
        t = real(*a, **k)
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t
    monkeypatch.setattr(torch, "empty", empty)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("gated", [False, True])
def test_gemv_interpreted(fmt, act, gated, monkeypatch):
    from fused.kernels.w8a16_gemv import w8a16_gemv

    _poisoned_empty(monkeypatch)
    for M, N, K, bias, dtype, view in [(1, 37, 50, True, torch.bfloat16, "plain"),
                                       (3, 20, 70, False, torch.float32, "transposed"),
                                       (16, 9, 130, True, torch.float16, "3d_offset")]:
        x, q, s, b = _case(M, N, K, fmt, gated, bias, dtype, "cpu", view)
        y = w8a16_gemv(x, q, s, b, act, gated)
        ref = (gated_ref if gated else linear_ref)(x, q, s, b, act)
        assert y.shape == ref.shape and y.dtype == dtype
        assert sqnr(ref, y) > _min_db(dtype), (M, N, K, dtype, view)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("gated", [False, True])
def test_gemv_32_row_tile_interpreted(fmt, gated, monkeypatch):
    """17 <= M <= 64: the GEMV's 32- and 64-row tiles (dispatch.GEMV_MAX_M=32 or 64, opt-in), and the dispatch
    taking it there for dense ops (W8A8 configs too) while 2:4 ops keep their GEMV at M <= 16."""
    from fused import dispatch
    from fused.kernels.w8a16_gemv import _candidates, w8a16_gemv

    _poisoned_empty(monkeypatch)
    for M, N, K, bias, dtype, view, act in [(17, 37, 50, True, torch.bfloat16, "plain", "silu"),
                                            (32, 20, 70, False, torch.float16, "3d_offset", "gelu_tanh"),
                                            (24, 9, 130, True, torch.float32, "transposed", "relu"),
                                            (48, 21, 40, True, torch.bfloat16, "plain", "gelu")]:
        x, q, s, b = _case(M, N, K, fmt, gated, bias, dtype, "cpu", view)
        y = w8a16_gemv(x, q, s, b, act, gated)
        ref = (gated_ref if gated else linear_ref)(x, q, s, b, act)
        assert y.shape == ref.shape and y.dtype == dtype
        assert sqnr(ref, y) > _min_db(dtype), (M, N, K, dtype, view)
    assert all(c["BLOCK_M"] == 32 for c in _candidates(17, 4096, 14336, gated))
    assert all(c["BLOCK_M"] == 64 for c in _candidates(33, 4096, 14336, gated))
    with pytest.raises(AssertionError):
        w8a16_gemv(torch.randn(65, 50), *_case(1, 37, 50, fmt, gated, False, torch.float32, "cpu", "plain")[1:3])
    monkeypatch.setattr(dispatch, "GEMV_MAX_M", 32)
    monkeypatch.setattr(dispatch, "A8_GEMV_MAX_M", 32)
    monkeypatch.setattr(dispatch, "SPLIT_MIN_M", 33)  # as dispatch.GEMV_MAX_M = 32 sets it at import
    op = "gated" if gated else "linear"
    for dyn in (False, True):
        assert dispatch.plan(op, fmt, dyn, "cuda", M=32)[0] == "triton:w8a16_gemv"
        assert dispatch.plan(op, fmt, dyn, "cuda", M=33)[0] != "triton:w8a16_gemv"
        assert dispatch.plan("sparse24_" + op, fmt, dyn, "cuda", M=17)[0] == "triton:sparse24_linear"
    with dispatch.force_path("triton"):
        x, q, s, b = _case(20, 37, 50, fmt, gated, True, torch.bfloat16, "cpu", "plain")
        dispatch.stats.clear()
        y = (dispatch.gated if gated else dispatch.linear)(x, q, s, b, "silu")
        assert dispatch.stats[(op, "triton:w8a16_gemv")] == 1
        assert sqnr((gated_ref if gated else linear_ref)(x, q, s, b, "silu"), y) > _min_db(torch.bfloat16)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("a8", [False, True])
@pytest.mark.parametrize("gated", [False, True])
def test_gemm_interpreted(fmt, a8, gated, monkeypatch):
    from fused.kernels.act_quant import act_quant
    from fused.kernels.w8_gemm import w8_gemm

    _poisoned_empty(monkeypatch)
    for (M, N, K, bias, dtype, view), act in zip([(17, 37, 50, True, torch.bfloat16, "plain"),
                                                  (33, 20, 70, False, torch.float32, "transposed"),
                                                  (19, 9, 40, True, torch.float16, "3d_offset")],
                                                 ["gelu", "silu", "gelu_tanh"]):
        x, q, s, b = _case(M, N, K, fmt, gated, bias, dtype, "cpu", view)
        if a8:
            xq, xs = act_quant(x, fp8=fmt != "int8")
            y = w8_gemm(xq, q, s, b, act, gated, x_scale=xs, out_dtype=dtype)
        else:
            y = w8_gemm(x, q, s, b, act, gated)
        ref = (gated_ref if gated else linear_ref)(x, q, s, b, act, dynamic=a8)
        assert y.shape == ref.shape and y.dtype == dtype
        assert sqnr(ref, y) > _min_db(dtype) - (10 if a8 and dtype == torch.float32 else 0), (M, N, K, dtype, view)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("a8", [False, True])
@pytest.mark.parametrize("gated", [False, True])
def test_gemm_split_k(fmt, a8, gated, monkeypatch):
    """Split-K tiles (down projections at moderate M): partials summed in fixed order by the last program
    (int32 partials carried bit-exact for int8 W8A8); counters left at zero, so a second call agrees."""
    from fused.kernels.act_quant import act_quant
    from fused.kernels.w8_gemm import w8_gemm

    _poisoned_empty(monkeypatch)
    for K, split in ((200, 2), (256, 3)):  # K % BLOCK_K != 0 (masked K loop) and == 0 (EVEN_K)
        x, q, s, b = _case(19, 21, K, fmt, gated, True, torch.bfloat16, "cpu", "plain")
        ref = (gated_ref if gated else linear_ref)(x, q, s, b, "silu", dynamic=a8)
        cfg = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=4, num_stages=1, num_warps=4, SPLIT_K=split)
        ys = []
        for _ in range(2):
            if a8:
                xq, xs = act_quant(x, fp8=fmt != "int8")
                ys.append(w8_gemm(xq, q, s, b, "silu", gated, x_scale=xs, out_dtype=x.dtype, config=cfg))
            else:
                ys.append(w8_gemm(x, q, s, b, "silu", gated, config=cfg))
        assert torch.equal(ys[0], ys[1])
        assert sqnr(ref, ys[0]) > _min_db(torch.bfloat16), (K, split)


@pytest.mark.parametrize("fmt", FMTS)
def test_act_quant_bit_exact(fmt):
    from fused.kernels.act_quant import act_quant

    x = torch.randn(7, 300) * torch.logspace(-3, 3, 7)[:, None]
    x[2] = 0.0  # zero row: finite scale, zeros out
    x[4, 5] = float("nan")
    q, s = act_quant(x, fp8=fmt != "int8")
    rq, rs = quantize_activation(x, fmt)
    ok = torch.arange(7) != 4
    assert torch.equal(q[ok].float(), rq[ok].float())
    assert torch.equal(s[ok], rs[ok, 0])
    assert torch.isnan(s[4])
    assert torch.all(q[2].float() == 0)


def _poison_empty(monkeypatch, module):
    """``module.empty`` (the kernels' output allocator) fills what it makes with junk: an element the kernel
    does not write fails the test."""
    real = module.empty

    def poisoned(*a, **k):
        t = real(*a, **k)
        (t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t).fill_(0x55 if t.dtype != torch.float32 else 7)
        return t
    monkeypatch.setattr(module, "empty", poisoned)


def _act_quant_padded(fmt, K, device, monkeypatch):
    """rows > M: the first M rows as without padding, the rest zeros (over a poisoned buffer)."""
    from fused.kernels import act_quant as aq

    _poison_empty(monkeypatch, aq)
    x = (torch.randn(5, K, device=device) * torch.logspace(-2, 2, 5, device=device)[:, None]).bfloat16()[:, ::1]
    xt = torch.randn(K, 5, device=device).bfloat16().t()  # a transposed view: strided rows
    for inp in (x, xt):
        q, s = aq.act_quant(inp, fp8=fmt != "int8", rows=32)
        rq, rs = quantize_activation(inp, fmt)
        assert q.shape == (32, K) and s.shape == (5,)
        assert torch.equal(q[:5].float(), rq.float()) and torch.equal(s, rs[:, 0])
        assert torch.all(q[5:].view(torch.uint8) == 0)
    with pytest.raises(ValueError, match="below"):
        aq.act_quant(x, fp8=fmt != "int8", rows=4)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("K", [300, 20000])  # one pass, two passes
def test_act_quant_padded_rows(fmt, K, monkeypatch):
    _act_quant_padded(fmt, K, "cpu", monkeypatch)


@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("K", [300, 20000])
def test_act_split_padded_rows(fp8, K, monkeypatch):
    """rows > M: both planes' first M rows as without padding, the rest zeros (over a poisoned buffer)."""
    from fused.kernels import act_split as sp

    _poison_empty(monkeypatch, sp)
    x = (torch.randn(5, K) * torch.logspace(-2, 2, 5)[:, None]).bfloat16()
    x[3, 1] = float("inf")
    q0, s0 = sp.act_split(x, fp8=fp8)
    q, s = sp.act_split(x, fp8=fp8, rows=16)
    assert q.shape == (2, 16, K) and s.shape == (5,)
    assert torch.equal(q[:, :5].view(torch.uint8), q0.view(torch.uint8))
    torch.testing.assert_close(s, s0, rtol=0, atol=0, equal_nan=True)  # row 3 (an Inf): NaN in both
    assert torch.all(q[:, 5:].view(torch.uint8) == 0)
    with pytest.raises(ValueError, match="below"):
        sp.act_split(x, fp8=fp8, rows=4)


@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("K", [70, 300])  # one pass; two (MAX_ONE_PASS 64)
def test_act_split_interleaved_is_the_reference(fp8, K, monkeypatch):
    """interleave=True (w8a8_ws's x_split operand): row 2t token t's hi plane, 2t + 1 its lo, bit-equal to lowbit's
    reference on a column-offset view, padding rows zero, over a poisoned buffer."""
    from fused.kernels import act_quant
    from fused.kernels import act_split as sp
    from lowbit.quant import split_activation, split_activation_fp8

    _poison_empty(monkeypatch, sp)
    if K > 100:
        monkeypatch.setattr(act_quant, "MAX_ONE_PASS", 64)
        monkeypatch.setattr(sp, "MAX_ONE_PASS", 64)
    x = (torch.randn(5, K + 3) * torch.logspace(-2, 1, K + 3))[:, 3:].to(torch.bfloat16) * 10
    x[1, 5] = float("inf")
    q, s = sp.act_split(x, fp8=fp8, rows=7, interleave=True)
    hi, lo, rs = (split_activation_fp8 if fp8 else split_activation)(x)
    assert q.shape == (14, K) and q.dtype == (torch.float8_e4m3fn if fp8 else torch.int8)
    bits = q.view(torch.uint8)
    assert torch.equal(bits[0:10:2], hi.view(torch.uint8)) and torch.equal(bits[1:10:2], lo.view(torch.uint8))
    assert torch.all(bits[10:] == 0)
    assert torch.equal(s[[0, 2, 3, 4]], rs[[0, 2, 3, 4], 0]) and torch.isnan(s[1])


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
def test_act_quant_padded_rows_cuda(fmt, monkeypatch):
    for K in (300, 14336, 20000):
        _act_quant_padded(fmt, K, "cuda", monkeypatch)


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("K", [300, 4096, 14336, 20000])
def test_act_quant_bit_exact_cuda(fmt, K):
    """On the GPU the fp8 cast is the hardware's round-to-nearest-even: still bit-identical."""
    from fused.kernels.act_quant import act_quant

    x = (torch.randn(33, K, device="cuda") * torch.logspace(-3, 3, 33, device="cuda")[:, None]).bfloat16()
    x[3] = 0.0
    x[5, 7] = float("nan")
    q, s = act_quant(x, fp8=fmt != "int8")
    rq, rs = quantize_activation(x, fmt)
    ok = torch.arange(33, device="cuda") != 5
    assert torch.equal(q[ok].float(), rq[ok].float())
    assert torch.equal(s[ok], rs[ok, 0])
    assert torch.isnan(s[5]) and torch.all(q[3].float() == 0)


def test_gemv_split_counter_reset():
    """The split-K counters are reset by the kernel: repeated calls give identical results."""
    from fused.kernels.w8a16_gemv import w8a16_gemv

    x, q, s, b = _case(2, 24, 200, "int8", True, True, torch.float32, "cpu", "plain")
    cfg = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, SPLIT_K=4, num_warps=4)
    y1 = w8a16_gemv(x, q, s, b, "silu", True, config=cfg)
    y2 = w8a16_gemv(x, q, s, b, "silu", True, config=cfg)
    assert torch.equal(y1, y2)
    assert sqnr(gated_ref(x, q, s, b, "silu"), y1) > 90


def _pair_case(M, H, K, fmt, bias, dtype, device, view):
    """Gate and up projections in separate tensors; the up weight a strided view (row stride K + 5) so the
    kernels' separate up strides are exercised."""
    x, wg, sg, bg = _case(M, H, K, fmt, False, bias, dtype, device, view)
    q, su = quantize_weight(torch.randn(H, K, device=device), fmt)
    buf = torch.zeros(H, K + 5, device=device, dtype=torch.uint8)
    buf[:, :K] = q.view(torch.uint8)
    wu = buf.view(q.dtype)[:, :K]
    bu = torch.randn(H, device=device) if bias else None
    return x, (wg, sg, bg), (wu, su, bu)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("act", ["none", "gelu", "silu"])
def test_gemv_separate_up_interpreted(fmt, act, monkeypatch):
    """Gated GEMV with the up projection in tensors of its own (fusedmlp::gated_pair) vs the reference."""
    from fused.kernels.w8a16_gemv import w8a16_gemv
    from fused.reference import gated_pair_ref

    _poisoned_empty(monkeypatch)
    for M, H, K, bias, dtype, view in [(1, 37, 50, True, torch.bfloat16, "plain"),
                                       (3, 20, 70, False, torch.float32, "transposed"),
                                       (16, 9, 130, True, torch.float16, "3d_offset")]:
        x, g, u = _pair_case(M, H, K, fmt, bias, dtype, "cpu", view)
        assert not u[0].is_contiguous()
        y = w8a16_gemv(x, *g, act, True, up=u)
        ref = gated_pair_ref(x, *g, *u, act)
        assert y.shape == ref.shape == (M, H) and y.dtype == dtype
        assert sqnr(ref, y) > _min_db(dtype), (M, H, K, dtype, view)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("a8", [False, True])
def test_gemm_separate_up_interpreted(fmt, a8, monkeypatch):
    from fused.kernels.act_quant import act_quant
    from fused.kernels.w8_gemm import w8_gemm
    from fused.reference import gated_pair_ref

    _poisoned_empty(monkeypatch)
    for (M, H, K, bias, dtype, view), act in zip([(17, 37, 50, True, torch.bfloat16, "plain"),
                                                  (33, 20, 70, False, torch.float32, "transposed"),
                                                  (19, 9, 40, True, torch.float16, "3d_offset")],
                                                 ["gelu", "silu", "gelu_tanh"]):
        x, g, u = _pair_case(M, H, K, fmt, bias, dtype, "cpu", view)
        if a8:
            xq, xs = act_quant(x, fp8=fmt != "int8")
            y = w8_gemm(xq, *g, act, True, x_scale=xs, out_dtype=dtype, up=u)
        else:
            y = w8_gemm(x, *g, act, True, up=u)
        ref = gated_pair_ref(x, *g, *u, act, dynamic=a8)
        assert y.shape == ref.shape == (M, H) and y.dtype == dtype
        assert sqnr(ref, y) > _min_db(dtype) - (10 if a8 and dtype == torch.float32 else 0), (M, H, K, dtype, view)


def test_separate_up_split_k_and_bad_input():
    """Split-K with separate up weights (GEMV and GEMM); mismatched gate/up tensors are refused."""
    from fused.kernels.w8_gemm import w8_gemm
    from fused.kernels.w8a16_gemv import w8a16_gemv
    from fused.reference import gated_pair_ref

    for M in (2, 19):
        x, g, u = _pair_case(M, 24, 200, "int8", True, torch.float32, "cpu", "plain")
        if M <= 16:
            cfg = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, SPLIT_K=4, num_warps=4)
            y1, y2 = (w8a16_gemv(x, *g, "silu", True, config=cfg, up=u) for _ in range(2))
        else:
            cfg = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=4, num_stages=1, num_warps=4, SPLIT_K=3)
            y1, y2 = (w8_gemm(x, *g, "silu", True, config=cfg, up=u) for _ in range(2))
        assert torch.equal(y1, y2)
        assert sqnr(gated_pair_ref(x, *g, *u, "silu"), y1) > 90
    x, g, u = _pair_case(2, 24, 64, "int8", True, torch.float32, "cpu", "plain")
    with pytest.raises(ValueError, match="both have a bias"):
        w8a16_gemv(x, *g, "silu", True, up=(u[0], u[1], None))
    with pytest.raises(ValueError, match="gate and up weights differ"):
        w8_gemm(x, *g, "silu", True, up=(u[0][:20], u[1][:20], u[2][:20]))
    with pytest.raises(ValueError, match="non-gated"):
        w8a16_gemv(x, *g, "silu", False, up=u)


# ------------------------------------------------------------------------------------------ on the GPU

@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("M", [1, 3, 16, 17, 300, 5000])
def test_dispatch_cuda(fmt, dynamic, gated, M, monkeypatch):
    from fused import dispatch

    _poisoned_empty(monkeypatch)
    N, K = (1000, 4100) if not gated else (700, 2056)
    for act, bias, view in [("silu", False, "plain"), ("gelu_tanh", True, "transposed")]:
        x, q, s, b = _case(M, N, K, fmt, gated, bias, torch.bfloat16, "cuda", view)
        x = x.reshape(1, M, K) if view == "plain" else x
        fn = dispatch.gated if gated else dispatch.linear
        y = fn(x, q, s, b, act, dynamic)
        # at M <= GEMV_MAX_M the weight-only kernel runs for W8A8 configs too
        ref_dynamic = dynamic and M > dispatch.GEMV_MAX_M
        ref = (gated_ref if gated else linear_ref)(x, q, s, b, act, dynamic=ref_dynamic)
        assert y.shape == ref.shape
        assert sqnr(ref, y) > 38, (M, act, view)


def test_int8_prmt_widening_emulated():
    """The PTX of epilogue.int8_to_f32_prmt, emulated on every int8 value: xor 0x80, prmt.b32 with PRMT_SEL
    against the 0x64 bytes, sub.rn.f16x2 of F16_BIAS, cvt to fp32 gives the weight exactly, in element order."""
    import numpy as np

    from fused.kernels.epilogue import _PRMT_ASM, F16_BIAS, PRMT_SEL

    def prmt(a, b, sel):  # PTX prmt.b32 default mode: result byte i = byte (sel >> 4i) & 7 of {b, a}
        src = [(a >> 8 * i) & 0xFF for i in range(4)] + [(b >> 8 * i) & 0xFF for i in range(4)]
        return sum(src[(sel >> 4 * i) & 7] << 8 * i for i in range(4))

    def f16x2(word):
        return np.array([word & 0xFFFF, word >> 16], dtype=np.uint16).view(np.float16)

    w = np.arange(-128, 128, dtype=np.int8).reshape(-1, 4)
    for row in w:
        reg = int(row.view(np.uint32)[0])  # element i in byte i, as Triton packs 8-bit inputs
        t = reg ^ 0x80808080
        got = []
        for sel in PRMT_SEL:
            pair = f16x2(prmt(t, 0x64646464, sel)) - np.float16(f16x2(F16_BIAS | F16_BIAS << 16)[0])
            got += [float(v) for v in pair.astype(np.float32)]
        assert got == [float(v) for v in row], (row, got)
    assert np.float16(1152.0).view(np.uint16) == F16_BIAS
    text = _PRMT_ASM.value
    assert all(f"{sel:#06x}" in text for sel in PRMT_SEL) and f"{F16_BIAS << 16 | F16_BIAS:#010x}" in text


def test_gemv_prmt_config_interpreted(monkeypatch):
    """CVT="prmt" (inline PTX) is offered for int8 weights at BLOCK_M=1 only (unless w8a16_gemv.PRMT = False); the
    interpreter runs it as "magic", the same exact widening: equal bits."""
    from fused.kernels import w8a16_gemv as gv
    from fused.kernels.w8a16_gemv import _candidates, w8a16_gemv

    _poisoned_empty(monkeypatch)
    monkeypatch.setattr(gv, "PRMT", False)
    assert not any(c["CVT"] == "prmt" for c in _candidates(1, 4096, 14336, True, int8=True))
    monkeypatch.setattr(gv, "PRMT", True)
    assert {c["CVT"] for c in _candidates(1, 4096, 14336, True, int8=True) if c["BLOCK_M"] == 1} == {
        "magic", "native", "prmt"}
    assert not any(c["CVT"] == "prmt" for c in _candidates(1, 4096, 14336, True, int8=False))
    assert not any(c["CVT"] == "prmt" for c in _candidates(16, 4096, 14336, True, int8=True))
    x, q, s, b = _case(1, 37, 200, "int8", True, True, torch.bfloat16, "cpu", "plain")
    base = dict(BLOCK_M=1, BLOCK_N=16, BLOCK_K=64, SPLIT_K=2, num_warps=4, CVT="magic")
    want = w8a16_gemv(x, q, s, b, "silu", True, config=base)
    assert torch.equal(want, w8a16_gemv(x, q, s, b, "silu", True, config=dict(base, CVT="prmt")))


def test_gemv_pfd_config_interpreted(monkeypatch):
    """PFD (in-loop L2 prefetch, inline PTX: nothing under the interpreter) is offered at BLOCK_M=1 only (unless
    w8a16_gemv.PFD_CANDIDATES = False) and leaves the result's bits alone."""
    from fused.kernels import w8a16_gemv as gv
    from fused.kernels.w8a16_gemv import _candidates, w8a16_gemv

    _poisoned_empty(monkeypatch)
    monkeypatch.setattr(gv, "PFD_CANDIDATES", False)
    assert not any(c.get("PFD") for c in _candidates(1, 4096, 14336, True, int8=True))
    monkeypatch.setattr(gv, "PFD_CANDIDATES", True)
    assert {c.get("PFD") for c in _candidates(1, 4096, 14336, False, int8=False)} >= {1, 2}
    assert not any(c.get("PFD") for c in _candidates(16, 4096, 14336, True, int8=True))
    for fmt, gated in (("int8", True), ("float8_e4m3", False)):
        x, q, s, b = _case(1, 37, 300, fmt, gated, True, torch.bfloat16, "cpu", "plain")
        base = dict(BLOCK_M=1, BLOCK_N=16, BLOCK_K=128, SPLIT_K=2, num_warps=4, CVT="magic")
        want = w8a16_gemv(x, q, s, b, "silu" if gated else "none", gated, config=base)
        got = w8a16_gemv(x, q, s, b, "silu" if gated else "none", gated, config=dict(base, PFD=1))
        assert torch.equal(want, got), fmt


def test_gemv_fine_candidates_interpreted(monkeypatch):
    """The finer items (16-row tiles or the split doubled) are offered at BLOCK_M=1 (unless w8a16_gemv.FINE_CANDIDATES = False) and
    at BLOCK_M=16 with w8a16_gemv.FINE16 = True, never split K below a tile, and their tag does not reach the kernel."""
    from fused.kernels import w8a16_gemv as gv
    from fused.kernels.w8a16_gemv import _candidates, w8a16_gemv

    _poisoned_empty(monkeypatch)
    monkeypatch.setattr(gv, "FINE_CANDIDATES", False)
    assert not any(c.get("FINE") for c in _candidates(1, 14336, 4096, True, int8=True))
    monkeypatch.setattr(gv, "FINE_CANDIDATES", True)
    fine = [c for c in _candidates(1, 14336, 4096, True, int8=True) if c.get("FINE")]
    assert {(c["BLOCK_N"], c["SPLIT_K"]) for c in fine} >= {(16, 1), (32, 2)}
    assert all(4096 // c["SPLIT_K"] >= c["BLOCK_K"] for c in fine)
    assert not any(c.get("FINE") for c in _candidates(16, 14336, 4096, True, int8=True))
    monkeypatch.setattr(gv, "FINE16", True)
    assert {c["BLOCK_M"] for c in _candidates(16, 14336, 4096, True, int8=True) if c.get("FINE")} == {16}
    assert not any(c.get("FINE") for c in _candidates(17, 14336, 4096, True, int8=True))
    for M in (1, 13):
        x, q, s, b = _case(M, 37, 300, "int8", True, True, torch.bfloat16, "cpu", "plain")
        cfg = dict(BLOCK_M=1 if M == 1 else 16, BLOCK_N=16, BLOCK_K=64, SPLIT_K=4, num_warps=4, CVT="magic", FINE=True)
        y = w8a16_gemv(x, q, s, b, "silu", True, config=cfg)
        assert sqnr(gated_ref(x, q, s, b, "silu"), y) > _min_db(torch.bfloat16)


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
def test_gemv_fine_candidates_cuda(fmt):
    """On the GPU: every finer candidate (M = 1 and 16) on the Llama shapes (gate/up and down) matches the
    reference."""
    from fused.kernels.w8a16_gemv import _fine_candidates, w8a16_gemv

    for M, gated, (N, K) in ((1, True, (14336, 4096)), (1, False, (4096, 14336)), (16, True, (14336, 4096)),
                             (11, False, (4096, 14336))):
        x, q, s, b = _case(M, N, K, fmt, gated, False, torch.bfloat16, "cuda", "plain")
        act = "silu" if gated else "none"
        ref = (gated_ref if gated else linear_ref)(x, q, s, b, act)
        for cfg in _fine_candidates(1 if M == 1 else 16, N, K, "prmt" if fmt == "int8" and M == 1 else "magic"):
            got = w8a16_gemv(x, q, s, b, act, gated, config=cfg, out=torch.full_like(ref, float("nan")))
            assert sqnr(ref, got) > 40, (fmt, gated, cfg)


def _sm90_last_line(code: str) -> str:
    """The last line printed by ``code`` run in a process without TRITON_INTERPRET (the sm_90 compiles of tests/
    gemv_sass.py and sparse_sass.py need Triton's real compiler; ptxas comes with the wheel)."""
    import os
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(root)
    code = "import sys; sys.path[:0] = ['tests']\n" + code
    run = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    if run.returncode != 0 and "ptxas" in run.stderr and "not found" in run.stderr:
        pytest.skip("no ptxas in this Triton")
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout.strip().splitlines()[-1]


def test_gemv_prmt_compiles_for_sm90():
    """The inline PTX assembles (ptxas, no GPU needed) inside the gated M=1 GEMV, and is there."""
    code = ("from gemv_sass import compile_gemv; "
            "k = compile_gemv(dict(BLOCK_M=1, BLOCK_N=32, BLOCK_K=512, SPLIT_K=1, num_warps=4, CVT='prmt')); "
            "p = k.asm['ptx']; print('PRMT' if 'prmt.b32' in p and 'sub.rn.f16x2' in p else 'MISSING')")
    assert _sm90_last_line(code) == "PRMT"


def test_staged_gemvs_compile_for_sm90():
    """The pipelined (STAGES) decode loops, dense and 2:4, compile for sm_90 (ptxas, no GPU) with their loads as
    cp.async copies into shared memory; the plain loops have none (the launch's num_stages leaves them alone)."""
    code = ("from gemv_sass import compile_gemv; from sparse_sass import compile_sparse; out = []\n"
            "for st in (1, 3):\n"
            "    d = compile_gemv(dict(BLOCK_M=1, BLOCK_N=32, BLOCK_K=512, SPLIT_K=1, num_warps=4, STAGES=st))\n"
            "    s = compile_sparse(dict(MODE='vsel', BLOCK_M=1, BLOCK_N=16, BLOCK_K=512, num_warps=4, SPLIT_K=1,"
            " STAGES=st), True, 14336, 4096, tiled=2)\n"
            "    out += ['cp.async' in k.asm['ptx'] for k in (d, s)]\n"
            "print(out)")
    assert _sm90_last_line(code) == "[False, False, True, True]"


def test_sparse_quad_compiles_for_sm90():
    """The 2:4 decode GEMV's "quad" form (inline PTX: PRMT selectors, int8 / e4m3 widening, FMA chain) assembles
    for sm_90 inside the staged gated loop (ptxas, no GPU), with the asm there and no local-memory spills."""
    code = ("from sparse_sass import compile_sparse; out = []\n"
            "for value, mark in (('int8', 'mad.lo.u32'), ('fp8', 'cvt.rn.f16x2.e4m3x2')):\n"
            "    k = compile_sparse(dict(MODE='quad', BLOCK_M=1, BLOCK_N=16, BLOCK_K=512, num_warps=4, SPLIT_K=1,"
            " STAGES=4), True, 14336, 4096, value=value, tiled=2)\n"
            "    p = k.asm['ptx']\n"
            "    out.append('prmt.b32' in p and mark in p and 'ld.local' not in p and 'st.local' not in p)\n"
            "print(out)")
    assert _sm90_last_line(code) == "[True, True]"


def test_sparse_decode_tiles_compile_for_sm90():
    """The 2:4 decode GEMV's M = 2-16 tiles ("dot": the dense-tile expansion and a tensor-core dot) compile for sm_90
    on tiled meta (ptxas, no GPU): the interpreter cannot see a call the real compiler rejects. (Triton 3.6, the
    H200's, rejected a str default for a constexpr that 3.9 takes: every M=16 candidate failed there in the
    nineteenth session; this test catches that only when run with 3.6, e.g. PYTHONPATH to a side install.)"""
    code = ("from sparse_sass import compile_sparse; from fused.kernels.sparse24_gemv import _candidates; out = []\n"
            "for M in (3, 16):\n"
            "    c = [c for c in _candidates(M, 14336, 4096, True) if c['MODE'] == 'dot'][0]\n"
            "    out.append('mma' in compile_sparse(c, True, 14336, 4096, M, tiled=2).asm['ptx'])\n"
            "print(out)")
    assert _sm90_last_line(code) == "[True, True]"


def test_reduce_audit_flags_lanes_that_are_not_adjacent():
    """tests/reduce_audit.py's check on a TTGIR reduce (the twentieth session's wrong 16-row quad tile: a sum over
    axis 1 whose lanes are bits 0 and 4, which Triton 3.6 shuffled as bits 0 and 1) and on a right one."""
    import sys

    sys.path.insert(0, "tests")
    from reduce_audit import bad_reduces
    ir = ('#linear = #ttg.linear<{register = [[8, 0]], lane = [[0, 2], [1, 0], [2, 0], [4, 0], [0, 8]], warp = [], '
          'block = []}>\n#linear1 = #ttg.linear<{register = [], lane = [[0, 1], [0, 2], [1, 0], [2, 0], [4, 0]], '
          'warp = [], block = []}>\n'
          '%a = "tt.reduce"(%x) <{axis = 1 : i32}> ({\n}) : (tensor<16x16xf32, #linear>) -> tensor<16xf32>\n'
          '%b = "tt.reduce"(%y) <{axis = 1 : i32}> ({\n}) : (tensor<16x4xf32, #linear1>) -> tensor<16xf32>\n'
          '%c = "tt.reduce"(%z) <{axis = 0 : i32}> ({\n}) : (tensor<16x16xf32, #linear>) -> tensor<16xf32>\n')
    bad = bad_reduces(ir)
    assert len(bad) == 1 and "lane bits [0, 4]" in bad[0]


def test_quad_tiles_reduce_on_adjacent_lanes_for_sm90():
    """Every M=1 "quad" tile on tiled meta read as contiguous runs (16 and 32 rows) compiles for sm_90 with no reduce
    over non-adjacent lanes (Triton 3.6 gets those wrong: tests/reduce_audit.py)."""
    code = ("from sparse_sass import compile_sparse; from reduce_audit import bad_reduces\n"
            "from fused.kernels import sparse24_gemv as sg\nbad = []\n"
            "for bn in (16, 32):\n"
            "    c = dict(sg._cfg('quad', 1, bn, 512, 4, 4), SPLIT_K=1)\n"
            "    bad += bad_reduces(compile_sparse(c, True, 14336, 4096, tiled=2).asm['ttgir'])\n"
            "print(bad)")
    assert _sm90_last_line(code) == "[]"


def test_sparse_prmt_expansion_compiles_for_sm90():
    """The W8A8 2:4 tiled kernel with EXPAND="prmt" (one PRMT per group, then a pass-through asm packing the word
    into 4 int8 elements) assembles for sm_90, gated, int8 and fp8, with no local-memory spills."""
    code = ("from sm90_compile import compile_sm90\nfrom fused.kernels import sparse24_linear as sl\nout = []\n"
            "for value in ('int8', 'fp8'):\n"
            "    t = '*i8' if value == 'int8' else '*u8'\n"
            "    k = compile_sm90(sl._sparse24_kernel, dict(x_ptr=t, xs_ptr='*fp32', v_ptr=t, m_ptr='*u8',"
            " ws_ptr='*fp32', b_ptr='*fp32', y_ptr='*bf16'), dict(M=128, N=4096, K=4096, stride_xm=4096,"
            " stride_xk=1, stride_vn=2048, stride_mn=512, stride_ym=4096, stride_yn=1), dict(VALUE=value,"
            " DOT=value, GATED=True, HAS_SCALE=True, HAS_BIAS=False, ACT='silu', BLOCK_M=16, BLOCK_N=64,"
            " BLOCK_K=128, GROUP_M=8, TILED=False, EXPAND='prmt'), 4)\n"
            "    p = k['ptx']\n"
            "    out.append('prmt.b32' in p and 'ld.local' not in p and 'st.local' not in p)\n"
            "print(out)")
    assert _sm90_last_line(code) == "[True, True]"


@pytest.mark.cuda
def test_gemv_prmt_candidates_cuda(monkeypatch):
    """On the GPU: every CVT="prmt" GEMV candidate at M=1 (gated and not) gives the same bits as its "magic" twin
    (the same exact weights, the same products and sums), and matches the reference."""
    from fused.kernels import w8a16_gemv as gv
    from fused.kernels.w8a16_gemv import _candidates, w8a16_gemv

    monkeypatch.setattr(gv, "PRMT", True)
    for gated, (N, K) in ((True, (14336, 4096)), (False, (4096, 14336)), (True, (100, 520))):
        x, q, s, b = _case(1, N, K, "int8", gated, True, torch.bfloat16, "cuda", "plain")
        act = "silu" if gated else "gelu_tanh"
        ref = (gated_ref if gated else linear_ref)(x, q, s, b, act)
        for cfg in [c for c in _candidates(1, N, K, gated, int8=True) if c["CVT"] == "prmt"]:
            got = w8a16_gemv(x, q, s, b, act, gated, config=cfg, out=torch.full_like(ref, float("nan")))
            want = w8a16_gemv(x, q, s, b, act, gated, config=dict(cfg, CVT="magic"))
            assert torch.equal(got, want), (gated, N, K, cfg)
            assert sqnr(ref, got) > 45, (gated, N, K, cfg)


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
def test_gemv_staged_candidates_cuda(fmt, monkeypatch):
    """On the GPU: every pipelined (STAGES) GEMV candidate at M=1 gives the same bits as the plain loop with its tile
    at 4 warps (only where the tiles wait changes); at 8 warps the pipelined loop's layout reduces across warps in
    another order (H200: 1-4 of 14336 outputs differ by one rounding step)."""
    from fused.kernels import w8a16_gemv as gv
    from fused.kernels.w8a16_gemv import _candidates, w8a16_gemv

    monkeypatch.setattr(gv, "GEMV_STAGES", True)

    for gated, (N, K) in ((True, (14336, 4096)), (False, (4096, 14336)), (True, (100, 520))):
        x, q, s, b = _case(1, N, K, fmt, gated, True, torch.bfloat16, "cuda", "plain")
        act = "silu" if gated else "gelu_tanh"
        ref = (gated_ref if gated else linear_ref)(x, q, s, b, act)
        staged = [c for c in _candidates(1, N, K, gated, int8=fmt == "int8") if c.get("STAGES", 1) > 1]
        assert staged
        for cfg in staged:
            got = w8a16_gemv(x, q, s, b, act, gated, config=cfg, out=torch.full_like(ref, float("nan")))
            plain = {k: v for k, v in cfg.items() if k != "STAGES"}
            want = w8a16_gemv(x, q, s, b, act, gated, config=plain)
            diff = (gated, N, K, cfg, int((got != want).sum()), sqnr(want, got))
            if cfg["num_warps"] == 4:
                assert torch.equal(got, want), diff
            else:
                # one rounding step of the output dtype at most, in a few outputs (a whole-vector SQNR bound does not
                # fit: one step on a large output alone took it to 80.6 dB on the H200, eighteenth session)
                big = torch.maximum(got.float().abs(), want.float().abs()).clamp_min(1e-30)
                step = torch.finfo(got.dtype).eps * torch.exp2(torch.floor(torch.log2(big)))
                assert (got != want).sum() <= 8 and ((got.float() - want.float()).abs() <= step).all(), diff
            assert sqnr(ref, got) > 45, (gated, N, K, cfg)


@pytest.mark.cuda
def test_gemv_deterministic_cuda():
    from fused.kernels.w8a16_gemv import w8a16_gemv

    x, q, s, b = _case(4, 4096, 14336, "int8", False, False, torch.bfloat16, "cuda", "plain")
    ys = [w8a16_gemv(x, q, s, b, "none", False) for _ in range(5)]
    assert all(torch.equal(ys[0], y) for y in ys[1:])


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
def test_gemv_32_row_tile_cuda(fmt):
    """Every 32- and 64-row GEMV candidate on Llama shapes at M = 17, 32 and 64 against the reference (prepared in
    the eleventh session after its last GPU call; dispatch.GEMV_MAX_M = 32 / 64 routes these M to it)."""
    from fused.kernels.w8a16_gemv import _candidates, w8a16_gemv

    for M in (17, 32, 64):
        for gated, (N, K) in ((True, (14336, 4096)), (False, (4096, 14336))):
            x, q, s, b = _case(M, N, K, fmt, gated, False, torch.bfloat16, "cuda", "plain")
            ref = (gated_ref if gated else linear_ref)(x, q, s, b, "silu" if gated else "none")
            for cfg in _candidates(M, N, K, gated):
                y = w8a16_gemv(x, q, s, b, "silu" if gated else "none", gated, config=cfg,
                               out=torch.full_like(ref, float("nan")))
                assert sqnr(ref, y) > 45, (M, gated, cfg)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_widen_exact(fmt, dtype):
    from fused.kernels.widen import widen

    q, _ = quantize_weight(torch.randn(37, 300) * 3, fmt)
    q[0, :5] = q[0, :5].view(torch.uint8).fill_(0).view(q.dtype)  # zeros
    out = widen(q, dtype)
    assert out.dtype == dtype and torch.equal(out, q.to(dtype))


def test_w8a16_large_m_widens(monkeypatch):
    """From dispatch.WIDEN_MIN_M on, W8A16 widens the weight once and runs the 16-bit tiled kernel:
    same result as the mixed-input kernel, counted under its own path."""
    from fused import dispatch

    monkeypatch.setattr(dispatch, "WIDEN_MIN_M", 20)
    monkeypatch.setattr(dispatch, "SPLIT_MIN_M", 33)  # M=19: the mixed-input kernel, not split activations
    x, q, s, b = _case(23, 19, 40, "int8", True, True, torch.bfloat16, "cpu", "plain")
    dispatch.stats.clear()
    with dispatch.force_path("triton"):
        y = dispatch.gated(x, q, s, b, "silu")
        y_small = dispatch.gated(x[:19], q, s, b, "silu")
    assert dispatch.stats[("gated", "triton:widen+w8_gemm_bf16")] == 1
    assert dispatch.stats[("gated", "triton:w8_gemm_w8a16")] == 1
    assert sqnr(gated_ref(x, q, s, b, "silu"), y) > _min_db(torch.bfloat16)
    assert sqnr(gated_ref(x[:19], q, s, b, "silu"), y_small) > _min_db(torch.bfloat16)
    # the gate / up pair in tensors of their own (what torch.compile's pass makes of two Linears) widens both too
    k = dispatch._triton_kernels()
    widened = []
    monkeypatch.setattr(k, "widen", lambda w, dtype, _real=k.widen: widened.append(w.shape) or _real(w, dtype))
    H = q.shape[0] // 2
    with dispatch.force_path("triton"):
        y_pair = dispatch.gated_pair(x, q[:H], s[:H], b[:H], q[H:], s[H:], b[H:], "silu")
        dispatch.gated_pair(x[:19], q[:H], s[:H], b[:H], q[H:], s[H:], b[H:], "silu")
    assert widened == [(H, 40), (H, 40)] and dispatch.stats[("gated_pair", "triton:widen+w8_gemm_bf16")] == 1
    assert sqnr(gated_ref(x, q, s, b, "silu"), y_pair) > _min_db(torch.bfloat16)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("variant", [dict(JOINT=True), dict(PREFETCH=True), dict(JOINT=True, PREFETCH=True),
                                     dict(PERSISTENT=1), dict(PERSISTENT=2, JOINT=True), dict(STAGES=3),
                                     dict(STAGES=3, PERSISTENT=2)])
def test_gemv_loop_variants_interpreted(fmt, variant, monkeypatch):
    """The joint gate/up loop, the prefetching loop and the persistent grid (4 programs on the CPU, fewer than
    the items) add in the same order as the plain loops: equal bits, with and without split-K (the prefetch
    must stop at its split's end), stacked and separate up."""
    from fused.kernels.w8a16_gemv import w8a16_gemv

    _poisoned_empty(monkeypatch)
    for M, bm, split, K in ((1, 1, 1, 70), (1, 1, 3, 200), (3, 16, 2, 130)):
        base = dict(BLOCK_M=bm, BLOCK_N=16, BLOCK_K=32, SPLIT_K=split, num_warps=4, CVT="magic")
        x, q, s, b = _case(M, 21, K, fmt, True, True, torch.float32, "cpu", "plain")
        want = w8a16_gemv(x, q, s, b, "silu", True, config=base)
        got = w8a16_gemv(x, q, s, b, "silu", True, config=dict(base, **variant))
        assert torch.equal(want, got), (M, split, K)
        assert sqnr(gated_ref(x, q, s, b, "silu"), got) > 90
        _, g, u = _pair_case(M, 21, K, fmt, True, torch.float32, "cpu", "plain")
        want = w8a16_gemv(x, *g, "gelu", True, config=base, up=u)
        assert torch.equal(want, w8a16_gemv(x, *g, "gelu", True, config=dict(base, **variant), up=u))
        if not variant.get("JOINT"):
            want = w8a16_gemv(x, q, s, b, "relu", False, config=base)
            assert torch.equal(want, w8a16_gemv(x, q, s, b, "relu", False, config=dict(base, **variant)))


# ------------------------------------------------------------------- split activations (W8A16 via int8 MMA)
def test_split_activation_reference_reconstructs():
    from lowbit.quant import SPLIT_QMAX, split_activation

    x = torch.randn(5, 300) * torch.logspace(-3, 3, 5)[:, None]
    x[2, 7] = float("nan")
    hi, lo, s = split_activation(x)
    v = 256 * hi.int() + lo.int()
    ok = torch.tensor([True, True, False, True, True])
    assert v.abs().max() <= SPLIT_QMAX and torch.isnan(s[2]).all() and not torch.isnan(s[ok]).any()
    assert sqnr(x[ok], (v.float() * s)[ok]) > 85  # 15 bits per token


@pytest.mark.parametrize("K", [70, 300])
def test_act_split_bit_exact(K, monkeypatch):
    from fused.kernels import act_quant
    from fused.kernels.act_split import act_split
    from lowbit.quant import split_activation

    if K > 100:  # the two-pass path
        monkeypatch.setattr(act_quant, "MAX_ONE_PASS", 64)
        import fused.kernels.act_split as mod
        monkeypatch.setattr(mod, "MAX_ONE_PASS", 64)
    x = torch.randn(4, K + 3, dtype=torch.bfloat16)[:, 3:] * 10
    x[1, 5] = float("inf")
    planes, s = act_split(x)
    hi, lo, rs = split_activation(x)
    assert torch.equal(planes[0], hi) and torch.equal(planes[1], lo)
    assert torch.equal(s[[0, 2, 3]], rs[[0, 2, 3], 0]) and torch.isnan(s[1])


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("split", [1, 2])
def test_gemm_split_activations_interpreted(gated, split, monkeypatch):
    """w8_gemm on act_split's planes: W8A16 results (vs the bf16/fp32-activation reference) to ~15 bits."""
    from fused.kernels.act_split import act_split
    from fused.kernels.w8_gemm import w8_gemm

    _poisoned_empty(monkeypatch)
    for M, N, K, dtype, view in ((1, 37, 64, torch.float32, "plain"), (3, 20, 96, torch.bfloat16, "transposed"),
                                 (17, 19, 70, torch.float32, "3d_offset")):
        x, q, s, b = _case(M, N, K, "int8", gated, True, dtype, "cpu", view)
        planes, xs = act_split(x)
        cfg = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=4, num_stages=1, num_warps=4, SPLIT_K=split)
        y = w8_gemm(planes, q, s, b, "silu", gated, x_scale=xs, out_dtype=x.dtype, config=cfg, x_split=True)
        ref = (gated_ref if gated else linear_ref)(x, q, s, b, "silu")
        assert y.shape == ref.shape and y.dtype == dtype
        assert sqnr(ref, y) > (70 if dtype == torch.float32 else 40), (M, dtype)
    with pytest.raises(ValueError, match="planes of the weights' dtype"):
        w8_gemm(planes, *quantize_weight(torch.randn(8, 70), "float8_e4m3"), x_scale=xs, out_dtype=x.dtype,
                x_split=True)
    with pytest.raises(ValueError, match="needs int8 weights"):
        w8_gemm(x, *quantize_weight(torch.randn(8, 70), "float8_e4m3"), quantize_x=True, x_split=True)


def test_dispatch_split_path_interpreted(monkeypatch):
    """With dispatch.SPLIT_MAX_M set, W8A16 int8 calls take split activations: made inside the GEMM at
    M <= SPLIT_QX_MAX_M (one launch), by act_split above; fp32 activations, fp8 weights keep their paths."""
    from fused import dispatch

    monkeypatch.setattr(dispatch, "SPLIT_MAX_M", 64)
    monkeypatch.setattr(dispatch, "SPLIT_QX_MAX_M", 16)
    monkeypatch.setattr(dispatch, "FP8_SPLIT", False)  # fp8's split route: test_dispatch_fp8_split_path
    monkeypatch.setattr(dispatch, "SPLIT_MIN_M", 1)
    dispatch.stats.clear()
    with dispatch.force_path("triton"):
        for M in (3, 20):
            x, q, s, b = _case(M, 24, 64, "int8", True, True, torch.bfloat16, "cpu", "plain")
            y = dispatch.gated(x, q, s, b, "silu")
            assert sqnr(gated_ref(x, q, s, b, "silu"), y) > 40
            _, g, u = _pair_case(M, 24, 64, "int8", True, torch.bfloat16, "cpu", "plain")
            yp = dispatch.gated_pair(x, *g, *u, act="gelu")
            ref = gated_ref(x, torch.cat([g[0], u[0]]), torch.cat([g[1], u[1]]), torch.cat([g[2], u[2]]), "gelu")
            assert sqnr(ref, yp) > 40
        x = x[:3]
        dispatch.linear(x.float(), q, s, b)  # fp32: the GEMV
        dispatch.linear(x, *quantize_weight(torch.randn(8, 64), "float8_e4m3"))  # fp8: the GEMV
    paths = {k: v for k, v in dispatch.stats.items()}
    for op in ("gated", "gated_pair"):
        assert paths[(op, "triton:w8_gemm_split")] == 1 and paths[(op, "triton:act_split+w8_gemm_split")] == 1
    assert paths[("linear", "triton:w8a16_gemv")] == 2


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("split", [1, 2])
def test_gemm_quantize_x_in_kernel_interpreted(fmt, gated, split, monkeypatch):
    """W8A8 with the per-token quantization inside the GEMM: the same bits as act_quant + the GEMM."""
    from fused.kernels.act_quant import act_quant
    from fused.kernels.w8_gemm import w8_gemm

    _poisoned_empty(monkeypatch)
    cfg = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=4, num_stages=1, num_warps=4, SPLIT_K=split)
    for M, N, K, dtype, view in ((1, 37, 64, torch.bfloat16, "plain"), (3, 20, 96, torch.float32, "transposed"),
                                 (17, 19, 70, torch.float16, "3d_offset")):
        x, q, s, b = _case(M, N, K, fmt, gated, True, dtype, "cpu", view)
        if M == 3:
            x[1, 4] = float("nan")
        xq, xs = act_quant(x, fp8=fmt != "int8")
        want = w8_gemm(xq, q, s, b, "gelu", gated, x_scale=xs, out_dtype=dtype, config=cfg)
        got = w8_gemm(x, q, s, b, "gelu", gated, config=cfg, quantize_x=True)
        assert got.dtype == dtype
        assert torch.equal(torch.nan_to_num(want, 1.0), torch.nan_to_num(got, 1.0)), (M, dtype)
        if M == 3:
            assert torch.isnan(got[1]).all() and not torch.isnan(got[[0, 2]]).any()


def test_dispatch_w8a8_small_m_tiled_interpreted(monkeypatch):
    """A8_GEMV_MAX_M=0: W8A8 configs at M <= QX_MAX_M run the tiled GEMM quantizing x inside (one launch),
    above it act_quant + the GEMM; both match the W8A8 reference."""
    from fused import dispatch

    monkeypatch.setattr(dispatch, "A8_GEMV_MAX_M", 0)
    dispatch.stats.clear()
    for M in (1, 17):
        x, q, s, b = _case(M, 24, 64, "int8", True, True, torch.bfloat16, "cpu", "plain")
        with dispatch.force_path("triton"):
            y = dispatch.gated(x, q, s, b, "silu", dynamic=True)
        assert sqnr(gated_ref(x, q, s, b, "silu", dynamic=True), y) > 35, M
    assert dispatch.stats[("gated", "triton:w8_gemm_w8a8_qx")] == 1
    assert dispatch.stats[("gated", "triton:w8_gemm_w8a8")] == 1


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
def test_mma_decode_paths_cuda(fmt):
    """On the GPU: act_split (int8 planes, e4m3 planes for fp8) bit-exact vs lowbit.split_activation(_fp8);
    the split-activation GEMM within bf16 rounding of the W8A16 reference; the in-kernel quantization
    bit-identical to act_quant + GEMM."""
    from fused.kernels.act_quant import act_quant
    from fused.kernels.act_split import act_split
    from fused.kernels.w8_gemm import _candidates, w8_gemm
    from lowbit.quant import split_activation, split_activation_fp8

    for M in (1, 16, 300):
        x, q, s, b = _case(M, 176, 272, fmt, True, True, torch.bfloat16, "cuda", "plain")
        for cfg in _candidates(M, 176, 272, True, True, quantize_x=True)[:3]:
            xq, xs = act_quant(x, fp8=fmt != "int8")
            want = w8_gemm(xq, q, s, b, "silu", True, x_scale=xs, out_dtype=x.dtype, config=cfg)
            got = w8_gemm(x, q, s, b, "silu", True, config=cfg, quantize_x=True)
            assert torch.equal(want, got), (M, cfg)
            fp8 = fmt != "int8"
            planes, ps = act_split(x, fp8=fp8)
            hi, lo, rs = (split_activation_fp8 if fp8 else split_activation)(x)
            bits = (lambda t: t.view(torch.uint8)) if fp8 else (lambda t: t)
            assert torch.equal(bits(planes[0]), bits(hi)) and torch.equal(bits(planes[1]), bits(lo))
            assert torch.equal(ps, rs[:, 0])
            for c in _candidates(M, 176, 272, True, True, True)[:3]:
                y = w8_gemm(planes, q, s, b, "silu", True, x_scale=ps, out_dtype=x.dtype, config=c, x_split=True)
                assert sqnr(gated_ref(x, q, s, b, "silu"), y) > 40, (M, c)


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("split", [1, 2])
def test_gemm_split_inside_interpreted(gated, split, monkeypatch):
    """Split activations made inside the GEMM (quantize_x + x_split): the same bits as act_split + the GEMM."""
    from fused.kernels.act_split import act_split
    from fused.kernels.w8_gemm import w8_gemm

    _poisoned_empty(monkeypatch)
    cfg = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=4, num_stages=1, num_warps=4, SPLIT_K=split)
    for M, N, K, dtype, view in ((1, 37, 64, torch.bfloat16, "plain"), (3, 20, 96, torch.float16, "transposed"),
                                 (17, 19, 70, torch.bfloat16, "3d_offset")):
        x, q, s, b = _case(M, N, K, "int8", gated, True, dtype, "cpu", view)
        if M == 3:
            x[1, 4] = float("inf")
        planes, ps = act_split(x)
        want = w8_gemm(planes, q, s, b, "silu", gated, x_scale=ps, out_dtype=dtype, config=cfg, x_split=True)
        got = w8_gemm(x, q, s, b, "silu", gated, config=cfg, quantize_x=True, x_split=True)
        assert got.dtype == dtype
        assert torch.equal(torch.nan_to_num(want, 1.0), torch.nan_to_num(got, 1.0)), (M, dtype)
        if M == 3:
            assert torch.isnan(got[1]).all() and not torch.isnan(got[[0, 2]]).any()


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("split", [1, 2])
def test_gemm_stacked_planes_interpreted(fmt, gated, split, monkeypatch):
    """STACK configs (both planes' rows in one tile, one dot per weight tile): the same bits as two dots on
    half-height tiles with the same K split, on odd shapes, 3-D / transposed / offset views, poisoned outputs."""
    from fused.kernels.act_split import act_split
    from fused.kernels.w8_gemm import w8_gemm

    _poisoned_empty(monkeypatch)
    fp8 = fmt != "int8"
    for M, N, K, view in ((1, 37, 64, "plain"), (3, 20, 96, "transposed"), (17, 19, 70, "3d_offset")):
        x, q, s, b = _case(M, N, K, fmt, gated, True, torch.bfloat16, "cpu", view)
        planes, xs = act_split(x, fp8=fp8)
        base = dict(BLOCK_N=16, BLOCK_K=32, GROUP_M=4, num_stages=1, num_warps=4, SPLIT_K=split)
        for out_m in (8, 16, 128):  # 128: the 256-row stacked tile (all 128 tokens of M=128; thirty-ninth)
            want = w8_gemm(planes, q, s, b, "silu", gated, x_scale=xs, out_dtype=x.dtype,
                           config=dict(base, BLOCK_M=out_m), x_split=True)
            got = w8_gemm(planes, q, s, b, "silu", gated, x_scale=xs, out_dtype=x.dtype,
                          config=dict(base, BLOCK_M=2 * out_m, STACK=True), x_split=True)
            assert torch.equal(want, got), (M, out_m)
        ref = (gated_ref if gated else linear_ref)(x, q, s, b, "silu")
        assert sqnr(ref, got) > 40, M
    with pytest.raises(ValueError, match="STACK config needs"):
        w8_gemm(x, q, s, b, "silu", gated, config=dict(base, BLOCK_M=32, STACK=True), quantize_x=True,
                x_split=not fp8)


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
def test_gemm_stacked_planes_cuda(fmt):
    """On the GPU, every STACK candidate at M = 17 (64-row stacked tiles), M = 45 (128-row ones as well) and M = 100
    (256-row ones as well), odd N and K: int8 bit-equal to the unstacked half-height tile with the same K split (exact
    int32 sums), fp8 within bf16 rounding of the W8A16 reference; gated and not."""
    from fused.kernels.act_split import act_split
    from fused.kernels.w8_gemm import _candidates, w8_gemm

    for M, N, K in ((17, 176, 1040), (45, 200, 1456), (100, 200, 1456)):  # 100: 256-row stacked tiles too
        for gated in (True, False):
            x, q, s, b = _case(M, N, K, fmt, gated, gated, torch.bfloat16, "cuda", "plain")
            bias = b if gated else None
            planes, ps = act_split(x, fp8=fmt != "int8")
            ref = (gated_ref if gated else linear_ref)(x, q, s, bias, "silu")
            stacked = [c for c in _candidates(M, N, K, gated, True, True) if c.get("STACK")]
            assert stacked, M
            for c in stacked:
                y = w8_gemm(planes, q, s, bias, "silu", gated, x_scale=ps, out_dtype=x.dtype, config=c, x_split=True)
                assert sqnr(ref, y) > 40, (M, gated, c)
                if fmt == "int8":
                    half = dict(c, BLOCK_M=c["BLOCK_M"] // 2)
                    del half["STACK"]
                    want = w8_gemm(planes, q, s, bias, "silu", gated, x_scale=ps, out_dtype=x.dtype, config=half,
                                   x_split=True)
                    assert torch.equal(want, y), (M, gated, c)


def test_gemm_candidates():
    """The tile lists: non-split lists are not resized for split activations (a loop variable once shadowed
    `split`, so every candidate after the first went through _split_fit), split lists are, and the
    2-CTA-per-SM tiles are offered where the ncu runs asked for them."""
    from fused.kernels.w8_gemm import _candidates

    def tiles(*a):
        return {(c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["num_stages"], c["num_warps"]) for c in _candidates(*a)}

    big = tiles(1024, 14336, 4096, True, True)
    assert {(128, 128, 128, 4, 8), (128, 128, 128, 3, 4), (128, 64, 128, 4, 4), (128, 128, 64, 4, 8)} <= big
    assert (128, 64, 128, 3, 8) in tiles(128, 14336, 4096, True, True)
    assert (128, 256, 128, 3, 8) not in tiles(128, 4096, 14336, False, True)  # lost on the H200 (thirty-ninth)
    # BLOCK_K 64 x 8 stages lost on the H200 (forty-first)
    deep = [c for c in _candidates(128, 14336, 4096, True, False, True) if c["BLOCK_K"] == 64 and c["num_stages"] == 8]
    assert not deep
    split = _candidates(128, 14336, 4096, True, False, True)  # gated: 4 accumulators, 2 when the planes stack
    assert all((2 if c.get("STACK") else 4) * c["BLOCK_M"] * c["BLOCK_N"] // (32 * c["num_warps"]) <= 128 for c in split)
    # quantize_x keeps x's tile in bf16: a 128x128x128 gated tile x 4 stages asked the H200 for 256 KB
    # both planes stacked in one tile where the split tiles would be mostly padding rows, not above M=64
    for gated in (True, False):
        stk = [c for c in _candidates(17, 14336, 4096, gated, True, True) if c.get("STACK")]
        assert stk and all(c["BLOCK_M"] >= 64 for c in stk)
        assert all((2 if gated else 1) * c["BLOCK_M"] * c["BLOCK_N"] // (32 * c["num_warps"]) <= 128 for c in stk)
        assert all(c["num_stages"] * (c["BLOCK_M"] + (2 if gated else 1) * c["BLOCK_N"]) * c["BLOCK_K"] <= 220 * 1024
                   for c in stk)
    assert {c["BLOCK_M"] for c in _candidates(128, 14336, 4096, True, True, True) if c.get("STACK")} == {128, 256}
    assert {c["BLOCK_M"] for c in _candidates(64, 4096, 14336, False, True, True) if c.get("STACK")} == {64, 128}
    assert not any(c.get("STACK") for c in _candidates(256, 14336, 4096, True, True, True))
    assert not any(c.get("STACK") for c in _candidates(17, 14336, 4096, True, True))
    for M in (16, 300, 1024):
        qx = tiles(M, 176, 272, True, True, False, True)
        assert all(s * (2 * bm + 2 * bn) * bk <= 220 * 1024 for bm, bn, bk, s, _ in qx), (M, qx)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_relu_epilogue_keeps_nan(device):
    """The relu epilogue keeps NaN: a NaN row stays NaN through relu, as in torch, and
    negative sums still become 0 (GEMV and tiled GEMM)."""
    from fused.kernels.w8_gemm import w8_gemm
    from fused.kernels.w8a16_gemv import w8a16_gemv

    for M, run in ((3, w8a16_gemv), (20, w8_gemm)):
        x, q, s, b = _case(M, 24, 64, "int8", False, True, torch.bfloat16, device, "plain")
        x[1, 5] = float("nan")
        y = run(x, q, s, b, "relu", False)
        ref = linear_ref(x, q, s, b, "relu")
        assert torch.isnan(y[1]).all() and torch.isnan(ref[1]).all()
        ok = [0, 2] + list(range(3, M))
        assert not torch.isnan(y[ok]).any() and (y[ok] >= 0).all() and (y[ok] == 0).any()
        assert sqnr(ref[ok], y[ok]) > 38


# ------------------------------------------------------ fp8 split activations (W8A16 fp8 via fp8 MMA, opt-in)
def test_split_activation_fp8_reference():
    from lowbit.quant import FP8_SPLIT_LO, split_activation_fp8

    x = torch.randn(6, 300) * torch.logspace(-3, 3, 6)[:, None]
    x[2, 7] = float("nan")
    x[5] = 0
    hi, lo, s = split_activation_fp8(x)
    assert hi.dtype == lo.dtype == torch.float8_e4m3fn
    ok = torch.tensor([True, True, False, True, True, True])
    assert torch.isnan(s[2]).all() and not torch.isnan(s[ok]).any()
    assert (hi[2].float() == 0).all() and (lo[2].float() == 0).all() and (hi[5].float() == 0).all()
    rec = s * (hi.float() + lo.float() / FP8_SPLIT_LO)
    assert sqnr(x[ok], rec[ok]) > 55  # bf16's own rounding of x: ~53-60 dB
    assert lo.float().abs().max() <= 256  # |16·(v - hi)| <= 16·16


@pytest.mark.parametrize("K", [70, 300])
def test_act_split_fp8_bit_exact(K, monkeypatch):
    from fused.kernels import act_quant
    from fused.kernels.act_split import act_split
    from lowbit.quant import split_activation_fp8

    if K > 100:  # the two-pass path
        monkeypatch.setattr(act_quant, "MAX_ONE_PASS", 64)
        import fused.kernels.act_split as mod
        monkeypatch.setattr(mod, "MAX_ONE_PASS", 64)
    x = (torch.randn(5, K + 3) * torch.logspace(-2, 1, K + 3))[:, 3:].to(torch.bfloat16) * 10
    x[1, 5] = float("inf")
    x[4] = 0
    planes, s = act_split(x, fp8=True)
    hi, lo, rs = split_activation_fp8(x)
    assert planes.dtype == torch.float8_e4m3fn
    assert torch.equal(planes[0].view(torch.uint8), hi.view(torch.uint8))
    assert torch.equal(planes[1].view(torch.uint8), lo.view(torch.uint8))  # -0.0 included
    assert torch.equal(s[[0, 2, 3, 4]], rs[[0, 2, 3, 4], 0]) and torch.isnan(s[1])


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("split", [1, 2])
def test_gemm_fp8_split_activations_interpreted(gated, split, monkeypatch):
    """w8_gemm with fp8 weights on act_split's e4m3 planes: the W8A16 result to bf16's precision."""
    from fused.kernels.act_split import act_split
    from fused.kernels.w8_gemm import w8_gemm

    _poisoned_empty(monkeypatch)
    for M, N, K, view in ((1, 37, 64, "plain"), (3, 20, 96, "transposed"), (17, 19, 70, "3d_offset")):
        x, q, s, b = _case(M, N, K, "float8_e4m3", gated, True, torch.bfloat16, "cpu", view)
        x[:, 1] *= 1e3  # an outlier channel: the other channels keep their relative precision
        planes, xs = act_split(x, fp8=True)
        cfg = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=4, num_stages=1, num_warps=4, SPLIT_K=split)
        y = w8_gemm(planes, q, s, b, "silu", gated, x_scale=xs, out_dtype=x.dtype, config=cfg, x_split=True)
        ref = (gated_ref if gated else linear_ref)(x, q, s, b, "silu")
        assert y.shape == ref.shape and y.dtype == torch.bfloat16
        assert sqnr(ref, y) > 40, M


def _fp8_split_on(monkeypatch, dispatch):
    """The fp8 split route on for 2 <= M <= 64, the hot-path cache and the path counts cleared."""
    monkeypatch.setattr(dispatch, "FP8_SPLIT", True)
    monkeypatch.setattr(dispatch, "SPLIT_MIN_M", 2)
    monkeypatch.setattr(dispatch, "SPLIT_MAX_M", 64)
    monkeypatch.setattr(dispatch, "_cuda_paths", {})
    dispatch.stats.clear()


def test_dispatch_fp8_split_path_interpreted(monkeypatch):
    """With dispatch.FP8_SPLIT (dispatch.FP8_SPLIT), W8A16 fp8 with bf16 activations at SPLIT_MIN_M <= M <=
    SPLIT_MAX_M takes act_split (e4m3 planes) + the split GEMM; fp16/fp32 activations keep the mixed-input
    GEMM, and explain says which."""
    from fused import dispatch

    _fp8_split_on(monkeypatch, dispatch)
    with dispatch.force_path("triton"):
        x, q, s, b = _case(20, 24, 64, "float8_e4m3", True, True, torch.bfloat16, "cpu", "plain")
        assert sqnr(gated_ref(x, q, s, b, "silu"), dispatch.gated(x, q, s, b, "silu")) > 40
        x3 = x.reshape(2, 10, 64)
        y3 = dispatch.linear(x3, q[:24], s[:24], b[:24], "relu")
        assert y3.shape == (2, 10, 24) and sqnr(linear_ref(x, q[:24], s[:24], b[:24], "relu").reshape(2, 10, 24), y3) > 40
        dispatch.linear(x.half(), q, s, b)  # fp16: mixed-input GEMM
    paths = dict(dispatch.stats)
    assert paths[("gated", "triton:act_split+w8_gemm_split")] == 1
    assert paths[("linear", "triton:act_split+w8_gemm_split")] == 1
    assert paths[("linear", "triton:w8_gemm_w8a16")] == 1
    path, why = dispatch.plan("linear", "float8_e4m3", False, "cuda", M=20, dtype=torch.bfloat16)
    assert path == "triton:act_split+w8_gemm_split" and "e4m3 planes" in why


def test_dispatch_fp8_split_awkward_inputs_interpreted(monkeypatch):
    """The fp8 split route (default on) on awkward inputs: transposed and offset views, a NaN row and an Inf
    row (NaN out, the other rows untouched), a zero weight row, M=0; outputs poisoned before the run."""
    from fused import dispatch

    _poisoned_empty(monkeypatch)
    _fp8_split_on(monkeypatch, dispatch)
    with dispatch.force_path("triton"):
        for M, N, K, view in ((3, 20, 70, "transposed"), (17, 19, 100, "3d_offset")):
            x, q, s, b = _case(M, N, K, "float8_e4m3", False, True, torch.bfloat16, "cpu", view)
            q[5] = 0
            s[5] = 0.0  # an all-zero weight row (scale 0): its output is the bias
            x[1, 4], x[2, 7] = float("nan"), float("inf")
            y = dispatch.linear(x, q, s, b, "gelu")
            ref = linear_ref(x, q, s, b, "gelu")
            ok = [0] + list(range(3, M))
            assert torch.isnan(y[1]).all() and torch.isnan(y[2]).all()
            assert not torch.isnan(y[ok]).any() and sqnr(ref[ok], y[ok]) > 40, (M, view)
            want = torch.nn.functional.gelu(b[5]).expand(len(ok))  # zero weights: gelu(bias), 1 bf16 ulp
            torch.testing.assert_close(y[ok, 5].float(), want, rtol=8e-3, atol=0)
        assert dispatch.linear(x[:0], q, s, b).shape == (0, N)
    assert dispatch.stats[("linear", "triton:act_split+w8_gemm_split")] == 2


# ----------------------------------------------------------------------------- the cuBLAS W8A8 route

def _fake_cublas(monkeypatch):
    """torch._scaled_mm / torch._int_mm emulated on the CPU with the semantics the route relies on (the real
    ones run in test_cublas_w8a8_cuda): [M, K] · [K, N] with a column-major second operand, unit scales."""
    def result(y, out):  # out= as the real ops take it (gated_pair's route writes each product into a buffer)
        return y if out is None else out.copy_(y)

    def scaled_mm(a, b, scale_a, scale_b, out_dtype=None, out=None, **kw):
        assert b.stride(0) == 1 and float(scale_a) == 1.0 and float(scale_b) == 1.0
        return result((a.float() @ b.float()).to(out_dtype), out)

    def int_mm(a, b, out=None):
        assert a.dtype == b.dtype == torch.int8 and a.shape[0] > 16 and b.stride(0) == 1
        return result((a.to(torch.int64) @ b.to(torch.int64)).to(torch.int32), out)
    monkeypatch.setattr(torch, "_scaled_mm", scaled_mm)
    monkeypatch.setattr(torch, "_int_mm", int_mm)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("gated", [False, True])
def test_cublas_w8a8_glue_emulated(fmt, gated, monkeypatch):
    """The cuBLAS route's own steps (act_quant with padding rows, the GEMM's operand layout, the epilogue's
    scales, bias, activation, gate) against the W8A8 reference, on odd M and a 3-D non-contiguous x."""
    from fused import dispatch

    _fake_cublas(monkeypatch)
    torch.manual_seed(0)
    N = 2 * 48 if gated else 48
    q, s = quantize_weight(torch.randn(N, 64), fmt)
    b = torch.randn(N)
    for M in (1, 17, 40):
        x = torch.randn(M, 128, dtype=torch.bfloat16)[:, ::2]
        ref = (gated_ref if gated else linear_ref)(x, q, s, b, "silu", dynamic=True)
        got = dispatch._cublas_w8a8(x, q, s, b, "silu", gated)
        assert got.shape == ref.shape and sqnr(ref.float(), got.float()) > 35, (M, fmt)
    assert dispatch._cublas_ok(q) and not dispatch._cublas_ok(q[:, :40]) and not dispatch._cublas_ok(q[:40])
    if gated:  # the same for a gate / up pair in tensors of their own (gated_pair's route)
        H = N // 2
        for M in (1, 17, 40):
            x = torch.randn(M, 128, dtype=torch.bfloat16)[:, ::2]
            ref = gated_ref(x, q, s, b, "silu", dynamic=True)
            got = dispatch._cublas_w8a8_pair(x, q[:H], s[:H], b[:H], q[H:], s[H:], b[H:], "silu")
            assert got.shape == ref.shape and sqnr(ref.float(), got.float()) > 35, (M, fmt)


@pytest.mark.parametrize("mode", ["rowwise", "rowwise_fast"])
@pytest.mark.parametrize("gated", [False, True])
def test_cublas_fp8_rowwise(mode, gated, monkeypatch):
    """dispatch.CUBLAS_FP8 rowwise forms (torch._scaled_mm with the token and channel scales inside; the CPU build has
    it too): the same outputs as the unit-scale form but for the rounding of y before the epilogue, for M a multiple
    of 16 (the quantized h of a block's first layer too); other M take the unit-scale form, bit for bit."""
    from fused import dispatch

    monkeypatch.setattr(dispatch, "CUBLAS_FP8", "unit")
    monkeypatch.setattr(dispatch, "CUBLAS_FP8_MIN_M", 0)
    torch.manual_seed(0)
    N = 2 * 48 if gated else 48
    q, s = quantize_weight(torch.randn(N, 64), "float8_e4m3")
    b = torch.randn(N)
    for M in (17, 32):
        x = torch.randn(M, 64, dtype=torch.bfloat16)
        ref = (gated_ref if gated else linear_ref)(x, q, s, b, "silu", dynamic=True)
        unit = dispatch._cublas_w8a8(x, q, s, b, "silu", gated)
        unit_q = dispatch._cublas_w8a8(x, q, s, b, "silu", gated, q_rows=32)
        monkeypatch.setattr(dispatch, "CUBLAS_FP8", mode)
        got = dispatch._cublas_w8a8(x, q, s, b, "silu", gated)
        got_q = dispatch._cublas_w8a8(x, q, s, b, "silu", gated, q_rows=32)
        if gated:  # gated_pair's route: the same forms with gate and up in tensors of their own
            H = N // 2
            pair = dispatch._cublas_w8a8_pair(x, q[:H], s[:H], b[:H], q[H:], s[H:], b[H:], "silu")
            assert sqnr(got.float(), pair.float()) > 60, M
        monkeypatch.setattr(dispatch, "CUBLAS_FP8", "unit")
        assert sqnr(ref.float(), got.float()) > 35, M
        assert got_q.q.shape == (32, N // (2 if gated else 1)) and got_q.m == M
        if M % 16:
            assert torch.equal(got, unit) and torch.equal(got_q.q.view(torch.uint8), unit_q.q.view(torch.uint8))
        else:
            assert sqnr(unit.float(), got.float()) > 40
            assert sqnr(unit_q.s, got_q.s) > 40 and not got_q.q[M:].view(torch.uint8).any()
    # a plain layer without activation (a block's down projection) is finished inside the GEMM, bf16 bias included
    x = torch.randn(32, 64, dtype=torch.bfloat16)
    q1, s1 = q[:48], s[:48]
    for bias in (None, b[:48].bfloat16(), b[:48]):
        ref = linear_ref(x, q1, s1, bias, "none", dynamic=True)
        unit = dispatch._cublas_w8a8(x, q1, s1, bias, "none", False)
        monkeypatch.setattr(dispatch, "CUBLAS_FP8", mode)
        got = dispatch._cublas_w8a8(x, q1, s1, bias, "none", False)
        monkeypatch.setattr(dispatch, "CUBLAS_FP8", "unit")
        assert got.dtype == torch.bfloat16 and sqnr(ref.float(), got.float()) > 35 and sqnr(unit.float(), got.float()) > 40
    # below CUBLAS_FP8_MIN_M the unit-scale form runs, bit for bit
    unit = dispatch._cublas_w8a8(x, q1, s1, None, "none", False)
    monkeypatch.setattr(dispatch, "CUBLAS_FP8", mode)
    monkeypatch.setattr(dispatch, "CUBLAS_FP8_MIN_M", 33)
    assert torch.equal(dispatch._cublas_w8a8(x, q1, s1, None, "none", False), unit)
    monkeypatch.setattr(dispatch, "CUBLAS_FP8_MIN_M", 32)
    assert not torch.equal(dispatch._cublas_w8a8(x, q1, s1, None, "none", False), unit)


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["rowwise", "rowwise_fast"])
def test_cublas_fp8_rowwise_cuda(mode, monkeypatch):
    """The rowwise fp8 forms on the GPU (CUTLASS's rowwise kernel): close to the unit-scale form and the reference,
    gated and not, with h quantized for a second layer; M not a multiple of 16 keeps the unit-scale form."""
    from fused import dispatch

    monkeypatch.setattr(dispatch, "CUBLAS_FP8", "unit")
    monkeypatch.setattr(dispatch, "CUBLAS_FP8_MIN_M", 0)
    torch.manual_seed(0)
    for gated in (False, True):
        N = 2 * 256 if gated else 256
        q, s = quantize_weight(torch.randn(N, 512, device="cuda"), "float8_e4m3")
        b = torch.randn(N, device="cuda")
        for M in (17, 256, 1024):
            x = torch.randn(M, 512, device="cuda", dtype=torch.bfloat16)
            ref = (gated_ref if gated else linear_ref)(x, q, s, b, "silu", dynamic=True)
            unit = dispatch._cublas_w8a8(x, q, s, b, "silu", gated)
            monkeypatch.setattr(dispatch, "CUBLAS_FP8", mode)
            got = dispatch._cublas_w8a8(x, q, s, b, "silu", gated)
            qa = dispatch._cublas_w8a8(x, q, s, b, "silu", gated, q_rows=dispatch._handoff_rows(M))
            monkeypatch.setattr(dispatch, "CUBLAS_FP8", "unit")
            assert sqnr(ref.float(), got.float()) > 35 and sqnr(unit.float(), got.float()) > 38, (gated, M)
            assert qa.m == M and sqnr(unit.float(), (qa.q[:M].float() * qa.s[:, None]).to(unit.dtype).float()) > 25
            if M % 16:
                assert torch.equal(got, unit)


def _replayed(fn):
    """fn()'s output from a CUDA graph of it, captured and replayed once (what a capture of the call runs)."""
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    g.replay()
    torch.cuda.synchronize()
    return out


def _cublas_picked(monkeypatch, gated):
    """Route timings replaced by "cuBLAS wins, eager and graph", recording the candidates offered; stats cleared.
    Returns (offered, the dispatch op, its stats name)."""
    from fused import dispatch

    monkeypatch.setattr(dispatch, "_dense_routes", {})
    offered = []
    monkeypatch.setattr(dispatch, "measure_route", lambda kind, key, cands, untimed=None, graph=False:
                        offered.extend(cands) or ("cublas", "cublas"))
    dispatch.stats.clear()
    return offered, dispatch.gated if gated else dispatch.linear, "gated" if gated else "linear"


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("gated", [False, True])
def test_cublas_w8a8_cuda(fmt, gated, monkeypatch):
    """The real cuBLAS route against the W8A8 reference, and offered to the route timing when enabled."""
    from fused import dispatch

    torch.manual_seed(0)
    N = 2 * 256 if gated else 256
    q, s = quantize_weight(torch.randn(N, 512, device="cuda"), fmt)
    b = torch.randn(N, device="cuda")
    for M in (17, 300):
        x = torch.randn(M, 512, device="cuda", dtype=torch.bfloat16)
        ref = (gated_ref if gated else linear_ref)(x, q, s, b, "silu", dynamic=True)
        got = dispatch._cublas_w8a8(x, q, s, b, "silu", gated)
        assert sqnr(ref.float(), got.float()) > 35, M
    monkeypatch.setattr(dispatch, "CUBLAS_W8A8", True)
    offered, op, name = _cublas_picked(monkeypatch, gated)
    got = op(x, q, s, b, "silu", dynamic=True)  # eager: timed, but the (replayable) Triton path runs
    assert offered == ["triton", "cublas"] and dispatch.stats[(name, dispatch.CUBLAS_PATH)] == 0
    assert sqnr(ref.float(), got.float()) > 35
    out = _replayed(lambda: op(x, q, s, b, "silu", dynamic=True))  # a capture takes the graph pick
    assert dispatch.stats[(name, dispatch.CUBLAS_PATH)] == 1 and offered == ["triton", "cublas"]
    assert sqnr(ref.float(), out.float()) > 35
    # from CUBLAS_EAGER_MIN_M eager calls take the eager pick too (cuBLAS here)
    x = torch.randn(1100, 512, device="cuda", dtype=torch.bfloat16)
    ref = (gated_ref if gated else linear_ref)(x, q, s, b, "silu", dynamic=True)
    dispatch.stats.clear()
    got = op(x, q, s, b, "silu", dynamic=True)
    assert dispatch.stats[(name, dispatch.CUBLAS_PATH)] == 1 and sqnr(ref.float(), got.float()) > 35


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("gated", [False, True])
def test_cublas_w8a16_cuda(fmt, gated, monkeypatch):
    """The W8A16 cuBLAS route (widen, bf16 mm, scale_epilogue) against the weight-only reference, offered to the
    route timing from WIDEN_MIN_M, and taken by eager calls and by a capture when picked (CUBLAS_W8A16)."""
    from fused import dispatch

    torch.manual_seed(0)
    N = 2 * 256 if gated else 256
    q, s = quantize_weight(torch.randn(N, 512, device="cuda"), fmt)
    b = torch.randn(N, device="cuda")
    x = torch.randn(1100, 512, device="cuda", dtype=torch.bfloat16)[:, :500]  # a strided view: 500 features
    q, s = q[:, :500].contiguous(), s
    ref = (gated_ref if gated else linear_ref)(x, q, s, b, "silu")
    got = dispatch._cublas_w8a16(x, q, s, b, "silu", gated)
    assert sqnr(ref.float(), got.float()) > 40
    monkeypatch.setattr(dispatch, "CUBLAS_W8A16", True)
    monkeypatch.setattr(dispatch, "_cublas_ok", lambda w: True)  # K = 500 is no multiple of 16: torch.mm takes it
    offered, op, name = _cublas_picked(monkeypatch, gated)
    got = op(x, q, s, b, "silu")
    assert offered == ["triton", "cublas"] and dispatch.stats[(name, dispatch.CUBLAS_W8A16_PATH)] == 1
    assert sqnr(ref.float(), got.float()) > 40
    out = _replayed(lambda: op(x, q, s, b, "silu"))
    assert dispatch.stats[(name, dispatch.CUBLAS_W8A16_PATH)] == 2 and offered == ["triton", "cublas"]
    assert sqnr(ref.float(), out.float()) > 40
    small = op(x[:300], q, s, b, "silu")  # below WIDEN_MIN_M: not offered
    assert offered == ["triton", "cublas"] and sqnr((gated_ref if gated else linear_ref)(x[:300], q, s, b, "silu").float(),
                                                     small.float()) > 40


@pytest.mark.parametrize("fmt", FMTS)
def test_cublas_w8a16_pair_steps(fmt):
    """gated_pair's W8A16 cuBLAS route (each weight widened, two GEMMs into [2, M, H], the epilogue reading gate and
    up apart) against the reference; on the CPU torch.mm stands in for cuBLAS, the Triton steps interpreted."""
    from fused import dispatch

    torch.manual_seed(5)
    x, q, s, b = _case(37, 24, 48, fmt, True, True, torch.bfloat16, "cpu", "3d_offset")
    H = q.shape[0] // 2
    y = dispatch._cublas_w8a16_pair(x, q[:H], s[:H], b[:H], q[H:], s[H:], b[H:], "silu")
    assert y.shape == (37, H) and sqnr(gated_ref(x, q, s, b, "silu"), y) > 40
    y = dispatch._cublas_w8a16_pair(x, q[:H], s[:H], None, q[H:], s[H:], None, "gelu_tanh")
    assert sqnr(gated_ref(x, q, s, None, "gelu_tanh"), y) > 40


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
def test_cublas_w8a16_pair_route_cuda(fmt, monkeypatch):
    """gated_pair from WIDEN_MIN_M offers its cuBLAS route to the route timing; picked, eager calls and a capture
    take it, against the reference."""
    from fused import dispatch

    torch.manual_seed(0)
    q, s = quantize_weight(torch.randn(512, 512, device="cuda"), fmt)
    b = torch.randn(512, device="cuda")
    x = torch.randn(1100, 512, device="cuda", dtype=torch.bfloat16)
    args = (q[:256], s[:256], b[:256], q[256:], s[256:], b[256:], "silu")
    ref = gated_ref(x, q, s, b, "silu")
    offered, _, _ = _cublas_picked(monkeypatch, True)
    got = dispatch.gated_pair(x, *args)
    assert offered == ["triton", "cublas"] and dispatch.stats[("gated_pair", dispatch.CUBLAS_W8A16_PATH)] == 1
    assert sqnr(ref.float(), got.float()) > 40
    out = _replayed(lambda: dispatch.gated_pair(x, *args))
    assert dispatch.stats[("gated_pair", dispatch.CUBLAS_W8A16_PATH)] == 2 and sqnr(ref.float(), out.float()) > 40


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("M", [300, 2100])
def test_cublas_w8a8_pair_route_cuda(fmt, M, monkeypatch):
    """gated_pair W8A8 above the GEMV range offers its cuBLAS route; picked, a capture takes it (and eager calls
    from CUBLAS_EAGER_MIN_M; rowwise scales inside the fp8 GEMM there), against the reference."""
    from fused import dispatch

    torch.manual_seed(0)
    q, s = quantize_weight(torch.randn(512, 512, device="cuda"), fmt)
    b = torch.randn(512, device="cuda")
    x = torch.randn(M, 512, device="cuda", dtype=torch.bfloat16)
    args = (q[:256], s[:256], b[:256], q[256:], s[256:], b[256:], "silu")
    ref = gated_ref(x, q, s, b, "silu", dynamic=True)
    offered, _, _ = _cublas_picked(monkeypatch, True)
    got = dispatch.gated_pair(x, *args, dynamic=True)
    eager = dispatch.stats[("gated_pair", dispatch.CUBLAS_PATH)]
    assert offered == ["triton", "cublas"] and eager == (M >= dispatch.CUBLAS_EAGER_MIN_M)
    assert sqnr(ref.float(), got.float()) > 35
    out = _replayed(lambda: dispatch.gated_pair(x, *args, dynamic=True))
    assert dispatch.stats[("gated_pair", dispatch.CUBLAS_PATH)] == eager + 1 and sqnr(ref.float(), out.float()) > 35


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("gated", [False, True])
def test_gemv_route_cuda(fmt, gated, monkeypatch):
    """W8A16 at SPLIT_MIN_M <= M <= GEMV_ROUTE_MAX_M: the split-activation path and the 32-row GEMV are offered to the
    route timing per shape, the graph pick runs in eager calls and under capture, both against the reference; above
    the bound (or with it at 0) nothing is offered and split activations run."""
    from fused import dispatch

    torch.manual_seed(0)
    N = 2 * 96 if gated else 96
    q, s = quantize_weight(torch.randn(N, 500, device="cuda"), fmt)
    b = torch.randn(N, device="cuda")
    ref_of = lambda x: (gated_ref if gated else linear_ref)(x, q, s, b, "silu")  # noqa: E731
    op, name = (dispatch.gated, "gated") if gated else (dispatch.linear, "linear")
    for real in (True, False):  # the real timing first (either pick is right), then "the GEMV wins"
        monkeypatch.setattr(dispatch, "_dense_routes", {})
        offered = []
        if not real:
            monkeypatch.setattr(dispatch, "measure_route", lambda kind, key, cands, untimed=None, graph=False:
                                offered.extend(cands) or ("split", "gemv"))
        for M in (17, 32):
            x = torch.randn(M + 3, 512, device="cuda", dtype=torch.bfloat16)[3:, :500]  # an offset, strided view
            dispatch.stats.clear()
            got = op(x, q, s, b, "silu")
            assert sqnr(ref_of(x).float(), got.float()) > 40, (real, M)
            if not real:
                assert offered[-2:] == ["split", "gemv"] and dispatch.stats[(name, dispatch.GEMV_PATH)] == 1
                out = _replayed(lambda: op(x, q, s, b, "silu"))
                assert dispatch.stats[(name, dispatch.GEMV_PATH)] == 2 and torch.equal(out, got)
    assert offered == ["split", "gemv"]  # one timing per M bucket: 17 and 32 share bucket 32
    x = torch.randn(33, 500, device="cuda", dtype=torch.bfloat16)
    dispatch.stats.clear()
    op(x, q, s, b, "silu")
    assert len(offered) == 2 and dispatch.stats[(name, dispatch.SPLIT_PATH)] == 1
    monkeypatch.setattr(dispatch, "GEMV_ROUTE_MAX_M", 0)
    monkeypatch.setattr(dispatch, "_dense_routes", {})
    dispatch.stats.clear()
    got = op(x[:20], q, s, b, "silu")
    assert len(offered) == 2 and dispatch.stats[(name, dispatch.SPLIT_PATH)] == 1
    assert sqnr(ref_of(x[:20]).float(), got.float()) > 40


def test_explain_lists_dense_graph_routes(monkeypatch):
    """explain shows, per M bucket, which GEMM a dense W8A8 layer's shape takes under CUDA-graph capture
    (cuBLAS or Triton, CUBLAS_W8A8); weight-only layers list none."""
    from fused import dispatch, explain
    from fused.explain import format_table
    from fused.modules import FusedLinear

    torch.manual_seed(0)
    mod = FusedLinear.from_float(torch.randn(64, 96), fmt="int8", dynamic=True)
    wo = FusedLinear.from_float(torch.randn(64, 96), fmt="int8")
    model = torch.nn.Sequential(mod, torch.nn.Linear(64, 96), wo)
    monkeypatch.setattr(dispatch, "_dense_routes", {})
    assert [r["routes"] for r in explain(model, print_table=False)] == [None, None]
    for m, pick in ((128, "cublas"), (32, "triton")):
        dispatch._dense_routes[("linear", m, (64, 96), torch.int8, torch.bfloat16, True, "none")] = ("triton", pick)
    dispatch._dense_routes[("linear", 64, (32, 96), torch.int8, torch.bfloat16, True, "none")] = ("triton", "cublas")
    rows = explain(model, print_table=False)
    assert rows[0]["routes"] == "M~32: graph triton, M~128: graph cublas" and rows[1]["routes"] is None
    assert "routes so far: M~32: graph triton" in format_table(rows)
    # the weight-only route from WIDEN_MIN_M (CUBLAS_W8A16) shows on the weight-only layer only
    dispatch._dense_routes[("linear", 1024, (64, 96), torch.int8, torch.bfloat16, True, "none", "w8a16")] = ("cublas",
                                                                                                             "cublas")
    rows = explain(model, print_table=False)
    assert rows[0]["routes"] == "M~32: graph triton, M~128: graph cublas"
    assert rows[1]["routes"] == "M~1024 [w8a16]: graph cublas"
    # the split-or-GEMV route at small M (GEMV_ROUTE_MAX_M) too
    dispatch._dense_routes[("linear", 32, (64, 96), torch.int8, torch.bfloat16, True, "none", "gemv")] = ("split", "gemv")
    rows = explain(model, print_table=False)
    assert rows[0]["routes"] == "M~32: graph triton, M~128: graph cublas"
    assert rows[1]["routes"] == "M~32 [gemv]: graph gemv, M~1024 [w8a16]: graph cublas"


@pytest.mark.parametrize("evict", ["0", "1"])
def test_decode_weight_loads_carry_the_l2_policy_for_sm90(evict, monkeypatch):
    """fused.kernels._W_EVICT "evict_first" (the default): the decode kernels' weight streams (dense GEMV, 2:4 quad
    GEMV, 2:4 mma) load with an L2 evict_first cache hint (createpolicy + .L2::cache_hint; the mma's inline PTX
    assembles with it); "" (set before the kernels are imported): none."""
    code = (f"import fused.kernels as K; K._W_EVICT = {'evict_first' if evict == '1' else ''!r}\n"
            "from gemv_sass import compile_gemv; from sparse_sass import compile_sparse\n"
            "from sm90_compile import compile_sm90, sparse24_mma_configs\n"
            "d = compile_gemv(dict(BLOCK_M=1, BLOCK_N=16, BLOCK_K=512, SPLIT_K=1, num_warps=4,"
            " CVT='prmt')).asm['ptx']\n"
            "s = compile_sparse(dict(MODE='quad', BLOCK_M=1, BLOCK_N=16, BLOCK_K=512, num_warps=4, SPLIT_K=1,"
            " STAGES=1), True, 14336, 4096, tiled=2).asm['ptx']\n"
            "m = compile_sm90(*sparse24_mma_configs()[0][1:])['ptx']\n"
            "print([p.count('createpolicy.fractional.L2::evict_first') > 0 and 'L2::cache_hint' in p"
            " for p in (d, s, m)])")
    want = "[True, True, True]" if evict == "1" else "[False, False, False]"
    assert _sm90_last_line(code) == want
