"""The CPU path (fused/cpu.py) against the pure-torch reference, and dispatch's choice of CPU kernel.

These are the routes of a CPU whose int8 GEMMs are exact and fast (`cpu_isa.int8_backend` "onednn": VNNI / AMX x86),
forced here on any CPU (they stay correct where they are slow); the tests that run oneDNN's u8 matmul itself skip
where it is not exact. tests/test_cpu_isa.py covers the other backends' routes."""
import pytest
import torch
from torch import nn

import fused
from fused import cpu, cpu_isa, dispatch, reference
from fused.demo import LlamaMLP
from lowbit import quantize_weight, sqnr
from lowbit.quant import split_activation

@pytest.fixture(autouse=True)
def _vnni_routes(monkeypatch):
    monkeypatch.setattr(cpu_isa, "int8_backend", lambda: "onednn")


# Our kernels vs the reference (fp32 math, one rounding to the output dtype). bf16: the GEMMs round
# their output to bf16 and the epilogue rounds once per op, measured 44-52 dB (one bf16 rounding alone
# is ~55 dB); fp32 and fp16 compute in fp32 like the reference, measured >= 103 dB.
MIN_SQNR = {torch.bfloat16: 40.0, torch.float16: 90.0, torch.float32: 100.0}
FORMATS = [("int8", False), ("int8", True), ("float8_e4m3", False), ("float8_e4m3", True)]


def _weights(n, k, fmt, bias=True):
    q, s = quantize_weight(torch.randn(n, k), fmt)
    return q, s, (torch.randn(n) if bias else None)


def _run(op, x, q, s, b, act, dynamic):
    f, r = (dispatch.linear, reference.linear_ref) if op == "linear" else (dispatch.gated, reference.gated_ref)
    return f(x, q, s, b, act, dynamic), r(x, q, s, b, act, dynamic)


def _check(y, yr, dtype):
    assert y.shape == yr.shape and y.dtype == yr.dtype
    assert sqnr(yr, y) >= MIN_SQNR[dtype], f"SQNR {sqnr(yr, y):.1f} dB < {MIN_SQNR[dtype]}"


def _path(op, fmt, dynamic, dtype, m, k, n=None):
    return dispatch.plan(op, fmt, dynamic, "cpu", M=m, dtype=dtype, k=k, n=n)[0]


