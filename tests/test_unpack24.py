"""The 2:4 unpack kernel vs sparsity.packing.unpack_24: bit-identical for int8, fp8 and bf16 values,
odd row counts, K with a half-used last meta byte, strided values."""
import pytest
import torch

from sparsity.masks import magnitude_mask_24
from sparsity.packing import pack_24, unpack_24


def _packed(R, K, fmt, device="cpu"):
    """A random [R, K] weight, magnitude-pruned to 2:4, quantized per row and packed: (values, meta, scale)."""
    from lowbit import quantize_weight

    w = torch.randn(R, K, device=device)
    q, s = quantize_weight(w * magnitude_mask_24(w.abs()), fmt)
    return (*pack_24(q), s)


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
    from lowbit import sqnr

    torch.manual_seed(0)
    R = 2 * 12 if op == "sparse24_gated" else 12
    values, meta, s = _packed(R, 40, fmt)
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
    from lowbit import sqnr

    values, meta, s = _packed(2 * 176, 264, fmt, "cuda")
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


# ----------------------------------------------------------------------------- the cuSPARSELt route (W8A8)

@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("act", ["none", "silu", "gelu_tanh"])
def test_scale_epilogue_kernel(gated, bias, act, monkeypatch):
    from fused.kernels.scale_epilogue import scale_epilogue
    from fused.reference import scale_epilogue_ref
    from lowbit import sqnr

    torch.manual_seed(0)
    real = torch.empty

    def poisoned(*a, **k):  # NaN-filled outputs: an element the kernel does not write fails the SQNR
        t = real(*a, **k)
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t
    for M, N in ((1, 20), (17, 37), (300, 3)):
        N2 = 2 * N if gated else N
        y = torch.randn(N2 + 3, M, dtype=torch.bfloat16)[1:N2 + 1].t()  # non-contiguous [M, N2], as cslt gives
        xs = torch.rand(M) + 0.1 if bias else None  # with and without a token scale
        ws = torch.rand(N2) + 0.5 if M % 2 else None  # and a channel scale
        b = torch.randn(N2) if bias else None
        # split planes: the hi product in rows [0, M), the lo one from row lo (padding rows between)
        lo = M + 3
        yp = torch.randn(N2 + 3, 2 * lo + 2, dtype=torch.bfloat16)[1:N2 + 1].t()
        # fp32 out: the math alone; bf16 out: near-ties may round one ulp apart (~43 dB at worst)
        for out_dtype, floor in ((torch.float32, 90), (torch.bfloat16, 38)):
            for yy, m, planes in ((y, None, None), (yp, M, (lo, 256.0, 1.0)), (yp, M, (lo + 1, 1.0, 1 / 16))):
                with monkeypatch.context() as mp:
                    mp.setattr(torch, "empty", poisoned)
                    got = scale_epilogue(yy, xs, ws, b, act, gated, out_dtype, m=m, planes=planes)
                want = scale_epilogue_ref(yy, xs, ws, b, act, gated, out_dtype, m=m, planes=planes)
                assert got.shape == (M, N) and got.dtype == out_dtype
                assert sqnr(want.float(), got.float()) > floor, (M, N, out_dtype, planes)
    with pytest.raises(ValueError, match="even column count"):
        scale_epilogue(torch.randn(2, 5), torch.ones(2), None, None, "silu", True, torch.float32)
    with pytest.raises(ValueError, match="w_scale must be"):
        scale_epilogue(torch.randn(2, 6), None, torch.ones(3), None, "silu", True, torch.float32)
    with pytest.raises(ValueError, match="do not fit"):  # the lo plane would pass y's rows
        scale_epilogue(torch.randn(8, 6), None, None, None, "none", False, torch.float32, m=3, planes=(6, 1.0, 1.0))
    from fused.dispatch import _cslt_shape_ok, _cslt_w8a16_ok  # split planes only where they are as fine as x

    assert _cslt_shape_ok(64, 96) and not _cslt_shape_ok(64, 100) and not _cslt_shape_ok(48, 96)  # 32-multiples

    assert _cslt_w8a16_ok(torch.int8, torch.bfloat16) and _cslt_w8a16_ok(torch.float8_e4m3fn, torch.bfloat16)
    assert _cslt_w8a16_ok(torch.int8, torch.float16) and not _cslt_w8a16_ok(torch.float8_e4m3fn, torch.float16)
    assert not _cslt_w8a16_ok(torch.int8, torch.float32)


