"""Tiled 2:4 meta: the bytes of our row-major meta in cuSPARSELt's tile order, so one buffer
[values | tiled meta] is cuSPARSELt's compressed weight and feeds our kernels too (0.625 B/weight, not 1.25).

- the layout against real torch._cslt_compress output (tests/data/cslt_compressed_h200.pt: coded 64x64 and
  128x128 matrices compressed on the H200, cuSPARSELt 0.8, 2026-12-01) and, on CUDA, against the live library;
- every kernel that reads meta (sparse24_gemv's three modes, sparse24_linear / gated, unpack24) gives the same
  bits from tiled meta as from row-major meta (TRITON_INTERPRET=1 on the CPU), outputs poisoned first;
- the module: set_tiled_meta, forward, state_dict (always row-major), load, fused.save / load, param_bytes."""
import os

import pytest
import torch

from fused import dispatch
from fused.kernels.sparse24_gemv import _cfg, sparse24_gemv
from fused.kernels.sparse24_linear import sparse24_gated, sparse24_linear
from fused.kernels.unpack24 import unpack24
from fused.reference import sparse24_gated_ref, sparse24_linear_ref
from fused.sparse_modules import FusedSparseGatedLinear, FusedSparseLinear
from fused.explain import explain as _explain
from fused.sweep import param_bytes
from lowbit import quantize_weight, sqnr
from sparsity import magnitude_mask_24, pack_24, unpack_24
from sparsity.packing import row_meta, tile_meta, tiled_meta_ok, untile_meta

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "cslt_compressed_h200.pt")
POS = torch.tensor([[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]])