@pytest.mark.parametrize("fmt,dynamic", FORMATS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
@pytest.mark.parametrize("op", ["linear", "gated"])
@pytest.mark.parametrize("m,n,k", [(1, 96, 64), (3, 70, 48), (12, 48, 32), (17, 130, 37), (20, 64, 64), (9, 64, 1000)])
def test_matches_reference(fmt, dynamic, dtype, op, m, n, k):
    q, s, b = _weights(n, k, fmt)
    x = torch.randn(m, k, dtype=dtype)
    dispatch.stats.clear()
    y, yr = _run(op, x, q, s, b, "silu", dynamic)
    _check(y, yr, dtype)
    assert dispatch.stats[(op, _path(op, fmt, dynamic, dtype, m, k, n))] == 1
    assert all(p.startswith("cpu:") for (_, p) in dispatch.stats)


@pytest.mark.parametrize("fmt,dynamic", FORMATS)
@pytest.mark.parametrize("act", ["none", "relu", "gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("op", ["linear", "gated"])
def test_activations_and_bias(fmt, dynamic, act, bias, op):
    q, s, b = _weights(128, 64, fmt, bias)
    x = torch.randn(2, 64, dtype=torch.bfloat16)
    _check(*_run(op, x, q, s, b, act, dynamic), torch.bfloat16)


def test_path_choice(monkeypatch):
    bf16, f32 = torch.bfloat16, torch.float32
    monkeypatch.setattr(cpu, "ONEDNN", False)  # the default: int8 keeps 1 B/weight; explain offers the copy
    assert "FUSED_CPU_ONEDNN=1" in dispatch.plan("linear", "int8", True, "cpu", M=4, dtype=bf16, k=64)[1]
    # with oneDNN's kept copy (FUSED_CPU_ONEDNN=1): from M=2 on, for bf16 x up to SPLIT_QLINEAR_MAX_M
    monkeypatch.setattr(cpu, "ONEDNN", True)
    if cpu.onednn_ok():
        assert _path("linear", "int8", False, bf16, 1, 2048) == "cpu:int8pack"  # decode makes no copy
        assert _path("gated", "int8", False, bf16, 2, 2056) == "cpu:split_qlinear"  # any K
        assert _path("gated", "int8", False, bf16, cpu.SPLIT_QLINEAR_MAX_M, 2048) == "cpu:split_qlinear"
        assert _path("gated", "int8", False, bf16, cpu.SPLIT_QLINEAR_MAX_M + 1, 2048) == "cpu:int8_dequant_mm"
        assert _path("linear", "int8", False, torch.float16, 4, 2048) == "cpu:int8_dequant_mm"  # fp32 compute
        assert _path("linear", "int8", True, f32, 1, 2048) == "cpu:int_mm"
        assert _path("linear", "int8", True, f32, 2, 2048) == "cpu:qlinear"
        assert _path("linear", "int8", True, bf16, cpu.TILE_MIN_M - 1, 2048) == "cpu:qlinear"
        assert _path("linear", "int8", True, bf16, cpu.TILE_MIN_M, 2048) == "cpu:int_mm"  # per weight tile
        assert _path("linear", "int8", True, bf16, 4, cpu.ONEDNN_MAX_K + 1) == "cpu:int_mm"  # int32 sums
        assert dispatch.plan("linear", "int8", True, "cpu", M=4, dtype=bf16, k=64,
                             weight_cacheable=False)[0] == "cpu:int_mm"  # inference tensor: nothing kept
        assert "cpu:qlinear" in dispatch.plan("linear", "int8", True, "cpu", k=64)[1]  # explain names both
        assert _path("sparse24_linear", "int8", True, bf16, 4, 2048) == "cpu:s24+int_mm"  # 2:4 tiles: per call
    # and without it (FUSED_CPU_ONEDNN=0, or no oneDNN): 1 B/weight, the plain-weight kernels
    monkeypatch.setattr(cpu, "ONEDNN", False)
    assert _path("linear", "int8", False, bf16, 1, 2048) == "cpu:int8pack"
    assert _path("gated", "int8", False, bf16, cpu.INT8PACK_MAX_M, 2048) == "cpu:int8pack"
    assert _path("linear", "int8", False, bf16, cpu.INT8PACK_MAX_M + 1, 2048) == "cpu:split_int_mm"
    assert _path("linear", "int8", False, bf16, cpu.SPLIT_MAX_M, 2048) == "cpu:split_int_mm"
    assert _path("linear", "int8", False, bf16, cpu.SPLIT_MAX_M + 1, 2048) == "cpu:int8_dequant_mm"
    assert _path("linear", "int8", False, bf16, 1, 2056) == "cpu:split_int_mm"  # K % 16 != 0: no int8pack
    assert _path("linear", "int8", False, bf16, cpu.SPLIT_MAX_M + 1, 2056) == "cpu:int8_dequant_mm"
    assert _path("linear", "int8", False, f32, 1, 2048) == "cpu:int8_dequant_mm"  # 15 bits: bf16 x only
    assert _path("linear", "int8", True, bf16, 1, 2048) == "cpu:int_mm"
    assert _path("linear", "float8_e4m3", False, bf16, 1, 2048) == "cpu:fp8_dequant_mm"
    assert dispatch.plan("linear", "int8", False, "cpu", k=2048, weight_aligned=False)[0] == "cpu:split_int_mm"
    # a weight that stays in L2 (<= INT8PACK_CACHED_BYTES): int8pack's extra passes are cheap, it runs to a larger M
    small, big = cpu.INT8PACK_CACHED_BYTES // 2048, cpu.INT8PACK_CACHED_BYTES // 2048 + 1
    top = cpu.int8pack_max_m(small, 2048)
    assert top == cpu.INT8PACK_CACHED_MAX_M > cpu.INT8PACK_MAX_M == cpu.int8pack_max_m(big, 2048)
    assert _path("gated", "int8", False, bf16, top, 2048, small) == "cpu:int8pack"
    assert "stays in L2" in dispatch.plan("gated", "int8", False, "cpu", M=top, dtype=bf16, k=2048, n=small)[1]
    assert _path("gated", "int8", False, bf16, top + 1, 2048, small) == "cpu:int8_dequant_mm"
    # past int8pack's M such a weight skips the two int8 planes (one bf16 GEMM on it in cache is cheaper) ...
    assert _path("gated", "int8", False, bf16, cpu.SPLIT_MAX_M, 2048, small) == "cpu:int8_dequant_mm"
    assert "stays in L2" in dispatch.plan("gated", "int8", False, "cpu", M=top + 1, dtype=bf16, k=2048, n=small)[1]
    # ... but where int8pack cannot run it (K % 16) at int8pack's M the planes stay (faster on wide rows at M <= 4)
    assert _path("linear", "int8", False, bf16, top, 2040, small) == "cpu:split_int_mm"
    assert _path("linear", "int8", False, bf16, top + 1, 2040, small) == "cpu:int8_dequant_mm"
    assert _path("linear", "int8", False, bf16, cpu.INT8PACK_MAX_M + 1, 2048, big) == "cpu:split_int_mm"
    # a weight of INT8PACK_LARGE_BYTES or more: int8pack's first 4-row pass only, then the planes
    large = cpu.INT8PACK_LARGE_BYTES // 2048
    assert cpu.int8pack_max_m(large, 2048) == cpu.INT8PACK_LARGE_MAX_M < cpu.INT8PACK_MAX_M
    assert cpu.int8pack_max_m(large - 1, 2048) == cpu.INT8PACK_MAX_M
    assert _path("gated", "int8", False, bf16, cpu.INT8PACK_LARGE_MAX_M, 2048, large) == "cpu:int8pack"
    assert _path("gated", "int8", False, bf16, cpu.INT8PACK_LARGE_MAX_M + 1, 2048, large) == "cpu:split_int_mm"
    assert "MiB or more" in dispatch.plan("gated", "int8", False, "cpu", M=2, dtype=bf16, k=2048, n=large)[1]
    assert dispatch.plan("linear", "int8", False, "cpu", M=cpu.SPLIT_MAX_M + 1, k=2048,
                         weight_aligned=False)[0] == "cpu:int8_dequant_mm"
    with dispatch.force_path("reference"):
        assert _path("linear", "int8", False, bf16, 1, 2048) == "reference"


@pytest.mark.parametrize("fmt,dynamic", FORMATS)
def test_3d_noncontiguous_and_offset_views(fmt, dynamic):
    q, s, b = _weights(96, 64, fmt)
    base = torch.randn(3, 64, 5, dtype=torch.bfloat16)
    x = base.transpose(1, 2)  # [3, 5, 64], non-contiguous
    _check(*_run("gated", x, q, s, b, "silu", dynamic), torch.bfloat16)
    # a view with a storage offset: int8pack uses aligned loads and would crash on it; we copy
    flat = torch.randn(64 * 2 + 1, dtype=torch.bfloat16)
    xo = flat[1:].view(2, 64)
    assert xo.data_ptr() % 64 != 0
    _check(*_run("linear", xo, q, s, b, "none", dynamic), torch.bfloat16)


@pytest.mark.parametrize("fmt,dynamic", FORMATS)
@pytest.mark.parametrize("op", ["linear", "gated"])
def test_empty_batch(fmt, dynamic, op):
    q, s, b = _weights(64, 32, fmt)
    y = (dispatch.linear if op == "linear" else dispatch.gated)(torch.zeros(2, 0, 32, dtype=torch.bfloat16), q, s, b, "silu", dynamic)
    assert y.shape == (2, 0, 64 if op == "linear" else 32) and y.dtype == torch.bfloat16


@pytest.mark.parametrize("fmt,dynamic", FORMATS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_nan_propagates_like_reference(fmt, dynamic, dtype):
    q, s, b = _weights(64, 32, fmt)
    x = torch.randn(4, 32, dtype=dtype)
    x[1, 3] = float("nan")
    x[2, 5] = float("inf")
    y, yr = _run("gated", x, q, s, b, "silu", dynamic)
    assert torch.equal(y.isnan(), yr.isnan())
    assert y[1].isnan().all() and torch.isfinite(y[[0, 3]]).all()
    _check(y[[0, 3]], yr[[0, 3]], dtype)


@pytest.mark.parametrize("fmt,dynamic", FORMATS)
def test_zero_weight_row(fmt, dynamic):
    w = torch.randn(64, 32)
    w[5] = 0
    q, s = quantize_weight(w, fmt)
    x = torch.randn(3, 32, dtype=torch.bfloat16)
    y, yr = _run("linear", x, q, s, None, "none", dynamic)
    assert torch.isfinite(y).all() and (y[:, 5] == 0).all()
    _check(y, yr, torch.bfloat16)


@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
def test_tiling_covers_every_column(fmt, monkeypatch):
    # tiles of 16 rows over N = 75: 4 full tiles and a partial one
    monkeypatch.setattr(cpu, "TILE_BYTES", 16)
    q, s, b = _weights(75, 40, fmt)
    x = torch.randn(20, 40, dtype=torch.float32)
    _check(*_run("linear", x, q, s, b, "gelu", False), torch.float32)


@pytest.mark.parametrize("fmt,dynamic", FORMATS)
@pytest.mark.parametrize("m,dtype", [(2, torch.bfloat16), (20, torch.bfloat16), (600, torch.bfloat16),
                                     (20, torch.float32)])
@pytest.mark.parametrize("pair", [False, True])
def test_tile_wise_epilogue_covers_every_column(fmt, dynamic, m, dtype, pair, monkeypatch):
    """The epilogue (scales, bias, activation, gate) runs tile by tile of weight rows: with 16-row tiles over a gated
    weight of 2 x 37 rows (tiles straddling the gate / up boundary), per-tile GEMMs forced (TILE_MIN_M, M=600), and
    the output poisoned (torch.empty filled with NaN), every path (int8pack, split, int_mm, dequant) matches the
    reference, for the stacked weight and for separate gate / up tensors (run_pair)."""
    monkeypatch.setattr(cpu, "TILE_BYTES", 16)
    monkeypatch.setattr(cpu, "EPILOGUE_ELEMS", 16)
    monkeypatch.setattr(cpu, "WHOLE_ELEMS", 0)  # tiles even for these small products
    monkeypatch.setattr(cpu, "TILE_MIN_M", 512)
    q, s, b = _weights(74, 40 if m != 2 else 48, fmt)
    x = torch.randn(m, q.shape[1], dtype=dtype)
    det, fill = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    try:
        torch.use_deterministic_algorithms(True)
        torch.utils.deterministic.fill_uninitialized_memory = True
        dispatch.stats.clear()
        if pair:
            y = dispatch.gated_pair(x, q[:37], s[:37], b[:37], q[37:], s[37:], b[37:], "gelu_tanh", dynamic)
        else:
            y = dispatch.gated(x, q, s, b, "gelu_tanh", dynamic)
    finally:
        torch.use_deterministic_algorithms(det)
        torch.utils.deterministic.fill_uninitialized_memory = fill
    _check(y, reference.gated_ref(x, q, s, b, "gelu_tanh", dynamic), dtype)
    assert all(p.startswith("cpu:") for (_, p) in dispatch.stats)


def test_fp8_to_bf16_is_exact_for_every_finite_code():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn)
    finite = ~codes.float().isnan()
    got = cpu._fp8_tile_to_bf16(codes[finite].clone())
    assert torch.equal(got.float(), codes[finite].float())
    assert got.dtype == torch.bfloat16


def test_misaligned_weight_buffer_takes_the_safe_path():
    q, s, b = _weights(64, 48, "int8")
    store = torch.empty(64 * 48 + 1, dtype=torch.int8)
    qv = store[1:].view(64, 48)
    qv.copy_(q)
    assert not cpu.aligned(qv)
    dispatch.stats.clear()
    y, yr = _run("linear", torch.randn(1, 48, dtype=torch.bfloat16), qv, s, b, "none", False)
    _check(y, yr, torch.bfloat16)
    assert dispatch.stats[("linear", "cpu:split_int_mm")] == 1


@pytest.mark.parametrize("m,n,k", [(13, 78, 40), (2, 34, 1000), (300, 64, 48)])
def test_split_int_mm_matches_reference_and_its_off_switch(m, n, k, monkeypatch):
    """cpu:split_int_mm (bf16 x as two int8 planes, one _int_mm) against the reference at odd shapes (M=300 past
    SPLIT_MAX_M forced in; K=1000, where int8pack cannot run), 3-D and transposed x, NaN rows; SPLIT_MAX_M=0 off."""
    monkeypatch.setattr(cpu, "SPLIT_MAX_M", max(m, 16))
    monkeypatch.setattr(cpu, "ONEDNN", False)
    monkeypatch.setattr(cpu, "INT8PACK_CACHED_BYTES", 0)  # these small weights take the large ones' paths
    q, s, b = _weights(n, k, "int8")
    x = torch.randn(k, m, dtype=torch.bfloat16).t()  # non-contiguous [m, k]
    x[0, 1] = float("nan")
    for op in ("linear", "gated"):
        dispatch.stats.clear()
        y, yr = _run(op, x.reshape(1, m, k), q, s, b, "gelu_tanh", False)
        assert dispatch.stats[(op, "cpu:split_int_mm")] == 1
        assert torch.equal(y.isnan(), yr.isnan()) and y[0, 0].isnan().all()
        _check(y[0, 1:], yr[0, 1:], torch.bfloat16)
    # the planes give the reference's product to ~15 bits: far above the bf16 output's rounding
    y32 = cpu._matmul("cpu:split_int_mm", x[1:].contiguous(), q, s, False)
    ref = x[1:].float() @ (q.float() * s[:, None]).t()
    assert sqnr(ref, y32) > 70, sqnr(ref, y32)
    monkeypatch.setattr(cpu, "SPLIT_MAX_M", 0)
    assert _path("linear", "int8", False, torch.bfloat16, 13, 2048) == "cpu:int8_dequant_mm"


@pytest.mark.parametrize("m,k,chunk", [(1, 7, 1 << 18), (3, 33, 40), (17, 300, 600), (300, 130, 1 << 18), (5, 64, 1)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_split_planes_are_lowbits_split_activation(m, k, chunk, dtype, monkeypatch):
    """cpu._split_planes (reused chunk buffers) gives lowbit.split_activation's planes bit for bit, as int8 and as
    uint8 + 128, with its chunks ending mid-tensor (PLANE_CHUNK of a row or less), zero rows, a row at the largest
    magnitude, tokens with NaN / ±Inf (zero planes, NaN scale) and values that round half to even."""
    monkeypatch.setattr(cpu, "PLANE_CHUNK", chunk)
    x = (torch.randn(m, k) * torch.rand(m, 1) * 100).to(dtype)
    x[0] = 0
    if m > 2:
        x[1, 0], x[2, k // 2] = float("nan"), float("-inf")
        x[-1] = torch.arange(k) + 0.5  # with scale 1/... : many products at .5
    hi, lo, xs = split_activation(x)
    hi, lo = torch.nan_to_num(hi.float()).to(torch.int8), torch.nan_to_num(lo.float()).to(torch.int8)
    for u8 in (False, True):
        q, s, finite = cpu._split_planes(x, u8)
        assert finite == bool(xs.isfinite().all())
        assert q.shape == (2 * m, k) and q.dtype == (torch.uint8 if u8 else torch.int8)
        assert torch.equal(s.isnan(), xs.isnan()) and torch.equal(s[~s.isnan()], xs[~xs.isnan()])
        ok = ~xs.view(-1).isnan()
        got = (q.int() - 128) if u8 else q.int()
        assert torch.equal(got[:m][ok], hi.int()[ok]) and torch.equal(got[m:][ok], lo.int()[ok])
        assert (got[:m][~ok] == 0).all() and (got[m:][~ok] == 0).all()


def test_scale_cache_follows_in_place_updates():
    lin = fused.FusedLinear.from_float(torch.randn(64, 32), torch.randn(64))
    x = torch.randn(1, 32, dtype=torch.bfloat16)
    lin(x)  # fills the bf16 scale cache
    assert cpu.cached_bytes(lin.scale, lin.bias) == 64 * 2
    other = fused.FusedLinear.from_float(torch.randn(64, 32) * 3, torch.randn(64))
    lin.load_state_dict(other.state_dict())  # copies in place: the cache must not serve stale scales
    assert torch.equal(lin(x), other(x))  # same buffers, so the same bits as a module never run before


def test_scale_cache_under_inference_mode():
    lin = fused.FusedLinear.from_float(torch.randn(64, 32), None)
    x = torch.randn(2, 32, dtype=torch.bfloat16)
    with torch.inference_mode():
        y = lin(x)
    _check(y, reference.linear_ref(x, lin.qweight, lin.scale, None), torch.bfloat16)


def test_thread_count_respected_and_result_independent():
    q, s, b = _weights(256, 128, "int8")
    x = torch.randn(4, 128, dtype=torch.bfloat16)
    before = torch.get_num_threads()
    y_many = dispatch.gated(x, q, s, b, "silu", False)
    try:
        torch.set_num_threads(1)
        y_one = dispatch.gated(x, q, s, b, "silu", False)
        assert torch.get_num_threads() == 1  # the path never changes the setting
    finally:
        torch.set_num_threads(before)
    assert torch.equal(y_many, y_one)




def test_model_end_to_end_and_explain_names_the_cpu_path(monkeypatch):
    monkeypatch.setattr(cpu, "ONEDNN", False)  # int8pack at M=6 (oneDNN's kept copy: test_onednn_copy_*)
    model = nn.Sequential(LlamaMLP(64, 96))
    x = torch.randn(2, 3, 64)
    y_float = model(x)
    fused.quantize(model, fused.FusedInt8MLP())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = model(x)
    assert y.dtype == torch.bfloat16
    assert sqnr(y_float, y.float()) > 30  # int8 weights + bf16 vs the float model
    rows = fused.explain(model, print_table=False)
    assert [r["path"] for r in rows] == ["cpu:int8pack", "cpu:int8pack"]
    # explain counts the cached bf16 scales in the bytes after conversion
    assert rows[0]["bytes_after"] == model[0].gate_up.weight_bytes() + 2 * 192


def test_cpu_edge_bench_smoke(capsys):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[1] / "examples" / "cpu_edge_bench.py"
    spec = importlib.util.spec_from_file_location("cpu_edge_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    results, mem = bench.main(["--d", "64", "--h", "96", "--m", "1", "3", "--calls", "1", "--repeats", "1", "--fp8",
                               "--sparse", "--onednn-ab", "--fp32-acts"])
    assert set(results) == {1, 3} and all(t > 0 for r in results.values() for t in r.values())
    # by default 1 B/weight; the A/B variant's M=3 made oneDNN's copy of the int8 weights (counted)
    lo, hi = (0.5, 0.55) if cpu.onednn_ok() else (0.25, 0.28)
    assert lo < mem["ours int8 W8A16, oneDNN copy"] / mem["fp32 eager"] < hi
    assert mem["ours int8 W8A16 (bf16 acts)"] < 0.3 * mem["fp32 eager"]
    if cpu.onednn_ok():  # packed: the copy instead of the plain weight
        assert 0.25 < mem["ours int8 W8A8, pack_for_cpu"] / mem["fp32 eager"] < 0.27
    out = capsys.readouterr().out
    assert "| ours int8 W8A16 (bf16 acts) |" in out and "cpu:int8pack" in out
    assert not cpu.onednn_ok() or ("cpu:split_qlinear" in out and "cpu:qlinear" in out and "cpu:int_mm" in out)
    assert mem["ours int8 2:4 W8A8 (bf16 acts)"] < 0.7 * mem["ours int8 W8A8 (bf16 acts)"]
    assert "cpu:s24+int8pack" in out and "cpu:s24+int_mm" in out
    assert "| ours int8 W8A16 (fp32 acts) |" in out and "cpu:int8_dequant_mm" in out  # fp32 x: exact fp32 math


@pytest.mark.parametrize("fmt,dynamic", FORMATS)
@pytest.mark.parametrize("m", [1, 20])  # int8pack and tiled for int8 weight-only
def test_opcheck_on_the_cpu_path(fmt, dynamic, m):
    from fused import ops

    q, s, b = _weights(64, 48, fmt)
    x = torch.randn(m, 48, dtype=torch.bfloat16)
    # opcheck's schema check compares arguments with torch.allclose, which has no float8 kernel on the CPU
    kw = {} if fmt == "int8" else {"test_utils": ("test_faketensor", "test_autograd_registration",
                                                   "test_aot_dispatch_dynamic")}
    torch.library.opcheck(ops.linear, (x, q, s, b, "silu", dynamic), **kw)
    torch.library.opcheck(ops.gated, (x, q, s, None, "gelu", dynamic), **kw)


# ---------------------------------------------------------------- 2:4 weights: tiles expanded from the packed form

SPARSE = [("int8", False), ("int8", True), ("float8_e4m3", False), ("float8_e4m3", True), ("bfloat16", False)]
SPARSE_OPS = {"sparse24_linear": (dispatch.sparse24_linear, reference.sparse24_linear_ref),
              "sparse24_gated": (dispatch.sparse24_gated, reference.sparse24_gated_ref)}


def _packed(n, k, fmt, bias=True, seed=0):
    from sparsity import magnitude_mask_24, pack_24

    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g)
    w = w * magnitude_mask_24(w.abs())
    q, s = (w.to(torch.bfloat16), None) if fmt == "bfloat16" else quantize_weight(w, fmt)
    return (*pack_24(q), s, torch.randn(n, generator=g) if bias else None)


def _run_sparse(op, x, packed, act="silu", dynamic=False):
    f, r = SPARSE_OPS[op]
    return f(x, *packed, act, dynamic), r(x, *packed, act, dynamic)


@pytest.mark.parametrize("fmt,dynamic", SPARSE)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
@pytest.mark.parametrize("op", list(SPARSE_OPS))
@pytest.mark.parametrize("m,n,k", [(1, 96, 64), (3, 70, 36), (17, 130, 44), (300, 64, 132), (12, 48, 1000)])
def test_sparse24_matches_reference(fmt, dynamic, dtype, op, m, n, k):
    packed = _packed(n, k, fmt, seed=m + n + k)
    x = torch.randn(m, k, dtype=dtype)
    dispatch.stats.clear()
    y, yr = _run_sparse(op, x, packed, "silu", dynamic)
    _check(y, yr, dtype)
    path = dispatch.plan(op, fmt, dynamic, "cpu", M=m, dtype=dtype, k=k)[0]
    assert path.startswith("cpu:s24+") and dict(dispatch.stats) == {(op, path): 1}


def test_sparse24_path_choice():
    bf16, f32 = torch.bfloat16, torch.float32

    def path(fmt, dynamic, dtype, m, k):
        return dispatch.plan("sparse24_linear", fmt, dynamic, "cpu", M=m, dtype=dtype, k=k)[0]

    assert path("int8", False, bf16, 1, 2048) == "cpu:s24+int8pack"  # the expanded tiles are aligned
    assert path("int8", False, bf16, cpu.INT8PACK_MAX_M + 1, 2048) == "cpu:s24+split_int_mm"
    assert path("int8", False, bf16, cpu.SPLIT_MAX_M + 1, 2048) == "cpu:s24+int8_dequant_mm"
    assert path("int8", False, bf16, 1, 2052) == "cpu:s24+split_int_mm"  # K % 16 != 0
    assert path("int8", True, bf16, 1, 2048) == "cpu:s24+int_mm"
    assert path("float8_e4m3", True, f32, 1, 2048) == "cpu:s24+fp8_dequant_mm"
    assert path("bfloat16", False, f32, 64, 2048) == "cpu:s24+bf16_mm"
    with dispatch.force_path("reference"):
        assert path("int8", False, bf16, 1, 2048) == "reference"
    with pytest.raises(ValueError, match="does not take a 2:4 weight"):
        cpu._matmul("cpu:int8pack", torch.randn(1, 64, dtype=bf16), cpu.Packed24(*_packed(8, 64, "int8")[:2]),
                    torch.ones(8), False)


@pytest.mark.parametrize("fmt,dynamic", SPARSE)
@pytest.mark.parametrize("m,dtype", [(2, torch.bfloat16), (20, torch.float32)])  # int8pack and the GEMM tiles
def test_sparse24_tiles_cover_every_row_and_bound_the_dense_weight(fmt, dynamic, m, dtype, monkeypatch):
    # tiles of 16 rows over N = 75 (4 full tiles and a partial one), outputs poisoned: torch.empty is filled
    # with NaN / the largest integer, so a column no tile wrote fails the check
    monkeypatch.setattr(cpu, "EXPAND_TILE_WEIGHTS", 16 * 64)
    tiles = []
    real = cpu.expand_24
    monkeypatch.setattr(cpu, "expand_24", lambda v, mt, *a: tiles.append(v.shape[0]) or real(v, mt, *a))
    packed = _packed(75, 64, fmt)
    x = torch.randn(m, 64, dtype=dtype)
    det, fill = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    try:
        torch.use_deterministic_algorithms(True)
        torch.utils.deterministic.fill_uninitialized_memory = True
        y, yr = _run_sparse("sparse24_linear", x, packed, "gelu", dynamic)
    finally:
        torch.use_deterministic_algorithms(det)
        torch.utils.deterministic.fill_uninitialized_memory = fill
    _check(y, yr, dtype)
    assert tiles == [16, 16, 16, 16, 11]  # never more than one tile of dense rows at a time


@pytest.mark.parametrize("fmt,dynamic", SPARSE)
def test_sparse24_views_empty_nan_and_zero_rows(fmt, dynamic):
    packed = _packed(96, 64, fmt)
    base = torch.randn(3, 64, 5, dtype=torch.bfloat16)
    _check(*_run_sparse("sparse24_gated", base.transpose(1, 2), packed, "silu", dynamic), torch.bfloat16)  # 3-D, strided
    flat = torch.randn(64 * 2 + 1, dtype=torch.bfloat16)
    _check(*_run_sparse("sparse24_linear", flat[1:].view(2, 64), packed, "none", dynamic), torch.bfloat16)  # offset
    y = dispatch.sparse24_gated(torch.zeros(2, 0, 64, dtype=torch.bfloat16), *packed, "silu", dynamic)
    assert y.shape == (2, 0, 48) and y.dtype == torch.bfloat16
    x = torch.randn(4, 64, dtype=torch.float32)
    x[1, 3] = float("nan")
    y, yr = _run_sparse("sparse24_linear", x, packed, "relu", dynamic)
    assert torch.equal(y.isnan(), yr.isnan()) and y[1].isnan().all() and torch.isfinite(y[[0, 2, 3]]).all()
    values, meta, s, b = packed
    values = values.clone()
    values[7] = 0  # a zero weight row (scale 0 for 8-bit values)
    s = None if s is None else s.clone().index_fill_(0, torch.tensor([7]), 0.0)
    y, yr = _run_sparse("sparse24_linear", x[[0, 2]], (values, meta, s, None), "none", dynamic)
    assert (y[:, 7] == 0).all()
    _check(y, yr, torch.float32)


def test_sparse24_module_on_cpu_keeps_its_memory_and_names_the_path():
    from sparsity import prune_24_

    model = nn.Sequential(LlamaMLP(64, 96))
    prune_24_(model)
    x = torch.randn(2, 3, 64)
    y_float = model(x)
    fused.quantize(model, fused.FusedInt8MLP(sparsity="2:4"))
    dispatch.stats.clear()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = model(x)
    assert sqnr(y_float, y.float()) > 30
    assert {p for (_, p) in dispatch.stats} == {"cpu:s24+int8pack"}
    rows = fused.explain(model, print_table=False)
    assert [r["path"] for r in rows] == ["cpu:s24+int8pack"] * 2
    # no derived copy after the calls: 0.625 B/weight + the fp32 row scales
    for r, mod in zip(rows, [model[0].gate_up, model[0].down]):
        n, k = mod.values.shape[0], 2 * mod.values.shape[1]
        assert r["bytes_after"] == mod.weight_bytes() == n * k * 0.625 + 4 * n




onednn = pytest.mark.skipif(not cpu.onednn_ok(), reason="no exact oneDNN int8 matmul here (x86 torch with mkldnn; "
                            "without VNNI its u8 pair sums saturate: refused)")


@pytest.fixture
def pack_small(monkeypatch):  # oneDNN takes these small weights too (test_onednn_size_rule: the default)
    monkeypatch.setattr(cpu, "ONEDNN_MIN_BYTES", 0)


@pytest.fixture
def onednn_on(monkeypatch, pack_small):
    monkeypatch.setattr(cpu, "ONEDNN", True)


@onednn
@pytest.mark.parametrize("m,n,k", [(2, 96, 64), (3, 70, 48), (17, 130, 37), (300, 34, 1000)])
def test_onednn_paths_match_the_plain_weight_kernels(m, n, k, monkeypatch, onednn_on):
    """cpu:qlinear / cpu:split_qlinear (oneDNN on its kept copy) give the int32 sums of torch._int_mm (bit for bit in
    fp32 where |sum| < 2^24) at odd shapes, on 3-D non-contiguous x, and their ops match the reference."""
    monkeypatch.setattr(cpu, "SPLIT_QLINEAR_MAX_M", 512)
    q, s, b = _weights(n, k, "int8")
    x = torch.randn(k, m, dtype=torch.bfloat16).t()  # non-contiguous [m, k]
    for new, old, dynamic in (("cpu:qlinear", "cpu:int_mm", True), ("cpu:split_qlinear", "cpu:split_int_mm", False)):
        assert torch.equal(cpu._matmul(new, x, q, s, dynamic), cpu._matmul(old, x, q, s, dynamic)), new
        for op in ("linear", "gated"):
            dispatch.stats.clear()
            y, yr = _run(op, x.reshape(1, m, k), q, s, b, "gelu", dynamic)
            assert dispatch.stats[(op, new)] == 1
            _check(y, yr, torch.bfloat16)
    ref = x.float() @ (q.float() * s[:, None]).t()  # the planes: ~15 bits, far above the bf16 output's rounding
    assert sqnr(ref, cpu._matmul("cpu:split_qlinear", x, q, s, False)) > 70


@onednn
@pytest.mark.parametrize("dynamic", [False, True])
def test_onednn_nan_and_inf_rows_propagate_like_the_reference(dynamic, onednn_on):
    q, s, b = _weights(64, 32, "int8")
    q[5].zero_()  # 0 · Inf = NaN in the reference, in that column only
    x = torch.randn(5, 32, dtype=torch.bfloat16)
    x[1, 3] = float("nan")
    x[2, 5] = float("inf")
    dispatch.stats.clear()
    y, yr = _run("linear", x, q, s, b, "none", dynamic)
    assert dispatch.stats[("linear", "cpu:qlinear" if dynamic else "cpu:split_qlinear")] == 1
    assert torch.equal(y.isnan(), yr.isnan()) and torch.equal(y.isinf(), yr.isinf())
    if not dynamic:  # Inf stays Inf (W8A16), not a NaN row
        assert y[2].isinf().any() and y[2, 5].isnan()
    _check(y[[0, 3, 4]], yr[[0, 3, 4]], torch.bfloat16)


@onednn
def test_onednn_copy_is_kept_counted_and_follows_in_place_updates(onednn_on):
    lin = fused.FusedLinear.from_float(torch.randn(64, 32), torch.randn(64))
    x = torch.randn(3, 32, dtype=torch.bfloat16)
    lin(x[:1])  # M=1: int8pack, no copy
    assert cpu.cached_bytes(lin.qweight) == 0
    lin(x)
    copy_bytes = cpu.cached_bytes(lin.qweight)
    assert copy_bytes == 64 * 32  # the weight (unit scales and zero points are shared per width)
    row = fused.explain(lin, print_table=False)[0]
    assert row["bytes_after"] == lin.weight_bytes() + copy_bytes + cpu.cached_bytes(lin.scale, lin.bias)
    assert "oneDNN" in row["why"]
    other = fused.FusedLinear.from_float(torch.randn(64, 32) * 3, torch.randn(64))
    lin.load_state_dict(other.state_dict())  # in place: the kept copy must not serve the old weight
    assert torch.equal(lin(x), other(x))
    cpu.clear_cache()
    assert cpu.cached_bytes(lin.qweight) == 0


@onednn
def test_onednn_not_used_for_inference_tensors_or_when_off(monkeypatch, onednn_on):
    monkeypatch.setattr(cpu, "INT8PACK_CACHED_BYTES", 0)  # this small weight takes the large ones' paths
    with torch.inference_mode():
        lin = fused.FusedLinear.from_float(torch.randn(64, 32), None)  # buffers without a version counter
        x = torch.randn(20, 32, dtype=torch.bfloat16)
        dispatch.stats.clear()
        y = lin(x)
    assert dispatch.stats[("linear", "cpu:split_int_mm")] == 1 and cpu.cached_bytes(lin.qweight) == 0
    _check(y, reference.linear_ref(x, lin.qweight, lin.scale, None), torch.bfloat16)
    monkeypatch.setattr(cpu, "ONEDNN", False)
    lin2 = fused.FusedLinear.from_float(torch.randn(64, 32), None, dynamic=True)
    dispatch.stats.clear()
    lin2(torch.randn(4, 32))
    assert dispatch.stats[("linear", "cpu:int_mm")] == 1 and cpu.cached_bytes(lin2.qweight) == 0


@onednn
@pytest.mark.parametrize("dynamic", [False, True])
def test_pack_for_cpu_keeps_one_byte_per_weight_and_runs_on_the_copy_at_every_m(dynamic, monkeypatch, pack_small):
    """fused.pack_for_cpu: oneDNN's copy replaces the plain weight (bytes unchanged but for the 1-byte stand-ins), every
    M runs the oneDNN path (W8A8 past TILE_MIN_M too), against the reference on the plain weights; fp32 activations
    too (W8A16: 15 bits per token); unpacking restores the buffers exactly."""
    monkeypatch.setattr(cpu, "TILE_MIN_M", 64)  # W8A8 at M=300 would run _int_mm per tile on a plain weight
    model = nn.Sequential(LlamaMLP(64, 96))
    fused.quantize(model, fused.FusedInt8MLP(weight_only=not dynamic))
    layers = [model[0].gate_up, model[0].down]
    plain = [(m.qweight.clone(), m.scale, m.bias, m.op_name) for m in layers]
    before = sum(r["bytes_after"] for r in fused.explain(model, print_table=False))
    assert fused.pack_for_cpu(model) == 2 and fused.pack_for_cpu(model) == 0  # packing twice changes nothing
    assert all(cpu.packed_only(m.qweight) and m.qweight.untyped_storage().nbytes() == 1 for m in layers)
    rows = fused.explain(model, print_table=False)
    assert sum(r["bytes_after"] for r in rows) == before + 2  # the copy replaces the weight; 1-byte stand-ins
    path = "cpu:qlinear" if dynamic else "cpu:split_qlinear"
    assert [r["path"] for r in rows] == [path, path] and "pack_for_cpu" in rows[0]["why"]
    for m_ in (1, 3, 17, 300):
        x = torch.randn(64, m_, dtype=torch.bfloat16).t()  # non-contiguous
        dispatch.stats.clear()
        y = model(x.reshape(1, m_, 64))[0]
        assert dispatch.stats == {("gated", path): 1, ("linear", path): 1}
        (qg, sg, bg, _), (qd, sd, bd, _) = plain
        h = reference.gated_ref(x, qg, sg, bg, "silu", dynamic)
        _check(y, reference.linear_ref(h, qd, sd, bd, "none", dynamic), torch.bfloat16)
    dispatch.stats.clear()
    x32 = torch.randn(2, 64)
    y32 = model(x32)  # fp32 x: the same path (W8A16: 15 bits per token, not exact fp32 math)
    assert y32.dtype == torch.float32 and dispatch.stats == {("gated", path): 1, ("linear", path): 1}
    h = reference.gated_ref(x32, qg, sg, bg, "silu", dynamic)
    assert sqnr(reference.linear_ref(h, qd, sd, bd, "none", dynamic), y32) > 70
    assert fused.pack_for_cpu(model, pack=False) == 2
    assert all(torch.equal(m.qweight, q) for m, (q, *_) in zip(layers, plain))


@onednn
def test_pack_for_cpu_state_dict_load_copy_pickle_moves_and_compile(tmp_path, pack_small):
    import copy
    import pickle

    model = nn.Sequential(LlamaMLP(64, 96))
    fused.quantize(model, fused.FusedInt8MLP(weight_only=False))
    sd_plain = {k: v.clone() for k, v in model.state_dict().items()}
    fused.pack_for_cpu(model)
    x = torch.randn(5, 64, dtype=torch.bfloat16)
    y = model(x)
    sd = model.state_dict()  # the plain weight, as an unpacked model's
    assert sd.keys() == sd_plain.keys() and all(torch.equal(sd[k], sd_plain[k]) for k in sd)
    fused.save(model, tmp_path / "m.safetensors")
    for load in (lambda m: fused.load(tmp_path / "m.safetensors", m), lambda m: m.load_state_dict(sd_plain)):
        other = nn.Sequential(LlamaMLP(64, 96))  # other weights, packed: loaded, packed again
        fused.quantize(other, fused.FusedInt8MLP(weight_only=False))
        fused.pack_for_cpu(other)
        load(other)
        assert cpu.packed_only(other[0].down.qweight) and torch.equal(other(x), y)
    for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert cpu.packed_only(twin[0].gate_up.qweight) and torch.equal(twin(x), y)
    model.to(torch.bfloat16)  # a move or cast goes through the plain weight and packs it again on the CPU
    assert cpu.packed_only(model[0].gate_up.qweight) and torch.equal(model(x), y)
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    for m_ in (3, 9):
        xm = torch.randn(m_, 64, dtype=torch.bfloat16)
        assert torch.equal(compiled(xm), model(xm))
    stray = model[0].down.qweight[:1, :1].clone().expand(model[0].down.qweight.shape)  # a stand-in's look-alike
    with pytest.raises(RuntimeError, match="stand-in"):
        dispatch.linear(torch.randn(3, 96, dtype=torch.bfloat16), stray, model[0].down.scale, None, "none", True)


@onednn
def test_pack_for_cpu_per_linear_conversion_under_compile(pack_small):
    """The default per-Linear conversion, packed: torch.compile's gate/up pair op (fused.compile_passes) runs on the two
    packed weights, against the reference on the plain ones."""
    model = nn.Sequential(LlamaMLP(64, 96))
    fused.quantize(model, fused.FusedInt8MLP(), blocks=False)
    mlp = model[0]
    plain = {n: (getattr(mlp, n).qweight.clone(), getattr(mlp, n).scale) for n in ("gate_proj", "up_proj", "down_proj")}
    assert fused.pack_for_cpu(model) == 3
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    x = torch.randn(7, 64, dtype=torch.bfloat16)
    dispatch.stats.clear()
    y = compiled(x)
    assert dispatch.stats == {("gated_pair", "cpu:split_qlinear"): 1, ("linear", "cpu:split_qlinear"): 1}
    (qg, sg), (qu, su), (qd, sd) = plain.values()
    h = reference.gated_ref(x, torch.cat([qg, qu]), torch.cat([sg, su]), None, "silu", False)
    _check(y, reference.linear_ref(h, qd, sd, None, "none", False), torch.bfloat16)


@onednn
def test_onednn_size_rule(monkeypatch):
    """Weights under cpu.ONEDNN_MIN_BYTES stay on the plain-weight kernels, which are as fast or faster there (oneDNN's
    ~20 µs per call; _int_mm's reorder of a weight in L2 is cheap): neither the kept copy nor fused.pack_for_cpu takes
    them, and explain says why; a larger weight of the same model is packed and runs on oneDNN."""
    bf16 = torch.bfloat16
    monkeypatch.setattr(cpu, "ONEDNN", True)
    small, large = (1408, 512), (2048, 1024)  # 1.4 MiB, 2 MiB
    plan = lambda nk, dyn: dispatch.plan("linear", "int8", dyn, "cpu", M=4, dtype=bf16, k=nk[1], n=nk[0])  # noqa
    assert plan(small, True)[0] == "cpu:int_mm" and "stays in L2" in plan(small, True)[1]
    assert plan(small, False)[0] == "cpu:int8pack" and "stays in L2" in plan(small, False)[1]
    assert plan(large, True)[0] == "cpu:qlinear" and plan(large, False)[0] == "cpu:split_qlinear"
    pow2 = (768, 2048)  # W8A8: _int_mm's reorder is slow on such K at any size; W8A16's int8pack does no reorder
    assert plan(pow2, True)[0] == "cpu:qlinear" and plan(pow2, False)[0] == "cpu:int8pack"
    assert cpu.onednn_pays(768, 3072) and not cpu.onednn_pays(768, 2304) and not cpu.onednn_pays(768, 1024)
    monkeypatch.setattr(cpu, "ONEDNN", False)
    model = nn.Sequential(nn.Sequential(nn.Linear(1024, 2304), nn.ReLU(), nn.Linear(2304, 64)))
    fused.quantize(model, fused.FusedInt8MLP(weight_only=False))
    plain = model(torch.randn(3, 1024, dtype=bf16))
    assert fused.pack_for_cpu(model) == 1  # the [2304, 1024] weight only
    x = torch.randn(3, 1024, dtype=bf16)
    dispatch.stats.clear()
    y = model(x)
    assert sorted(dispatch.stats) == [("linear", "cpu:int_mm"), ("linear", "cpu:qlinear")]
    rows = fused.explain(model, print_table=False)
    assert any("stays in L2" in r["why"] for r in rows) and any("pack_for_cpu" in r["why"] for r in rows)
    assert fused.pack_for_cpu(model, pack=False) == 1
    assert torch.equal(model(x), y) and plain.shape == y.shape  # the same int32 sums on either weight


@pytest.mark.parametrize("rows", [1, 2, 3, 8, 9, 17, 40])
def test_int_mm_swapped_operands_are_bit_equal(rows, monkeypatch):
    """cpu._int_mm: for K a multiple of 1024 (>= 2048) the weight goes in as torch._int_mm's first operand (token rows
    padded to a multiple of 8); the int32 sums equal the plain call's, and the paths built on it match the reference."""
    K, N = 2048, 200
    q = torch.randint(-127, 128, (rows, K), dtype=torch.int8)
    w = torch.randint(-127, 128, (N, K), dtype=torch.int8)
    y = cpu._int_mm(q, w)
    assert y.shape == (rows, N) and torch.equal(y, torch._int_mm(q, w.t()))
    assert not cpu.pow2_k(1024) and not cpu.pow2_k(2304) and cpu.pow2_k(14336)
    monkeypatch.setattr(cpu, "ONEDNN", False)
    x = torch.randn(rows, K, dtype=torch.bfloat16)
    qw, sw = quantize_weight(torch.randn(N, K), "int8")
    for path, dynamic in (("cpu:int_mm", True), ("cpu:split_int_mm", False)):
        got = cpu.run(path, "gated", x, qw, sw, None, "silu", dynamic)
        monkeypatch.setattr(cpu, "INT_MM_SWAP", False)
        assert torch.equal(got, cpu.run(path, "gated", x, qw, sw, None, "silu", dynamic))  # the same bits
        monkeypatch.setattr(cpu, "INT_MM_SWAP", True)
        _check(got, reference.gated_ref(x, qw, sw, None, "silu", dynamic), torch.bfloat16)
    if rows >= 3:  # a NaN and an Inf token propagate as in the reference; the other tokens keep their bits
        bad = x.clone()
        bad[0, 5], bad[2, 7] = float("nan"), float("inf")
        for path, dynamic in (("cpu:int_mm", True), ("cpu:split_int_mm", False)):
            got = cpu.run(path, "gated", bad, qw, sw, None, "silu", dynamic)
            ref = reference.gated_ref(bad, qw, sw, None, "silu", dynamic)
            assert torch.equal(got.isnan(), ref.isnan()) and torch.equal(got.isinf(), ref.isinf())
            assert torch.equal(got[1], cpu.run(path, "gated", x, qw, sw, None, "silu", dynamic)[1])
