"""The 2:4 decode kernel (sparse24_gemv; TRITON_INTERPRET=1 on the CPU) against the pure-torch reference.

Every MODE is run through an explicit config: "gather" (M = 1, 3 and 16), "vsel" (M = 1 to 16), "quad" (M = 1;
the interpreter runs the Triton twin of its asm) and "dot" (M = 3, 16), each with split-K. Odd shapes: N = 37; K = 40 and 100 (multiples of 4, not of 8: the last meta
byte holds one group; K > BLOCK_K: several, partial, K steps and splits). Outputs are poisoned with NaN;
accuracy is SQNR against the reference at the output dtype's resolution."""
import pytest
import torch

from fused import dispatch
from fused.kernels.launch import counts
from fused.kernels.sparse24_gemv import _candidates, _cfg, sparse24_gemv
from fused.kernels.splitk import buffers
from fused.reference import sparse24_gated_ref, sparse24_linear_ref
from lowbit import quantize_weight, sqnr
from sparsity import magnitude_mask_24, pack_24, unpack_24

VALUE_DTYPES = [torch.int8, torch.float8_e4m3fn, torch.bfloat16]
VIDS = ["int8", "fp8", "bf16"]
MIN_SQNR = {torch.bfloat16: 40.0, torch.float16: 55.0, torch.float32: 100.0}
FMT = {torch.int8: "int8", torch.float8_e4m3fn: "float8_e4m3"}
ACTS = ["none", "relu", "gelu", "gelu_tanh", "silu"]
# (M, MODE, BLOCK_M): every kernel form at the M it serves
FORMS = [(1, "gather", 1), (1, "vsel", 1), (3, "gather", 4), (3, "vsel", 4), (2, "vsel", 2), (5, "vsel", 8), (16, "vsel", 16),
         (3, "dot", 16), (16, "dot", 16), (16, "gather", 16)]


