"""The 2:4 decode kernel on sparse tensor cores (sparse24_mma) against the pure-torch reference.

On the CPU (TRITON_INTERPRET=1) the lanes' loads, the split-K and the epilogue run as on the GPU and the warp
product comes from _mma_emu (the PTX fragment rules, see the kernel's docstring); the cuda tests check those rules
against the tensor cores on the Llama shapes, every tuner candidate, bit for bit across runs. Shapes: M = 1, 3, 5, 9
(two token tiles), 16; N multiples of 64 and K of 128 (tiled meta, 128-column steps); split-K over 2 and 3 ranges,
ranges that end inside an iteration of U steps (the masked steps); one and two x planes; int8 and e4m3 values;
outputs poisoned with NaN; accuracy as SQNR against the reference on the same planes."""
import pytest
import torch

from fused import dispatch
from fused.kernels import sparse24_mma as sm
from fused.kernels.sparse24_mma import check_mma_args, sparse24_mma, sparse24_mma_x
from fused.reference import gated_ref, linear_ref
from lowbit import quantize_weight, sqnr
from lowbit.quant import FP8_SPLIT_LO, split_activation, split_activation_fp8
from sparsity import magnitude_mask_24, pack_24, unpack_24
from sparsity.packing import tile_meta

FMT = {torch.int8: "int8", torch.float8_e4m3fn: "float8_e4m3"}