def _fake_cslt(monkeypatch):
    """torch._cslt_compress / _cslt_sparse_mm emulated on the CPU with the semantics the route relies on
    (the real ones run in test_cslt_route_cuda): A [N, K] sparse, B [K, M] dense, alpha per row of A,
    transpose_result -> [M, N]. Returns the list of compressed weights, one per compression."""
    made = []
    monkeypatch.setattr(torch, "_cslt_compress", lambda w: made.append(w.clone()) or made[-1], raising=False)

    def mm(a, b, bias=None, alpha=None, out_dtype=None, transpose_result=False, **kw):
        r = a.float() @ b.float()
        if alpha is not None:
            r = r * alpha.float()[:, None]
        r = r.t() if transpose_result else r
        return r.to(out_dtype or b.dtype)
    monkeypatch.setattr(torch, "_cslt_sparse_mm", mm, raising=False)
    return made


@pytest.mark.parametrize("dynamic", [True, False])
@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
@pytest.mark.parametrize("op", ["sparse24_linear", "sparse24_gated"])
def test_cslt_route_glue_emulated(fmt, op, dynamic, monkeypatch):
    """The route's own steps (act_quant for W8A8, split planes for W8A16, padding, unpack24, transposes,
    epilogue) on the CPU with an emulated cuSPARSELt: same result as the reference to bf16 rounding,
    counted under its path; the compressed copy made once, counted, and made again when the weight changes."""
    from fused import dispatch
    from fused.reference import sparse24_gated_ref, sparse24_linear_ref
    from lowbit import sqnr

    made = _fake_cslt(monkeypatch)
    torch.manual_seed(0)
    R = 2 * 32 if op == "sparse24_gated" else 64
    values, meta, s = _packed(R, 96, fmt)
    b = torch.randn(R)
    # M = 21 (padded to 32 rows for cuSPARSELt), 3-D and not contiguous (every other feature of a wider x)
    x = torch.randn(3, 7, 192, dtype=torch.bfloat16)[..., ::2]
    ref = (sparse24_gated_ref if op == "sparse24_gated" else sparse24_linear_ref)(x, values, meta, s, b, "silu",
                                                                                   dynamic)
    monkeypatch.setattr(dispatch, "SPARSE_ROUTE", "cslt")
    dispatch.stats.clear()
    with dispatch.force_path("triton"):
        got = getattr(dispatch, op)(x, values, meta, s, b, "silu", dynamic=dynamic)
        assert got.shape == ref.shape and sqnr(ref.float(), got.float()) > 40
        assert dispatch.stats[(op, "cusparselt+triton:scale_epilogue")] == 1
        assert len(made) == 1 and made[0].dtype == values.dtype  # one 8-bit copy, W8A8 and W8A16 alike
        assert dispatch.cslt_cached_bytes(values) == made[0].numel() * made[0].element_size()
        assert torch.equal(getattr(dispatch, op)(x, values, meta, s, b, "silu", dynamic=dynamic), got)
        assert len(made) == 1  # the kept copy served the second call
        values.view(torch.uint8)[0, 0] = 0  # an in-place change to the weight: a new copy
        getattr(dispatch, op)(x, values, meta, s, b, "silu", dynamic=dynamic)
        assert len(made) == 2 and dispatch.cslt_cached_bytes(values) == made[0].numel() * made[0].element_size()