def packed(n, k, vdtype, device="cpu"):
    """(values, meta, scale) of a random 2:4 weight [n, k] with a zero row and a one-non-zero group."""
    w = torch.randn(n, k, device=device)
    w = w * magnitude_mask_24(w.abs())
    w[n // 2] = 0
    w[0, :4] = torch.tensor([0.0, 0.0, 0.0, 0.7])
    if vdtype == torch.bfloat16:
        return (*pack_24(w.to(torch.bfloat16)), None)
    q, s = quantize_weight(w, FMT[vdtype])
    return (*pack_24(q), s)


def config(mode, bm, split=2, bn=16, bk=32):
    return dict(_cfg(mode, bm, bn, bk, 4), SPLIT_K=split)


def run_both(x, v, m, s, b, act, gated, cfg=None):
    ref_fn = sparse24_gated_ref if gated else sparse24_linear_ref
    n_out = v.shape[0] // 2 if gated else v.shape[0]
    out = torch.full((x.shape[0], n_out), float("nan"), dtype=x.dtype, device=x.device)
    y = sparse24_gemv(x, v, m, s, b, act, gated, config=cfg, out=out)
    assert y is out
    return y, ref_fn(x, v, m, s, b, act)


def check(y, ref, dtype):
    assert y.dtype == ref.dtype == dtype and y.shape == ref.shape
    assert not y.isnan().any()
    db = sqnr(ref, y)
    assert db >= MIN_SQNR[dtype], f"SQNR {db:.1f} dB < {MIN_SQNR[dtype]} ({dtype})"


@pytest.mark.parametrize("gated", [False, True], ids=["linear", "gated"])
@pytest.mark.parametrize("vdtype", VALUE_DTYPES, ids=VIDS)
@pytest.mark.parametrize("K", [40, 100, 128])  # 128: K % BLOCK_K == 0 (EVEN_K, no K masks)
@pytest.mark.parametrize("M,mode,bm", FORMS, ids=[f"M{m}-{f}" for m, f, _ in FORMS])
def test_matches_reference(M, mode, bm, K, vdtype, gated):
    N = 37
    v, m, s = packed(2 * N if gated else N, K, vdtype)
    b = torch.randn(v.shape[0]) if K == 100 else None
    x = torch.randn(M, K, dtype=torch.bfloat16)
    act = "silu" if gated else "gelu_tanh"
    check(*run_both(x, v, m, s, b, act, gated, config(mode, bm)), torch.bfloat16)


QUAD = [(8, 40), (32, 96), (64, 128)]  # (BLOCK_K, K): "quad" needs K % BLOCK_K == 0; 1-3 K steps per split


@pytest.mark.parametrize("xdtype", [torch.bfloat16, torch.float16], ids=["x_bf16", "x_fp16"])
@pytest.mark.parametrize("gated", [False, True], ids=["linear", "gated"])
@pytest.mark.parametrize("vdtype", [torch.int8, torch.float8_e4m3fn], ids=["int8", "fp8"])
@pytest.mark.parametrize("bk,K", QUAD, ids=[f"bk{b}-K{k}" for b, k in QUAD])
def test_quad_matches_reference(bk, K, vdtype, gated, xdtype):
    N = 37
    v, m, s = packed(2 * N if gated else N, K, vdtype)
    b = torch.randn(v.shape[0]) if K == 96 else None
    x = torch.randn(1, K, dtype=xdtype)
    before = counts["quad_as_vsel"]
    act = "silu" if gated else "gelu_tanh"
    check(*run_both(x, v, m, s, b, act, gated, config("quad", 1, bk=bk)), xdtype)
    assert counts["quad_as_vsel"] == before  # it ran as "quad"


@pytest.mark.parametrize("runs16", [False, True], ids=["gathers16", "runs16"])
@pytest.mark.parametrize("bn", [16, 32])
@pytest.mark.parametrize("vdtype", [torch.int8, torch.float8_e4m3fn], ids=["int8", "fp8"])
def test_quad_on_tiled_meta(vdtype, bn, runs16, monkeypatch):
    """"quad" on cuSPARSELt-tiled meta (what the modules hold): 32-row tiles read it as contiguous runs, 16-row
    tiles as byte gathers unless sparse24_gemv.QUAD16_RUNS (see _tiled_mode); gated (the up rows start at N), 2 tiles of
    64 columns per K step (the two-step row sum)."""
    from fused.kernels import sparse24_gemv as sg
    from sparsity.packing import tile_meta

    monkeypatch.setattr(sg, "QUAD16_RUNS", runs16)
    N, K = 64, 256
    v, m, s = packed(2 * N, K, vdtype)
    x = torch.randn(1, K, dtype=torch.bfloat16)
    assert sg._tiled_mode(True, "quad", bn, N, True) == (1 if bn == 16 and not runs16 else 2)
    cfg = dict(_cfg("quad", 1, bn, 128, 4), SPLIT_K=2)
    check(*run_both(x, v, tile_meta(m), s, None, "silu", True, cfg), torch.bfloat16)


def test_quad_pick_serves_x_it_cannot_read_as_words():
    """A shape's pick serves every x: where "quad" cannot read x or the values as 32-bit words (fp32 or
    unaligned x, a strided x, bf16 values) the same tile runs as "vsel", counted in launch.counts."""
    v, m, s = packed(37, 128, torch.int8)
    vb, mb, _ = packed(37, 128, torch.bfloat16)
    cases = [(torch.randn(1, 128), v, m, s),                                     # fp32 x
             (torch.randn(1, 129, dtype=torch.bfloat16)[:, 1:], v, m, s),        # 2-byte aligned
             (torch.randn(1, 256, dtype=torch.bfloat16)[:, ::2], v, m, s),       # K stride 2
             (torch.randn(1, 128, dtype=torch.bfloat16), vb, mb, None)]          # bf16 values
    for x, vv, mm, ss in cases:
        before = counts["quad_as_vsel"]
        check(*run_both(x, vv, mm, ss, None, "relu", False, config("quad", 1, bk=64)), x.dtype)
        assert counts["quad_as_vsel"] == before + 1
    from fused import dispatch

    dispatch.set_strict(True)  # strict mode: that slower form raises instead
    try:
        with pytest.raises(RuntimeError, match="strict mode: sparse24_gemv's quad pick"):
            run_both(*cases[0][:4], None, "relu", False, config("quad", 1, bk=64))
    finally:
        dispatch.set_strict(False)


@pytest.mark.parametrize("xdtype", [torch.float16, torch.float32], ids=["x_fp16", "x_fp32"])
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("M,mode,bm", [(1, "gather", 1), (3, "dot", 16)], ids=["M1-gather", "M3-dot"])
def test_epilogue_and_activation_dtypes(M, mode, bm, act, xdtype):
    # bf16 values with fp16 activations: the dot runs in fp32 (neither casts exactly to the other)
    v, m, s = packed(37, 100, torch.bfloat16 if xdtype == torch.float16 else torch.int8)
    b = torch.randn(37, dtype=torch.bfloat16)
    x = torch.randn(M, 100, dtype=xdtype)
    check(*run_both(x, v, m, s, b, act, False, config(mode, bm)), xdtype)


@pytest.mark.parametrize("M", [1, 3, 16])
def test_default_config(M):
    v, m, s = packed(2 * 37, 100, torch.float8_e4m3fn)
    x = torch.randn(M, 100, dtype=torch.bfloat16)
    check(*run_both(x, v, m, s, torch.randn(74), "gelu", True), torch.bfloat16)


def test_non_contiguous_x():
    v, m, s = packed(37, 40, torch.int8)
    base = torch.randn(40, 3, dtype=torch.float32)
    x = base.t()  # [3, 40], stride 1 along M, 3 along K
    assert not x.is_contiguous()
    for cfg in (config("gather", 4), config("dot", 16)):
        check(*run_both(x, v, m, s, None, "relu", False, cfg), torch.float32)
    # K stride 2 and a storage offset, M = 1
    x1 = torch.randn(2 * 100 + 5)[5:].view(1, 200)[:, ::2]
    assert x1.stride() == (200, 2) and x1.storage_offset() == 5
    v1, m1, s1 = packed(37, 100, torch.int8)
    for cfg in (config("gather", 1), config("vsel", 1)):
        check(*run_both(x1, v1, m1, s1, None, "none", False, cfg), torch.float32)


@pytest.mark.parametrize("split", [1, 2, 4])
def test_split_k_counters_reset_and_deterministic(split):
    v, m, s = packed(2 * 37, 100, torch.int8)
    x = torch.randn(1, 100, dtype=torch.bfloat16)
    cfg = config("gather", 1, split=split, bk=16)
    y1 = sparse24_gemv(x, v, m, s, None, "silu", True, config=cfg)
    y2 = sparse24_gemv(x, v, m, s, None, "silu", True, config=cfg)
    assert torch.equal(y1, y2)
    assert int(buffers(x.device, 0, 0)[1].abs().sum()) == 0  # every per-tile counter back at zero
    check(y1, sparse24_gated_ref(x, v, m, s, None, "silu"), torch.bfloat16)


def test_dispatch_3d_input_by_m():
    v, m, s = packed(2 * 21, 44, torch.int8)
    with dispatch.force_path("triton"):
        for shape, path in [((2, 3, 44), "triton:sparse24_gemv"), ((1, 1, 44), "triton:sparse24_gemv"),
                            ((2, 9, 44), "triton:sparse24_linear")]:
            x = torch.randn(*shape, dtype=torch.bfloat16)
            before = dispatch.stats[("sparse24_gated", path)]
            # a W8A8 config at M <= 16 runs the weight-only GEMV, so compare with the weight-only reference
            y = dispatch.sparse24_gated(x, v, m, s, None, "silu", dynamic=path.endswith("gemv"))
            assert dispatch.stats[("sparse24_gated", path)] == before + 1
            assert y.shape == (*shape[:2], 21)
            check(y, sparse24_gated_ref(x, v, m, s, None, "silu"), torch.bfloat16)


def test_nan_reaches_outputs_that_keep_its_column():
    # gather/vsel multiply only kept positions (documented): x[0, k] = NaN poisons exactly the rows
    # whose packing names column k
    v, m, s = packed(37, 40, torch.int8)
    x = torch.randn(1, 40)
    x[0, 13] = float("nan")
    keeps = unpack_24(torch.ones_like(v), m)[:, 13] != 0
    assert 0 < int(keeps.sum()) < 37
    for cfg in (config("gather", 1), config("vsel", 1)):
        y = sparse24_gemv(x, v, m, s, config=cfg)
        assert torch.equal(y[0].isnan(), keeps)
        ref = sparse24_linear_ref(x.nan_to_num(), v, m, s)
        assert sqnr(ref[0, ~keeps], y[0, ~keeps]) >= MIN_SQNR[torch.float32]


def test_threshold_catches_wrong_positions():
    v, m, s = packed(37, 48, torch.int8)
    x = torch.randn(3, 48)
    ref = sparse24_linear_ref(x, v, m, s)
    bad = m.clone()
    bad[[0, 1]] = bad[[1, 0]]
    for cfg in (config("gather", 4), config("dot", 16)):
        assert sqnr(ref, sparse24_gemv(x, v, bad, s, config=cfg)) < 20


def test_bad_input():
    v, m, s = packed(8, 16, torch.int8)
    with pytest.raises(ValueError, match="M <= 16"):
        sparse24_gemv(torch.randn(17, 16), v, m, s)
    with pytest.raises(ValueError, match="meta"):
        sparse24_gemv(torch.randn(1, 16), v, m[:, :1].contiguous(), s)
    with pytest.raises(ValueError, match="even row count"):
        sparse24_gemv(torch.randn(1, 16), v[:7], m[:7], s[:7], gated=True)
    y = sparse24_gemv(torch.empty(0, 16), v, m, s)
    assert y.shape == (0, 8)


def test_candidates_are_few_and_valid():
    for M in (1, 2, 3, 4, 8, 16):
        for N, K in ((14336, 4096), (4096, 14336), (37, 100)):
            cands = _candidates(M, N, K, True)
            assert 1 <= len(cands) <= 8
            for c in cands:
                assert c["BLOCK_M"] >= M and c["BLOCK_K"] % 8 == 0 and c["SPLIT_K"] >= 1
                assert c["MODE"] != "dot" or min(c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"]) >= 16
                assert c["MODE"] != "quad" or (M == 1 and K % c["BLOCK_K"] == 0)
            assert not any(c["MODE"] == "quad" for c in _candidates(M, N, K, True, quad=False))


@pytest.mark.parametrize("K", [40, 100, 128])
def test_vsel_stages_equal_the_plain_loop(K, monkeypatch):
    """STAGES (the pipelined vsel loop) changes where tiles wait, not the arithmetic: bit-equal to STAGES=1 (the
    interpreter ignores num_stages; the cuda candidate test checks the pipelined form on the GPU)."""
    v, m, s = packed(2 * 37, K, torch.int8)
    x = torch.randn(1, K, dtype=torch.bfloat16)
    plain = config("vsel", 1)
    y, ref = run_both(x, v, m, s, None, "silu", True, plain)
    check(y, ref, torch.bfloat16)
    assert torch.equal(run_both(x, v, m, s, None, "silu", True, dict(plain, STAGES=3))[0], y)
    from fused.kernels import sparse24_gemv as sg

    monkeypatch.setattr(sg, "GEMV_STAGES", False)  # fused.kernels.GEMV_STAGES = False
    assert not any(c.get("STAGES", 1) > 1 for c in _candidates(1, 14336, 4096, True))
    monkeypatch.setattr(sg, "GEMV_STAGES", True)
    cands = _candidates(1, 14336, 4096, True)
    assert any(c.get("STAGES", 1) > 1 for c in cands) and len(cands) <= 8


# --- on the H200 -------------------------------------------------------------------------------------------

LLAMA = [(14336, 4096, True), (4096, 14336, False)]  # (N, K, gated): gate/up stacked [2N, K], down [N, K]


@pytest.mark.cuda
@pytest.mark.parametrize("vdtype", VALUE_DTYPES, ids=VIDS)
@pytest.mark.parametrize("N,K,gated", LLAMA, ids=["gate_up", "down"])
@pytest.mark.parametrize("M", [1, 16])
def test_cuda_llama_shapes_and_determinism(M, N, K, gated, vdtype):
    if vdtype == torch.float8_e4m3fn and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 needs compute capability >= 8.9")
    v, m, s = packed(2 * N if gated else N, K, vdtype, device="cuda")
    x = torch.randn(M, K, dtype=torch.bfloat16, device="cuda")
    y, ref = run_both(x, v, m, s, None, "silu", gated)
    check(y, ref, torch.bfloat16)
    for _ in range(5):
        assert torch.equal(sparse24_gemv(x, v, m, s, None, "silu", gated), y)


QUAD_CUDA = [(torch.int8, torch.bfloat16, True), (torch.float8_e4m3fn, torch.bfloat16, True),
             (torch.int8, torch.float16, False), (torch.float8_e4m3fn, torch.float16, False)]


@pytest.mark.cuda
@pytest.mark.parametrize("vdtype,xdtype,tiled", QUAD_CUDA, ids=["int8-bf16-tiled", "fp8-bf16-tiled", "int8-fp16-rows",
                                                               "fp8-fp16-rows"])
def test_cuda_quad_asm_equals_its_triton_twin(vdtype, xdtype, tiled, monkeypatch):
    """The inline-asm "quad" (selectors by PRMT, widening, 4 FMAs) against its Triton twin compiled for the same
    GPU (the same fp32 operations in the same order): equal bits, and the reference's SQNR."""
    from fused.kernels import sparse24_gemv as sg
    from sparsity.packing import tile_meta

    if vdtype == torch.float8_e4m3fn and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 needs compute capability >= 8.9")
    N, K = 1024, 2048
    v, m, s = packed(2 * N, K, vdtype, device="cuda")
    x = torch.randn(1, K, dtype=xdtype, device="cuda")
    mm = tile_meta(m) if tiled else m
    for cfg in (dict(_cfg("quad", 1, 16, 512, 4, 4), SPLIT_K=2), dict(_cfg("quad", 1, 32, 256, 8), SPLIT_K=1)):
        y, ref = run_both(x, v, mm, s, None, "silu", True, cfg)
        check(y, ref, xdtype)
        monkeypatch.setattr(sg, "INTERPRET", True)  # ASM=False: the twin
        assert torch.equal(run_both(x, v, mm, s, None, "silu", True, cfg)[0], y), cfg
        monkeypatch.setattr(sg, "INTERPRET", False)


@pytest.mark.cuda
@pytest.mark.parametrize("vdtype", [torch.int8, torch.float8_e4m3fn], ids=["int8", "fp8"])
@pytest.mark.parametrize("M", [1, 3, 6, 16])
@pytest.mark.parametrize("tiled", [False, True], ids=["rows", "tiled"])
def test_cuda_every_candidate_compiles_and_is_right(M, vdtype, tiled, monkeypatch):
    # the tuner skips a config that fails: this is where a candidate that does not compile shows up. Tiled meta
    # (what the modules hold) too: its loads differ (contiguous runs at 16 / 32 / 64 rows, else byte gathers)
    from fused.kernels import sparse24_gemv as sg
    from sparsity.packing import tile_meta

    monkeypatch.setattr(sg, "GEMV_STAGES", True)  # the staged candidates too
    if vdtype == torch.float8_e4m3fn and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 needs compute capability >= 8.9")
    N, K = (1024 if tiled else 1000), 2048
    v, m, s = packed(2 * N, K, vdtype, device="cuda")
    m = tile_meta(m) if tiled else m
    x = torch.randn(M, K, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(2 * N, device="cuda")
    for cfg in _candidates(M, N, K, True):
        y, ref = run_both(x, v, m, s, b, "silu", True, cfg)
        check(y, ref, torch.bfloat16)
        if cfg.get("STAGES", 1) > 1:  # the pipelined loop: the plain loop's arithmetic, bit for bit at 4 warps;
            # at 8 the pipelined layout may reduce across warps in another order (the dense GEMV's 8-warp twins
            # differ in 1-4 outputs by one rounding step on the H200)
            plain = {k: c for k, c in cfg.items() if k != "STAGES"}
            want = run_both(x, v, m, s, b, "silu", True, plain)[0]
            if cfg["num_warps"] == 4:
                assert torch.equal(y, want), cfg
            else:
                assert sqnr(want.float(), y.float()) > 100 and (y != want).sum() <= 8, cfg