def packed(n, k, vdtype, device="cpu", seed=0):
    """(values, row-major meta, tiled meta, scale) of a random 2:4 weight [n, k] with a zero row and a group
    holding one non-zero."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g)
    w = w * magnitude_mask_24(w.abs())
    w[n // 2] = 0
    w[0, :4] = torch.tensor([0.0, 0.0, 0.0, 0.7])
    q, s = quantize_weight(w, FMT[vdtype])
    values, meta = pack_24(q)
    return values.to(device), meta.to(device), tile_meta(meta).to(device), s.to(device)


def planes_of(x, vdtype, planes):
    """(planes [P, M, K], scale [M], x as the kernel sees it: fp32 [M, K])."""
    if vdtype == torch.int8:
        hi, lo, s = split_activation(x)
        if planes == 1:
            return hi[None].contiguous(), (s * 256).squeeze(-1).contiguous(), hi.float() * (s * 256)
        return torch.stack([hi, lo]), s.squeeze(-1).contiguous(), (hi.float() * 256 + lo.float()) * s
    hi, lo, s = split_activation_fp8(x)
    if planes == 1:
        return hi[None].contiguous(), s.squeeze(-1).contiguous(), hi.float() * s
    return torch.stack([hi, lo]), s.squeeze(-1).contiguous(), (hi.float() + lo.float() / FP8_SPLIT_LO) * s


def reference(xh, values, meta, s, bias, act, gated):
    w = unpack_24(values, meta)
    ref = gated_ref if gated else linear_ref
    return ref(xh, w, s, bias, act)


CASES = [  # M, N, K, gated, values, planes, act, bias
    (1, 64, 128, False, torch.int8, 2, "none", False),
    (3, 64, 384, True, torch.int8, 2, "silu", True),
    (9, 128, 128, False, torch.float8_e4m3fn, 2, "gelu_tanh", True),
    (16, 64, 128, True, torch.float8_e4m3fn, 2, "silu", False),
    (5, 64, 256, False, torch.int8, 1, "relu", True),
    (16, 128, 128, True, torch.int8, 1, "gelu", True),
    (1, 128, 128, True, torch.float8_e4m3fn, 1, "none", False),
    (4, 64, 256, True, torch.float8_e4m3fn, 2, "silu", True),  # two planes at M <= 4: PAIRS (planes as columns)
    (4, 64, 128, False, torch.int8, 2, "gelu", False),
]


@pytest.mark.parametrize("M,N,K,gated,vdtype,planes,act,has_bias", CASES)
def test_mma_matches_reference(M, N, K, gated, vdtype, planes, act, has_bias):
    torch.manual_seed(M * 131 + N + K)
    R = 2 * N if gated else N
    values, meta, tiled, s = packed(R, K, vdtype)
    x = torch.randn(M, K, dtype=torch.bfloat16)
    xq, xs, xh = planes_of(x, vdtype, planes)
    bias = torch.randn(R, dtype=torch.bfloat16) if has_bias else None
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    y = sparse24_mma(xq, xs, values, tiled, s, bias, act, gated, out=out)
    assert y.data_ptr() == out.data_ptr() and not y.isnan().any()
    assert sqnr(reference(xh, values, meta, s, bias, act, gated), y.float()) > 40


@pytest.mark.parametrize("M,gated,split", [(1, True, 1), (3, False, 2), (4, True, 3)])
def test_mma_pairs_equal_plane_sets(M, gated, split, monkeypatch):
    """Two planes at M <= 4 run as (token, plane) column pairs of one mma (PAIRS): the same int32 products as one
    column set per plane, so the outputs are bit-equal; SPLIT_K partials included."""
    torch.manual_seed(M)
    N, K = 64, 384
    values, meta, tiled, s = packed(2 * N if gated else N, K, torch.int8)
    xq, xs, xh = planes_of(torch.randn(M, K, dtype=torch.bfloat16), torch.int8, 2)
    cfg = dict(W=2, SPLIT_K=split, U=2, num_warps=2)
    act = "silu" if gated else "none"
    ys = []
    for pairs in (True, False):
        monkeypatch.setattr(sm, "PAIRS", pairs)
        ys.append(sparse24_mma(xq, xs, values, tiled, s, None, act, gated, config=cfg))
    assert torch.equal(ys[0], ys[1])
    assert sqnr(reference(xh, values, meta, s, None, act, gated), ys[0].float()) > 40


@pytest.mark.parametrize("cfg", [dict(W=1, SPLIT_K=3, U=2, num_warps=1),
                                 dict(W=4, SPLIT_K=1, U=4, FENCE=True, num_warps=4),
                                 dict(W=2, SPLIT_K=1, U=4, FENCE=True, XF=True, num_warps=2),
                                 dict(W=1, SPLIT_K=2, U=2, FENCE=True, XF=True, num_warps=1),
                                 dict(W=2, SPLIT_K=2, U=2, FENCE=True, XF=True, L2P=256, num_warps=2),
                                 dict(W=2, SPLIT_K=1, U=2, FENCE=True, XF=True, L2P=128, PFD=2, num_warps=2),
                                 dict(W=2, SPLIT_K=2, U=1, STAGES=3, num_warps=2),
                                 dict(W=1, SPLIT_K=1, U=1, STAGES=4, num_warps=1)],
                         ids=["w1-split3", "w4-nosplit", "xf-u4", "xf-u2-split2", "l2p256", "pfd2", "stages3-split2",
                              "stages4"])
def test_mma_explicit_configs(cfg):
    torch.manual_seed(3)
    M, N, K = 3, 64, 384
    values, meta, tiled, s = packed(2 * N, K, torch.int8)
    x = torch.randn(M, K, dtype=torch.bfloat16)
    xq, xs, xh = planes_of(x, torch.int8, 2)
    y = sparse24_mma(xq, xs, values, tiled, s, None, "silu", True, config=cfg)
    assert sqnr(reference(xh, values, meta, s, None, "silu", True), y.float()) > 40


def test_mma_wrong_meta_fails():
    """The check can fail: another weight's positions give another product."""
    M, N, K = 1, 64, 128
    values, meta, tiled, s = packed(N, K, torch.int8)
    _, meta2, tiled2, _ = packed(N, K, torch.int8, seed=1)
    xq, xs, xh = planes_of(torch.randn(M, K, dtype=torch.bfloat16), torch.int8, 2)
    y = sparse24_mma(xq, xs, values, tiled2, s)
    assert sqnr(reference(xh, values, meta, s, None, "none", False), y.float()) < 10