@pytest.mark.cuda
@pytest.mark.parametrize("dynamic", [True, False])
@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
@pytest.mark.parametrize("op", ["sparse24_linear", "sparse24_gated"])
def test_cslt_route_cuda(fmt, op, dynamic, monkeypatch):
    """The real cuSPARSELt route against the reference: W8A8 (per-token 8-bit x) and W8A16 (split planes,
    held to a tighter SQNR: its numerics are weight-only), at decode and prefill sizes, bf16 and fp16 x."""
    from fused import dispatch
    from fused.reference import sparse24_gated_ref, sparse24_linear_ref
    from lowbit import sqnr

    torch.manual_seed(0)
    R = 2 * 256 if op == "sparse24_gated" else 256
    values, meta, s = _packed(R, 512, fmt, "cuda")
    b = torch.randn(R, device="cuda")
    reference = sparse24_gated_ref if op == "sparse24_gated" else sparse24_linear_ref
    dtypes = [torch.bfloat16] + ([torch.float16] if fmt == "int8" or dynamic else [])
    for M, dtype in [(1, torch.bfloat16), (300, torch.bfloat16)] + [(17, d) for d in dtypes]:
        # M not a multiple of 16: padded; fp16 x: the bf16 product must not overflow on the way
        x = torch.randn(M, 512, device="cuda", dtype=dtype) * 4
        ref = reference(x, values, meta, s, b, "silu", dynamic)
        got = dispatch._cslt(x, values, meta, s, b, "silu", op == "sparse24_gated", dynamic)
        assert got.dtype == dtype and sqnr(ref.float(), got.float()) > (35 if dynamic else 40), (M, dtype)
    assert dispatch.cslt_cached_bytes(values) > 0
    monkeypatch.setattr(dispatch, "SPARSE_ROUTE", None)
    dispatch._sparse_routes.clear()
    offered = []
    monkeypatch.setattr(dispatch, "measure_route", lambda kind, key, cands, untimed=None, graph=False, **kw:
                        offered.extend(cands) or ("packed", "packed"))
    getattr(dispatch, op)(x, values, meta, s, b, "silu", dynamic=dynamic)
    assert "cslt" in offered  # among the routes timed
    assert dispatch.cslt_cached_bytes(values) == 0  # it lost here: its copy is not kept


@pytest.mark.cuda
def test_measure_route_graph_pick(monkeypatch):
    """graph=True: the eager pick pays host time, the graph pick does not. A candidate that sleeps 3 ms on
    the host but does little on the GPU must lose eagerly and win replayed; a GPU-heavier one the reverse."""
    import time
    from fused import dispatch

    monkeypatch.delenv("FUSED_TUNE", raising=False)
    a = torch.randn(2048, 2048, device="cuda")

    def host_heavy():
        time.sleep(0.003)
        return a + 1

    def gpu_heavy():  # ~0.3 ms of GPU work, little host time
        return a @ a @ a

    eager, graph = dispatch.measure_route("test_route", ("k",), {"host": host_heavy, "gpu": gpu_heavy}, graph=True)
    assert (eager, graph) == ("gpu", "host")


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
def test_sparse_route_under_graph_capture(fmt, monkeypatch):
    """A CUDA graph being captured takes the route's graph pick (here cslt, eager calls packed): the replay
    matches the W8A8 reference, at decode sizes (M = 3, where eager calls run weight-only) too."""
    from fused import dispatch
    from fused.reference import sparse24_gated_ref
    from lowbit import sqnr

    torch.manual_seed(0)
    values, meta, s = _packed(512, 256, fmt, "cuda")
    monkeypatch.setattr(dispatch, "SPARSE_ROUTE", None)
    for M in (3, 40):
        x = torch.randn(M, 256, device="cuda", dtype=torch.bfloat16)
        ref = sparse24_gated_ref(x, values, meta, s, None, "silu", True)
        # eager M <= 16 takes the weight-only GEMV (as the dense W8A8 ops do): its reference is weight-only
        ref_eager = sparse24_gated_ref(x, values, meta, s, None, "silu", M > dispatch.GEMV_MAX_M)
        dispatch._sparse_routes.clear()
        dispatch.sparse24_gated(x, values, meta, s, None, "silu", dynamic=True)  # measured (untimed: packed)
        key = next(iter(dispatch._sparse_routes))
        dispatch._sparse_routes[key] = ("packed", "cslt")
        dispatch._cslt(x, values, meta, s, None, "silu", True, True)  # its copy and algorithm, as a timing leaves them
        dispatch.stats.clear()
        g = dispatch._graph_replay(lambda: dispatch.sparse24_gated(x, values, meta, s, None, "silu", dynamic=True))
        assert g is not None
        assert dispatch.stats[("sparse24_gated", "cusparselt+triton:scale_epilogue")] >= 1
        out = dispatch.sparse24_gated(x, values, meta, s, None, "silu", dynamic=True)  # eager: packed
        assert sqnr(ref_eager.float(), out.float()) > 35
        with torch.cuda.graph(g2 := torch.cuda.CUDAGraph()):
            y = dispatch.sparse24_gated(x, values, meta, s, None, "silu", dynamic=True)
        y.fill_(float("nan"))
        g2.replay()
        assert sqnr(ref.float(), y.float()) > 35, M