def coded(n, k, e):
    """The cuSPARSELt layout probe matrix: kept value j of row n = base-126 digit e of its index + 1
    (e < 3), group g's positions = base-6 digit e of its index."""
    vid = torch.arange(n * k // 2).reshape(n, k // 2)
    gid = torch.arange(n * k // 4).reshape(n, k // 4)
    vals = (vid // 126 ** min(e, 2)) % 126 + 1 if e < 3 else (vid * 7 + e) % 126 + 1
    w = torch.zeros(n, k // 4, 4, dtype=torch.uint8)
    w.scatter_(2, POS[(gid // 6 ** e) % 6], vals.reshape(n, k // 4, 2).to(torch.uint8))
    return w.reshape(n, k)


def fused_explain(model):
    return _explain(model, print_table=False)


def buffer(w):
    v, m = pack_24(w)
    return torch.cat([v.view(torch.uint8).reshape(-1), tile_meta(m).reshape(-1)])


def test_layout_matches_cusparselt_dumps():
    dumps = torch.load(FIXTURE)
    for (n, k), bufs in dumps.items():
        for e in range(bufs.shape[0]):
            assert torch.equal(buffer(coded(n, k, e)), bufs[e]), (n, k, e)


def test_layout_formula():
    # byte (n, b) of row-major meta sits at 512·(n//64 · K/64 + b//8) + the bit-interleaved in-tile offset
    n_, k_ = 128, 192
    meta = torch.randint(0, 256, (n_, k_ // 8), dtype=torch.uint8)
    flat = tile_meta(meta).reshape(-1)
    for n in range(n_):
        for b in range(k_ // 8):
            off = 512 * (n // 64 * (k_ // 64) + b // 8) + (((n >> 3) & 1) | ((b >> 2) & 1) << 1 | (b & 1) << 2
                                                           | ((b >> 1) & 1) << 3 | (n & 7) << 4 | ((n >> 4) & 3) << 7)
            assert flat[off] == meta[n, b]


def test_round_trip_and_bad_shapes():
    for n, k in [(64, 64), (128, 192), (192, 512)]:
        m = torch.randint(0, 256, (n, k // 8), dtype=torch.uint8)
        t = tile_meta(m)
        assert t.shape == (n // 64, k // 64, 512) and torch.equal(untile_meta(t), m) and torch.equal(row_meta(t), m)
        assert row_meta(m) is m
    assert tiled_meta_ok(64, 128) and not tiled_meta_ok(96, 128) and not tiled_meta_ok(64, 96) and not tiled_meta_ok(0, 64)
    with pytest.raises(ValueError, match="multiples of 64"):
        tile_meta(torch.zeros(96, 16, dtype=torch.uint8))
    with pytest.raises(ValueError, match="multiples of 64"):
        tile_meta(torch.zeros(64, 16, dtype=torch.int16))
    with pytest.raises(ValueError, match="tiled meta"):
        untile_meta(torch.zeros(1, 2, 256, dtype=torch.uint8))


def weights(n, k, vdtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g)
    w = w * magnitude_mask_24(w.abs())
    w[1] = 0
    if vdtype == torch.bfloat16:
        return (*pack_24(w.to(torch.bfloat16)), None)
    q, s = quantize_weight(w, "int8" if vdtype == torch.int8 else "float8_e4m3")
    return (*pack_24(q), s)


def test_unpack_reference_and_kernel():
    for vdtype in (torch.int8, torch.float8_e4m3fn):
        v, m, _ = weights(128, 192, vdtype)
        dense = unpack_24(v, m)
        assert torch.equal(unpack_24(v, tile_meta(m)).view(torch.uint8), dense.view(torch.uint8))
        assert torch.equal(unpack24(v, tile_meta(m)).view(torch.uint8), dense.view(torch.uint8))
    with pytest.raises(ValueError, match="tiled meta"):
        unpack_24(v, torch.zeros(2, 2, 512, dtype=torch.uint8))


def poisoned(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype)


# (M, mode, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K): each decode form on whole 64-column K steps
GEMV_FORMS = [(1, "gather", 1, 16, 64, 2), (1, "vsel", 1, 32, 128, 1), (1, "vsel", 1, 16, 64, 3),
              (3, "vsel", 4, 16, 64, 2), (3, "gather", 4, 32, 64, 1), (3, "dot", 16, 16, 64, 2),
              (16, "dot", 16, 32, 128, 1), (1, "vsel", 1, 64, 64, 2),  # gated H=96: gathers
              (1, "quad", 1, 16, 64, 2), (1, "quad", 1, 64, 64, 1)]


@pytest.mark.parametrize("gated", [False, True], ids=["linear", "gated"])
@pytest.mark.parametrize("vdtype", [torch.int8, torch.float8_e4m3fn], ids=["int8", "fp8"])
@pytest.mark.parametrize("M,mode,bm,bn,bk,split", GEMV_FORMS,
                         ids=[f"M{f[0]}-{f[1]}-bk{f[4]}-s{f[5]}" for f in GEMV_FORMS])
def test_gemv_tiled_equals_row_major(M, mode, bm, bn, bk, split, vdtype, gated):
    n, k = (192 if gated else 64), 192  # gated: H = 96, so the up rows start inside a row tile
    v, m, s = weights(n, k, vdtype, seed=M)
    b = torch.randn(n) if M == 3 else None
    xs = torch.randn(M, 2 * k, dtype=torch.bfloat16)[:, ::2]  # a strided view
    if mode == "quad":  # it reads x as 32-bit words (a strided x runs as vsel: test_kernels_sparse24_gemv)
        xs = xs.contiguous()
    cfg = dict(_cfg(mode, bm, bn, bk, 4), SPLIT_K=split)
    act = "silu" if gated else "gelu"
    out_n = n // 2 if gated else n
    y_row = sparse24_gemv(xs, v, m, s, b, act, gated, config=cfg, out=poisoned((M, out_n), xs.dtype))
    y_til = sparse24_gemv(xs, v, tile_meta(m), s, b, act, gated, config=cfg, out=poisoned((M, out_n), xs.dtype))
    assert not y_til.isnan().any() and torch.equal(y_til, y_row)
    ref = (sparse24_gated_ref if gated else sparse24_linear_ref)(xs, v, m, s, b, act)
    assert sqnr(ref, y_til) >= 40.0


@pytest.mark.parametrize("dynamic", [False, True], ids=["W8A16", "W8A8"])
@pytest.mark.parametrize("gated", [False, True], ids=["linear", "gated"])
@pytest.mark.parametrize("vdtype", [torch.int8, torch.float8_e4m3fn], ids=["int8", "fp8"])
def test_tiled_gemm_equals_row_major(vdtype, gated, dynamic):
    n, k, M = (192 if gated else 128), 128, 17
    v, m, s = weights(n, k, vdtype, seed=3)
    b = torch.randn(n)
    x = torch.randn(M, k, dtype=torch.bfloat16)
    fn = sparse24_gated if gated else sparse24_linear
    out_n = n // 2 if gated else n
    a = fn(x, v, m, s, b, "silu", dynamic, out=poisoned((M, out_n), x.dtype))
    t = fn(x, v, tile_meta(m), s, b, "silu", dynamic, out=poisoned((M, out_n), x.dtype))
    assert not t.isnan().any() and torch.equal(a, t)


def test_kernels_refuse_bad_tiled_meta():
    v, m, s = weights(64, 128, torch.int8)
    x = torch.randn(1, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="tiled meta"):
        sparse24_gemv(x, v, torch.zeros(1, 1, 512, dtype=torch.uint8), s)
    with pytest.raises(ValueError, match="tiled meta"):
        sparse24_gemv(x, v, tile_meta(m).transpose(0, 1), s)  # not contiguous
    with pytest.raises(ValueError, match="tiled meta"):
        unpack24(v[:, :32].contiguous(), tile_meta(m))
    v96, m96, s96 = weights(96, 128, torch.int8)
    with pytest.raises(ValueError):
        sparse24_gemv(x, v96, torch.zeros(1, 2, 512, dtype=torch.uint8), s96)


@pytest.mark.parametrize("path", ["reference", "triton"])
@pytest.mark.parametrize("cls", [FusedSparseLinear, FusedSparseGatedLinear], ids=["linear", "gated"])
def test_module_tiled_meta(cls, path, tmp_path):
    torch.manual_seed(0)
    rows = 128
    w = torch.randn(rows, 192)
    kw = dict(act="gelu") if cls is FusedSparseLinear else {}
    mod = cls.from_float(w, torch.randn(rows), fmt="float8_e4m3", **kw)
    assert not mod.tiled_meta  # CPU: row-major (tiled meta is for CUDA + cuSPARSELt)
    x = torch.randn(2, 3, 192, dtype=torch.bfloat16)
    with dispatch.force_path(path):
        y0 = mod(x)
    state0 = {k: t.clone() for k, t in mod.state_dict().items()}
    bytes0 = param_bytes(mod)
    mod.set_tiled_meta(True)
    assert mod.tiled_meta and mod.meta.shape == (rows // 64, 3, 512)
    assert dispatch.shares_buffer(mod.values, mod.meta)
    assert param_bytes(mod) == bytes0 == mod.weight_bytes()  # one buffer, not a second copy
    info = fused_explain(torch.nn.Sequential(mod))
    assert info[0]["meta"] == "tiled" and info[0]["bytes_after"] == bytes0
    with dispatch.force_path(path):
        assert torch.equal(mod(x), y0)
    assert torch.equal(mod.dense_weight(), cls.from_float(w, torch.randn(rows), fmt="float8_e4m3", **kw).dense_weight())
    state = mod.state_dict()
    assert state["meta"].shape == state0["meta"].shape and all(torch.equal(state[k], state0[k]) for k in state0)
    # load a row-major checkpoint into a tiled module: it stays tiled, with the right bytes
    other = cls(192, rows if cls is FusedSparseLinear else rows // 2, True, fmt="float8_e4m3", **kw).set_tiled_meta(True)
    other.load_state_dict(state0)
    assert other.tiled_meta and dispatch.shares_buffer(other.values, other.meta)
    with dispatch.force_path(path):
        assert torch.equal(other(x), y0)
    # the cuSPARSELt buffer of a tiled layer is its own storage: no copy
    c = dispatch._cslt_weight(mod.values, mod.meta)
    assert c.untyped_storage().data_ptr() == mod.values.untyped_storage().data_ptr()
    assert torch.equal(c.view(torch.uint8).reshape(-1), buffer(unpack_24(mod.values, mod.meta).view(torch.uint8)))
    # fused.save / load through a model (safetensors): row-major meta in the file
    import fused

    from fused.checkpoint import read_metadata

    fused.save(torch.nn.Sequential(mod), tmp_path / "m.safetensors")
    assert read_metadata(tmp_path / "m.safetensors")["tensors"]["0.meta"]["shape"] == list(state0["meta"].shape)
    loaded = cls(192, rows if cls is FusedSparseLinear else rows // 2, True, fmt="float8_e4m3", **kw).set_tiled_meta(True)
    fused.load(tmp_path / "m.safetensors", torch.nn.Sequential(loaded))
    assert loaded.tiled_meta and torch.equal(loaded.meta, mod.meta) and torch.equal(loaded.values, mod.values)
    # torch.save of the state_dict, torch.load(weights_only=True), into a tiled module
    torch.save(mod.state_dict(), tmp_path / "sd.pt")
    again = cls(192, rows if cls is FusedSparseLinear else rows // 2, True, fmt="float8_e4m3", **kw).set_tiled_meta(True)
    again.load_state_dict(torch.load(tmp_path / "sd.pt", weights_only=True))
    assert again.tiled_meta and torch.equal(again.meta, mod.meta) and torch.equal(again.values, mod.values)
    mod.set_tiled_meta(False)
    assert not mod.tiled_meta and mod.meta.shape == state0["meta"].shape
    with dispatch.force_path(path):
        assert torch.equal(mod(x), y0)


def test_cslt_weight_of_tiled_meta_apart():
    # tiled meta that does not follow the values in one storage: the buffer is built side by side
    v, m, _ = weights(64, 128, torch.int8)
    c = dispatch._cslt_weight(v, tile_meta(m))
    try:
        assert torch.equal(c.view(torch.uint8).reshape(-1), buffer(unpack_24(v, m).view(torch.uint8)))
    finally:
        dispatch._drop_cslt_weight(v)


# ---- CUDA (H200): the live library, the module's automatic layout, the routes on one buffer ----

@pytest.mark.cuda
@pytest.mark.parametrize("vdtype", [torch.int8, torch.float8_e4m3fn], ids=["int8", "fp8"])
def test_cuda_layout_matches_cslt_compress(vdtype):
    for n, k in [(64, 64), (128, 192), (4096, 14336), (28672, 4096)]:
        w = coded(n, k, 1)  # every group's positions and every value vary
        got = torch._cslt_compress(w.view(vdtype).cuda())
        assert torch.equal(got.view(torch.uint8).reshape(-1).cpu(), buffer(w)), (n, k)
    assert dispatch._tiled_layout_matches(torch.device("cuda"), vdtype)


@pytest.mark.cuda
@pytest.mark.parametrize("dynamic", [False, True], ids=["W8A16", "W8A8"])
@pytest.mark.parametrize("vdtype", [torch.int8, torch.float8_e4m3fn], ids=["int8", "fp8"])
def test_cuda_module_one_buffer_every_route(vdtype, dynamic, monkeypatch):
    torch.manual_seed(0)
    fmt = "int8" if vdtype == torch.int8 else "float8_e4m3"
    w = torch.randn(512, 1024, device="cuda")
    mod = FusedSparseGatedLinear.from_float(w, None, fmt=fmt, dynamic=dynamic)
    assert mod.tiled_meta and dispatch.shares_buffer(mod.values, mod.meta)
    assert param_bytes(mod) == mod.weight_bytes()
    row = FusedSparseGatedLinear.from_float(w, None, fmt=fmt, dynamic=dynamic).set_tiled_meta(False)
    assert torch.equal(row.values, mod.values) and torch.equal(row.meta, untile_meta(mod.meta))
    for M in (1, 3, 17, 300):
        x = torch.randn(M, 1024, device="cuda", dtype=torch.bfloat16)
        for route in ("packed", "unpacked", "cslt"):
            monkeypatch.setattr(dispatch, "SPARSE_ROUTE", route)
            a, b = row(x), mod(x)
            if route == "cslt":  # the same library call on the same bytes; fp8's algorithm may differ by copy
                assert sqnr(a.float(), b.float()) > 60, (M, route)
            else:
                assert torch.equal(a, b), (M, route)
    monkeypatch.setattr(dispatch, "SPARSE_ROUTE", None)
    assert dispatch.cslt_cached_bytes(mod.values) == 0  # the cslt route ran on the layer's own buffer
    cpu = mod.to("cpu")
    assert not cpu.tiled_meta and torch.equal(cpu.meta, row.meta.cpu())
    back = cpu.to("cuda")
    assert back.tiled_meta and dispatch.shares_buffer(back.values, back.meta)


@pytest.mark.parametrize("gated", [False, True], ids=["linear", "gated"])
def test_ops_with_tiled_meta_opcheck_and_compile(gated):
    from fused import ops

    v, m, s = weights(128, 64, torch.int8)
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    op = ops.sparse24_gated if gated else ops.sparse24_linear
    utils = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    torch.library.opcheck(op, (x, v, tile_meta(m), s, torch.randn(128), "silu", True), test_utils=utils)
    cls = FusedSparseGatedLinear if gated else FusedSparseLinear
    mod = cls.from_float(torch.randn(128, 64), None, "int8").set_tiled_meta(True)
    with torch.no_grad():
        eager = mod(x)
        compiled = torch.compile(mod, backend="aot_eager", fullgraph=True, dynamic=True)(x)
    assert torch.equal(eager, compiled)