def test_mma_bad_inputs():
    M, N, K = 2, 64, 128
    values, meta, tiled, s = packed(N, K, torch.int8)
    xq, xs, _ = planes_of(torch.randn(M, K, dtype=torch.bfloat16), torch.int8, 2)
    assert check_mma_args(xq, xs, values, tiled) is None
    with pytest.raises(ValueError, match="tiled meta"):
        sparse24_mma(xq, xs, values, meta, s)  # row-major meta
    with pytest.raises(ValueError, match="1 or 2 planes"):
        sparse24_mma(torch.cat([xq, xq[:1]]), xs, values, tiled, s)
    with pytest.raises(ValueError, match="1 or 2 planes"):
        sparse24_mma(torch.zeros(2, 17, K, dtype=torch.int8), torch.ones(17), values, tiled, s)
    with pytest.raises(ValueError, match="same dtype"):
        sparse24_mma(xq.view(torch.float8_e4m3fn), xs, values, tiled, s)
    with pytest.raises(ValueError, match="token scales"):
        sparse24_mma(xq, xs.double(), values, tiled, s)
    with pytest.raises(ValueError, match="wscale"):
        sparse24_mma(xq, xs, values, tiled, None)
    v256, _, t256, _ = packed(N, 256, torch.int8)
    with pytest.raises(ValueError, match="16-byte aligned"):
        sparse24_mma(xq, xs, v256[:, 4:68], tiled, s)  # a view 4 bytes into its rows
    with pytest.raises(ValueError, match="16-byte aligned"):
        sparse24_mma(torch.cat([xq, xq], 2)[:, :, 4:132], xs, values, tiled, s)
    with pytest.raises(ValueError, match="multiple of 128"):
        sparse24_mma(torch.cat([xq, xq], 2)[:, :, :192], xs, v256[:, :96], t256[:, :3], s)


@pytest.mark.parametrize("vdtype", [torch.int8, torch.float8_e4m3fn], ids=["int8", "fp8"])
def test_mma_after_act_split_on_a_strided_3d_x(vdtype):
    """The route's computation (act_split's kernel, then sparse24_mma) on a 3-D, non-contiguous x against the
    weight-only reference on x itself: the planes carry x to ~15 bits (int8) / ~8 (e4m3)."""
    from fused.kernels.act_split import act_split
    from fused.reference import sparse24_gated_ref

    N, K = 64, 128
    values, meta, tiled, s = packed(2 * N, K, vdtype)
    x = torch.randn(2, 3, 2 * K, dtype=torch.bfloat16)[..., ::2]
    x2 = x.reshape(-1, K)
    assert not x2.is_contiguous()
    q, xs = act_split(x2, fp8=vdtype == torch.float8_e4m3fn)
    y = sparse24_mma(q, xs, values, tiled, s, None, "silu", True, out_dtype=x.dtype).reshape(2, 3, N)
    ref = sparse24_gated_ref(x, values, meta, s, None, "silu")
    assert sqnr(ref.float(), y.float()) > 40  # bf16 outputs: ~48 dB measured for both


X_CASES = [  # M, N, K, gated, values, act, bias, split: the planes made inside (sparse24_mma_x)
    (1, 64, 256, False, torch.int8, "none", False, 2),
    (3, 64, 384, True, torch.int8, "silu", True, 3),
    (9, 64, 128, True, torch.float8_e4m3fn, "gelu_tanh", True, 1),
    (16, 128, 256, False, torch.float8_e4m3fn, "relu", False, 2),
]