def test_cslt_copy_counted_in_explain_and_bench(monkeypatch):
    """The cuSPARSELt copy a layer keeps shows in explain's bytes and the bench's weight MiB, and goes when
    the layer does (emulated cuSPARSELt on the CPU)."""
    import gc

    from fused import dispatch, explain
    from fused.bench import _weight_mib
    from fused.sparse_modules import FusedSparseLinear

    _fake_cslt(monkeypatch)
    torch.manual_seed(0)
    mod = FusedSparseLinear.from_float(torch.randn(64, 96), fmt="int8", dynamic=True)
    model = torch.nn.Sequential(mod)
    before = explain(model, print_table=False)[0]["bytes_after"]
    mib = _weight_mib(model)
    monkeypatch.setattr(dispatch, "SPARSE_ROUTE", "cslt")
    with dispatch.force_path("triton"):
        dispatch.sparse24_linear(torch.randn(20, 96, dtype=torch.bfloat16), mod.values, mod.meta, mod.scale,
                                 mod.bias, "none", dynamic=True)
    copy = dispatch.cslt_cached_bytes(mod.values)
    assert copy == 64 * 96  # the emulated copy: the dense int8 weight
    assert explain(model, print_table=False)[0]["bytes_after"] == before + copy
    assert _weight_mib(model) == pytest.approx(mib + copy / 2**20)
    total = dispatch.cslt_cached_bytes()
    del model, mod
    gc.collect()
    assert dispatch.cslt_cached_bytes() == total - copy  # kept only while the layer's values live


def test_explain_lists_sparse_routes(monkeypatch):
    """explain shows the routes a 2:4 layer's shape has taken, per M bucket (eager pick, and the graph pick
    where it differs)."""
    from fused import dispatch, explain
    from fused.kernels.tuning import m_bucket
    from fused.sparse_modules import FusedSparseLinear

    torch.manual_seed(0)
    mod = FusedSparseLinear.from_float(torch.randn(64, 96), fmt="int8")
    model = torch.nn.Sequential(mod)
    monkeypatch.setattr(dispatch, "SPARSE_ROUTE", None)
    monkeypatch.setattr(dispatch, "_sparse_routes", {})
    assert explain(model, print_table=False)[0]["routes"] is None
    with dispatch.force_path("triton"):
        dispatch.sparse24_linear(torch.randn(20, 96, dtype=torch.bfloat16), mod.values, mod.meta, mod.scale,
                                 mod.bias, "none")
    assert explain(model, print_table=False)[0]["routes"] == f"M~{m_bucket(20)}: packed"
    key = next(iter(dispatch._sparse_routes))
    dispatch._sparse_routes[key] = ("unpacked", "cslt")
    rows = explain(model, print_table=False)
    assert rows[0]["routes"] == f"M~{m_bucket(20)}: unpacked (graph: cslt)"
    from fused.explain import format_table

    assert "routes so far: M~" in format_table(rows)


@pytest.mark.parametrize("dynamic", [True, False])
def test_cslt_route_awkward_inputs_emulated(dynamic, monkeypatch):
    """The cuSPARSELt route (emulated) on an empty batch, a NaN token and fp32 / fp16 activations: empty
    output of the right shape; NaN stays in its own row; the other dtypes give the reference's result."""
    from fused import dispatch
    from fused.reference import sparse24_gated_ref
    from lowbit import sqnr

    _fake_cslt(monkeypatch)
    torch.manual_seed(0)
    values, meta, s = _packed(64, 96, "int8")
    monkeypatch.setattr(dispatch, "SPARSE_ROUTE", "cslt")
    with dispatch.force_path("triton"):
        y = dispatch.sparse24_gated(torch.randn(2, 0, 96, dtype=torch.bfloat16), values, meta, s, None, "silu",
                                    dynamic=dynamic)
        assert y.shape == (2, 0, 32)  # (M = 0 takes the packed kernels: nothing to time)
        x = torch.randn(5, 96, dtype=torch.bfloat16)
        x[2, 7] = float("nan")
        y = dispatch.sparse24_gated(x, values, meta, s, None, "silu", dynamic=dynamic)
        assert torch.isnan(y[2]).all() and not torch.isnan(y[[0, 1, 3, 4]]).any()
        for dtype in (torch.float16, torch.float32):
            x = torch.randn(5, 96, dtype=dtype)
            ref = sparse24_gated_ref(x, values, meta, s, None, "silu", dynamic)
            y = dispatch.sparse24_gated(x, values, meta, s, None, "silu", dynamic=dynamic)
            assert y.dtype == dtype and sqnr(ref.float(), y.float()) > 35, dtype