@pytest.mark.parametrize("M,N,K,gated,vdtype,act,has_bias,split", X_CASES)
def test_mma_x_matches_weight_only_reference(M, N, K, gated, vdtype, act, has_bias, split):
    """Each program splits its own K range of the 16-bit x (a scale per token and range): the weight-only reference
    on x itself, a strided x, outputs poisoned; a row with a large outlier in one range only keeps the others
    accurate (their own scale)."""
    from fused.reference import sparse24_gated_ref, sparse24_linear_ref

    torch.manual_seed(M * 7 + K)
    R = 2 * N if gated else N
    values, meta, tiled, s = packed(R, K, vdtype)
    bias = torch.randn(R) if has_bias else None
    x = torch.randn(M, 2 * K, dtype=torch.bfloat16)[:, ::2]
    x[0, 0] = 3000.0
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    cfg = dict(W=2, SPLIT_K=split, U=2, FENCE=split == 3, num_warps=2)
    y = sparse24_mma_x(x, values, tiled, s, bias, act, gated, config=cfg, out=out)
    ref = (sparse24_gated_ref(x, values, meta, s, bias, act) if gated
           else sparse24_linear_ref(x, values, meta, s, bias, act))
    assert y.data_ptr() == out.data_ptr() and not y.isnan().any()
    assert sqnr(ref.float(), y.float()) > 40


def test_mma_x_nan_row_and_bad_inputs():
    N, K = 64, 256
    values, meta, tiled, s = packed(N, K, torch.int8)
    x = torch.randn(3, K, dtype=torch.bfloat16)
    x[1, 200] = float("inf")
    y = sparse24_mma_x(x, values, tiled, s, config=dict(W=2, SPLIT_K=2, U=2, num_warps=2))
    assert y[1].isnan().all() and not y[[0, 2]].isnan().any()
    with pytest.raises(ValueError, match="16-bit x"):
        sparse24_mma_x(x.float(), values, tiled, s)
    with pytest.raises(ValueError, match="16-bit x"):
        sparse24_mma_x(x[None], values, tiled, s)
    with pytest.raises(ValueError, match="1 or 2 planes"):
        sparse24_mma_x(torch.randn(17, K, dtype=torch.bfloat16), values, tiled, s)
    with pytest.raises(ValueError, match="tiled meta"):
        sparse24_mma_x(x, values, meta, s)


def test_mma_route_not_offered_on_cpu(monkeypatch):
    monkeypatch.setattr(sm, "MMA", True)
    values, meta, tiled, s = packed(64, 128, torch.int8)
    x = torch.randn(1, 128, dtype=torch.bfloat16)
    assert not dispatch._mma_ok(x, values, tiled, 1, "", False)


# ---- CUDA (H200): the fragment rules against the tensor cores ----

@pytest.mark.cuda
@pytest.mark.parametrize("vdtype", [torch.int8, torch.float8_e4m3fn], ids=["int8", "fp8"])
@pytest.mark.parametrize("N,K,gated", [(14336, 4096, True), (4096, 14336, False)], ids=["gate_up", "down"])
def test_cuda_every_candidate_llama(vdtype, N, K, gated, monkeypatch):
    monkeypatch.setattr(sm, "STAGES_CANDIDATES", True)  # the opt-in ones too
    monkeypatch.setattr(sm, "PFD_CANDIDATES", True)
    R = 2 * N if gated else N
    values, meta, tiled, s = packed(R, K, vdtype, "cuda")
    for M in (1, 7, 16):
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        xq, xs, xh = planes_of(x, vdtype, 2)
        ref = reference(xh, values, meta, s, None, "silu" if gated else "none", gated)
        cands = sm._candidates(M, N, K, gated)
        # every candidate at 1 and 16 tokens (one and two token tiles) for int8, the first three for e4m3 (each is a
        # compile, and ptxas's fp8 lowering is slow), the default at 7
        for cfg in cands[:1] if M == 7 else cands if vdtype == torch.int8 else cands[:3]:
            y = sparse24_mma(xq, xs, values, tiled, s, None, "silu" if gated else "none", gated, config=cfg)
            assert sqnr(ref.float(), y.float()) > 40, (M, cfg)
            y2 = sparse24_mma(xq, xs, values, tiled, s, None, "silu" if gated else "none", gated, config=cfg)
            assert torch.equal(y, y2), (M, cfg)  # split-K sums in a fixed order


@pytest.mark.cuda
@pytest.mark.parametrize("dynamic", [False, True], ids=["W8A16", "W8A8"])
def test_cuda_pdl_chain_bit_equal(dynamic):
    """act_split / act_quant then sparse24_mma as programmatic dependent launches (the route's chain, twice: gate/up
    then down on its output) equals the plain launches bit for bit, eagerly and replayed from a CUDA graph with
    fresh inputs (a missing wait would read the planes before they are written)."""
    from fused.kernels.act_quant import act_quant
    from fused.kernels.act_split import act_split

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("griddepcontrol needs sm_90")
    torch.manual_seed(0)
    gu = packed(2 * 1024, 2048, torch.int8, "cuda")
    dn = packed(2048, 1024, torch.int8, "cuda")

    def chain(x, pdl):
        h = x
        for (values, _, tiled, s), gated in ((gu, True), (dn, False)):
            q, xs = act_quant(h, fp8=False, pdl=pdl) if dynamic else act_split(h, pdl=pdl)
            h = sparse24_mma(q if q.dim() == 3 else q[None], xs, values, tiled, s, None, "silu" if gated else "none",
                             gated, config=sm._candidates(h.shape[0], values.shape[0] // (2 if gated else 1),
                                                          h.shape[1], gated)[0], pdl=pdl)
        return h

    for M in (1, 5, 16):
        x = torch.randn(M, 2048, device="cuda", dtype=torch.bfloat16)
        want = chain(x, False)
        assert torch.equal(chain(x, True), want), M
        xs_g = x.clone()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            yg = chain(xs_g, True)
        for _ in range(3):
            x = torch.randn(M, 2048, device="cuda", dtype=torch.bfloat16)
            xs_g.copy_(x)
            g.replay()
            assert torch.equal(yg, chain(x, False)), M


@pytest.mark.cuda
@pytest.mark.parametrize("dynamic", [False, True], ids=["W8A16", "W8A8"])
@pytest.mark.parametrize("vdtype", [torch.int8, torch.float8_e4m3fn], ids=["int8", "fp8"])
def test_cuda_mma_route(vdtype, dynamic, monkeypatch):
    """The dispatch route (act_split or act_quant, then sparse24_mma) on a module's one buffer, 2-D / 3-D / strided
    x, against the packed route (weight-only numerics: W8A8 differs by its quantized x)."""
    from fused.sparse_modules import FusedSparseGatedLinear

    monkeypatch.setattr(sm, "MMA", True)
    torch.manual_seed(0)
    fmt = "int8" if vdtype == torch.int8 else "float8_e4m3"
    mod = FusedSparseGatedLinear.from_float(torch.randn(512, 1024, device="cuda"), None, fmt=fmt, dynamic=dynamic)
    assert mod.tiled_meta
    for x in (torch.randn(1, 1024, device="cuda", dtype=torch.bfloat16),
              torch.randn(2, 3, 1024, device="cuda", dtype=torch.bfloat16),
              torch.randn(16, 2048, device="cuda", dtype=torch.bfloat16)[:, ::2]):
        monkeypatch.setattr(dispatch, "SPARSE_ROUTE", "packed")
        a = mod(x)
        monkeypatch.setattr(dispatch, "SPARSE_ROUTE", "mma")
        b = mod(x)
        assert b.shape == a.shape and sqnr(a.float(), b.float()) > (20 if dynamic else 35), x.shape


def test_mma_compiles_for_sm90_without_layout_conversions():
    """sm_90 compile (no GPU needed): the loop issues mma.sp, loads with 16-byte vectors, and no value moves between
    threads (the fragments are addressed by the physical lane)."""
    from sm90_compile import facts_in_subprocess

    facts = facts_in_subprocess("mma_facts")
    assert len(facts) == 6
    for label, (mmas, converts, loads) in facts.items():
        # SPLIT_X's prologue (the planes, ordinary Triton tensors) reduces over a row: its one conversion is there
        assert mmas >= 2 and converts <= ("mma_x" in label) and loads > 0, (label, mmas, converts, loads)
