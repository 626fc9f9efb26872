"""Narrow fully-fused MLP: kernel vs reference (under TRITON_INTERPRET=1 on the CPU), packing vs the
original nn.Sequential, the module / config / filter / op, and clear errors."""
import io

import pytest
import torch
from torch import nn
from torchao.quantization import quantize_

import fused
from fused import dispatch
from fused.kernels.narrow_mlp import candidates, narrow_mlp, weight_smem_bytes
from fused.narrow import FusedNarrowMLP, FusedNarrowMLPConfig, is_narrow_mlp, pack_narrow, unpack_narrow
from fused.reference import narrow_mlp_ref
from lowbit import sqnr

ACT_MODULES = {"relu": nn.ReLU, "silu": nn.SiLU, "gelu": nn.GELU, "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
               "none": None}


def make_seq(dims, acts, bias=True, dropout=False):
    layers = []
    for k, n, a in zip(dims[:-1], dims[1:], acts):
        layers.append(nn.Linear(k, n, bias=bias))
        if ACT_MODULES[a] is not None:
            layers.append(ACT_MODULES[a]())
        if dropout:
            layers.append(nn.Dropout(0.5))
    return nn.Sequential(*layers).eval()


ARCHS = {
    "3-16-37-5": ([3, 16, 37, 5], ["relu", "gelu_tanh", "none"]),
    "64x5-relu": ([64] * 6, ["relu"] * 5),
    "1-layer": ([7, 9], ["silu"]),
    "8-layers": ([5, 17, 33, 128, 16, 3, 20, 31, 6], ["relu", "silu", "gelu", "gelu_tanh", "none", "relu", "silu", "none"]),
}
# kernel vs the fp32 reference on the same packed weights: the kernel rounds activations to the input
# dtype between layers, the reference does not
MIN_SQNR_KERNEL = {torch.float32: 90.0, torch.float16: 45.0, torch.bfloat16: 30.0}
# the converted module vs the original fp32 Sequential: adds the weight rounding / int8 quantization
MIN_SQNR_MODULE = {"fp16": 40.0, "bf16": 28.0, "int8": 25.0}


def run_kernel(mod, x, **kw):
    return narrow_mlp(x, mod.weights, mod.params, mod.dims, mod.acts, **kw)


def check(mod, seq, x, y, wdtype):
    ref = narrow_mlp_ref(x, mod.weights, mod.params, mod.dims, mod.acts)
    assert y.shape == ref.shape and y.dtype == x.dtype
    s = sqnr(ref.float(), y.float())
    assert s > MIN_SQNR_KERNEL[x.dtype], f"kernel vs reference {s:.1f} dB"
    with torch.no_grad():
        orig = seq(x.float())
    s2 = sqnr(orig, y.float())
    assert s2 > min(MIN_SQNR_MODULE[wdtype], MIN_SQNR_KERNEL[x.dtype]), f"vs the original Sequential {s2:.1f} dB"


@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("wdtype", ["fp16", "bf16", "int8"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_kernel_matches_reference(arch, wdtype, dtype):
    dims, acts = ARCHS[arch]
    seq = make_seq(dims, acts)
    mod = FusedNarrowMLP.from_module(seq, wdtype)
    for M in (1, 17):
        x = torch.randn(M, dims[0], dtype=dtype)
        out = torch.full((M, dims[-1]), float("nan"), dtype=dtype)  # every element must be written
        y = run_kernel(mod, x, out=out)
        assert y is out
        check(mod, seq, x, y, wdtype)


@pytest.mark.parametrize("act", ["relu", "silu", "gelu", "gelu_tanh", "none"])
@pytest.mark.parametrize("bias", [True, False])
def test_each_activation_and_bias(act, bias):
    dims = [10, 24, 12]
    seq = make_seq(dims, [act, act], bias=bias)
    mod = FusedNarrowMLP.from_module(seq, "fp16")
    assert mod.acts == [act, act]
    x = torch.randn(3, 10, dtype=torch.float16)
    check(mod, seq, x, run_kernel(mod, x), "fp16")


@pytest.mark.parametrize("M", [1, 3, 17, 300])
def test_batch_sizes(M):
    dims, acts = ARCHS["3-16-37-5"]
    seq = make_seq(dims, acts)
    mod = FusedNarrowMLP.from_module(seq, "int8")
    x = torch.randn(M, 3, dtype=torch.float16)
    check(mod, seq, x, run_kernel(mod, x), "int8")


@pytest.mark.parametrize("wdtype", ["fp16", "int8"])
@pytest.mark.parametrize("arch", ["3-16-37-5", "8-layers"])
def test_persistent_grid_with_prefetch_and_hoist(arch, wdtype):
    """The grid-stride loop (fewer programs than tiles) with the next-tile prefetch and / or the weights
    hoisted out of the loop, M not a multiple of BLOCK_M."""
    dims, acts = ARCHS[arch]
    seq = make_seq(dims, acts)
    mod = FusedNarrowMLP.from_module(seq, wdtype)
    x = torch.randn(67, dims[0], dtype=torch.float16)
    for prefetch in (False, True):
        for hoist in (False, True):
            cfg = dict(BLOCK_M=16, num_warps=4, num_stages=1, programs=2, prefetch=prefetch, hoist=hoist)
            out = torch.full((67, dims[-1]), float("nan"), dtype=torch.float16)
            check(mod, seq, x, run_kernel(mod, x, config=cfg, out=out), wdtype)


def test_noncontiguous_3d_and_strided_output():
    dims, acts = ARCHS["3-16-37-5"]
    seq = make_seq(dims, acts)
    mod = FusedNarrowMLP.from_module(seq, "bf16")
    base = torch.randn(40, 9, dtype=torch.bfloat16)
    x = base[3:20, 1::3]  # storage offset, column stride 3
    assert not x.is_contiguous()
    check(mod, seq, x, run_kernel(mod, x), "bf16")
    xt = torch.randn(3, 11, dtype=torch.bfloat16).t()  # transposed view [11, 3]
    check(mod, seq, xt, run_kernel(mod, xt), "bf16")
    out = torch.full((5, 11), float("nan"), dtype=torch.bfloat16).t()  # the kernel stores through strides
    check(mod, seq, xt, run_kernel(mod, xt, out=out), "bf16")
    # 3-D through the module (Triton path forced), with a non-contiguous view
    x3 = torch.randn(2, 7, 6, dtype=torch.bfloat16)[:, :, ::2]
    with dispatch.force_path("triton"), torch.no_grad():
        y3 = mod(x3)
    assert y3.shape == (2, 7, 5)
    ref = narrow_mlp_ref(x3, mod.weights, mod.params, mod.dims, mod.acts)
    assert sqnr(ref.float(), y3.float()) > MIN_SQNR_KERNEL[torch.bfloat16]


def test_empty_batch():
    mod = FusedNarrowMLP.from_module(make_seq([4, 8, 2], ["relu", "none"]), "fp16")
    for path in ("triton", "reference", None):  # None: the CPU path
        with dispatch.force_path(path):
            y = mod(torch.randn(0, 4, dtype=torch.float16))
        assert y.shape == (0, 2) and y.dtype == torch.float16
    assert mod(torch.randn(2, 0, 4)).shape == (2, 0, 2)


def test_pack_roundtrip_and_padding():
    seq = make_seq([3, 16, 37, 5], ["relu", "none", "none"], bias=False)
    for wdtype, tol in (("fp16", 1e-3), ("int8", 2e-2)):
        mod = FusedNarrowMLP.from_module(seq, wdtype)
        layers = unpack_narrow(mod.weights, mod.params, mod.dims)
        for (w, b), lin in zip(layers, [m for m in seq if isinstance(m, nn.Linear)]):
            assert w.shape == lin.weight.shape and torch.equal(b, torch.zeros_like(b))
            assert (w - lin.weight).abs().max() <= tol * lin.weight.abs().max()
    # zero padding: a 37-wide layer occupies 64 rows of [N, K], the padding is exactly zero
    w, p = pack_narrow([torch.ones(37, 16, dtype=torch.float16)], [None], [None], torch.float16)
    w = w.view(64, 16)
    assert w[:37].eq(1).all() and w[37:].eq(0).all() and p.view(2, 64)[0].eq(1).all()


def test_module_paths_agree_and_dropout_ignored():
    seq = make_seq([6, 20, 4], ["gelu", "none"], dropout=True)
    mod = FusedNarrowMLP.from_module(seq, "fp16")
    assert mod.dims == [6, 20, 4]
    x = torch.randn(5, 6)
    dispatch.stats.clear()
    with torch.no_grad():
        ref = mod(x)  # the CPU path
        with dispatch.force_path("triton"):
            y = mod(x)
    assert dispatch.stats[("narrow_mlp", "cpu:narrow_addmm")] == 1
    assert dispatch.stats[("narrow_mlp", "triton:narrow_mlp")] == 1
    assert sqnr(ref, y) > MIN_SQNR_KERNEL[torch.float32]
    assert sqnr(seq(x), y) > 60  # fp16 weights, fp32 activations, dropout off


def test_autocast_runs_in_bf16():
    mod = FusedNarrowMLP.from_module(make_seq([6, 20, 4], ["relu", "none"]), "fp16")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = mod(torch.randn(3, 6))
    assert y.dtype == torch.bfloat16


# --------------------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("seq, match", [
    (nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 129)), r"layer 2 \(Linear\) has out_features=129"),
    (nn.Sequential(nn.Linear(200, 8)), r"layer 0 \(Linear\) has in_features=200"),
    (nn.Sequential(*[nn.Linear(8, 8) for _ in range(9)]), r"9 Linear layers.*at most 8"),
    (nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)), r"layer 1 \(Tanh\) is not a Linear"),
    (nn.Sequential(nn.LayerNorm(4), nn.Linear(4, 2)), r"layer 0 \(LayerNorm\)"),
    (nn.Sequential(nn.ReLU(), nn.Linear(4, 2)), r"layer 0 \(ReLU\) comes before any Linear"),
    (nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.SiLU()), r"layer 2 \(SiLU\) is a second activation"),
    (nn.Sequential(nn.Linear(4, 8), nn.Linear(7, 2)), r"layer 1 \(Linear\) takes 7 features.*gives 8"),
    (nn.Sequential(nn.ReLU()), r"comes before any Linear"),
    (nn.Sequential(nn.Dropout()), r"holds no nn.Linear"),
    (nn.Linear(4, 4), r"expected an nn.Sequential"),
])
def test_unsupported_models_raise(seq, match):
    with pytest.raises(ValueError, match=match):
        FusedNarrowMLP.from_module(seq)
    assert not is_narrow_mlp(seq)


def test_bad_weights_and_options():
    seq = make_seq([4, 8, 2], ["relu", "none"])
    with pytest.raises(ValueError, match="weight_dtype must be one of"):
        FusedNarrowMLP.from_module(seq, "fp8")
    with pytest.raises(ValueError, match="weight_dtype must be one of"):
        FusedNarrowMLPConfig("int4")
    seq[2].weight.data[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"Linear #1 weight has 1 NaN/Inf"):
        FusedNarrowMLP.from_module(seq)


def test_bad_inputs_at_run_time():
    mod = FusedNarrowMLP.from_module(make_seq([4, 8, 2], ["relu", "none"]), "int8")
    with pytest.raises(ValueError, match="input has 5 features, the MLP expects 4"):
        mod(torch.randn(3, 5))
    with pytest.raises(TypeError, match="float16/bfloat16/float32"):
        mod(torch.ones(3, 4, dtype=torch.int32))
    with pytest.raises(ValueError, match="do not agree"):
        narrow_mlp(torch.randn(3, 4), mod.weights, mod.params, [4, 8, 2], ["relu"])
    with pytest.raises(ValueError, match="packed buffers"):
        narrow_mlp(torch.randn(3, 4), mod.weights[:-1], mod.params, [4, 8, 2], ["relu", "none"])
    x = torch.randn(2, 4, requires_grad=True)
    y = mod(x)  # through the custom op: inference only, backward raises
    with pytest.raises(RuntimeError, match="inference-only"):
        y.sum().backward()


# ------------------------------------------------------------------------------- quantize_ / op / state

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = make_seq([3, 32, 32, 16], ["relu", "relu", "none"])
        self.wide = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 16))
        self.head = make_seq([16, 8, 1], ["silu", "none"])

    def forward(self, x):
        return self.head(self.wide(self.encoder(x)))


@pytest.mark.parametrize("wdtype", ["fp16", "bf16", "int8"])
def test_quantize_with_filter(wdtype):
    model = Net().eval()
    x = torch.randn(9, 3)
    with torch.no_grad():
        ref = model(x)
    quantize_(model, FusedNarrowMLPConfig(wdtype), filter_fn=fused.is_narrow_mlp)
    assert isinstance(model.encoder, fused.FusedNarrowMLP) and isinstance(model.head, fused.FusedNarrowMLP)
    assert isinstance(model.wide, nn.Sequential)  # width 256: not narrow, left alone
    assert model.encoder.fmt == {"fp16": "float16", "bf16": "bfloat16", "int8": "int8"}[wdtype]
    with torch.no_grad(), dispatch.force_path("triton"):
        y = model(x)
    assert sqnr(ref, y) > MIN_SQNR_MODULE[wdtype]
    rows = fused.explain(model, print_table=False)
    assert [r["module"] for r in rows] == ["encoder", "head"]
    assert rows[0]["path"] == "cpu:narrow_addmm" and rows[0]["act"] == "relu,relu,none"
    assert fused.explain(model, device="cuda", print_table=False)[0]["path"] == "triton:narrow_mlp"


def test_quantize_handler_error_names_module():
    model = nn.Sequential(nn.Linear(4, 4))
    model.add_module("odd", nn.Sequential(nn.Linear(4, 4), nn.Tanh()))
    with pytest.raises(ValueError, match=r"odd: layer 1 \(Tanh\)"):
        quantize_(model, FusedNarrowMLPConfig(), filter_fn=lambda m, fqn: fqn == "odd")


@pytest.mark.parametrize("wdtype", ["fp16", "int8"])
def test_opcheck(wdtype):
    mod = FusedNarrowMLP.from_module(make_seq([5, 12, 3], ["gelu", "none"]), wdtype)
    op = torch.ops.fusedmlp.narrow_mlp.default
    for shape, dtype in [((3, 5), torch.float32), ((2, 4, 5), torch.bfloat16), ((0, 5), torch.float16)]:
        args = (torch.randn(*shape, dtype=dtype), mod.weights, mod.params, mod.dims, "gelu,none")
        torch.library.opcheck(op, args)
        assert op(*args).shape == (*shape[:-1], 3)


def test_compile_fullgraph():
    model = Net().eval()
    quantize_(model, FusedNarrowMLPConfig("fp16"), filter_fn=fused.is_narrow_mlp)
    x = torch.randn(6, 3)
    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model, backend="aot_eager", fullgraph=True)(x)
    assert torch.equal(eager, compiled)


def test_state_dict_roundtrip_and_dtype_moves():
    seq = make_seq([3, 16, 37, 5], ["relu", "gelu_tanh", "none"])
    mod = FusedNarrowMLP.from_module(seq, "int8")
    mod.half()  # must not touch the int8 weights or the fp32 scales / biases
    assert mod.weights.dtype == torch.int8 and mod.params.dtype == torch.float32
    buf = io.BytesIO()
    torch.save(mod.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=True)
    fresh = FusedNarrowMLP(mod.dims, mod.acts, "int8")
    fresh.load_state_dict(sd)
    x = torch.randn(4, 3)
    assert torch.equal(fresh(x), mod(x))
    wrong = FusedNarrowMLP(mod.dims, mod.acts, "fp16")
    with pytest.raises(ValueError, match=r"checkpoint key 'weight_pack': expected torch.float16"):
        wrong.load_state_dict(sd)


def test_state_dict_of_the_first_layout_loads():
    # before 2026-12-01 the buffer was "weights" with each layer stored as Wᵀ [pad(K), pad(N)]
    dims = [5, 17, 33, 128, 16, 3]
    seq = make_seq(dims, ["relu", "silu", "gelu", "none", "relu"])
    mod = FusedNarrowMLP.from_module(seq, "fp16")
    old, o = [], 0
    for k, n in zip(dims[:-1], dims[1:]):
        kp, np_ = (fused.narrow.padded_width(d) for d in (k, n))
        old.append(mod.weights[o:o + kp * np_].view(np_, kp).t().reshape(-1))
        o += kp * np_
    sd = {"weights": torch.cat(old), "params": mod.params.clone()}
    fresh = FusedNarrowMLP(dims, mod.acts, "fp16")
    fresh.load_state_dict(sd)
    assert torch.equal(fresh.weights, mod.weights)


def test_candidate_configs_are_valid():
    for w in (16, 32, 64, 128):
        for c in candidates(w, 0):
            assert c["BLOCK_M"] >= 64 and c["num_warps"] in (4, 8)
            assert not c["hoist"] or c["programs_per_sm"] > 0  # hoisting pays only in a persistent loop
        assert not any(c["hoist"] for c in candidates(w))
    # width 128 x 5 layers (160 KB of weights) hoists at 1 stage with 128-row tiles, at 2 (TMA) with 64-row
    # tiles; x 8 layers (256 KB) not at all
    assert sum(1 for c in candidates(64) if c.get("maxnreg")) == 3
    hoisted = [(c["num_stages"], c["BLOCK_M"]) for c in candidates(128, weight_smem_bytes([128] * 6)) if c["hoist"]]
    assert all(s == 1 or bm == 64 for s, bm in hoisted) and (1, 128) in hoisted
    assert not any(c["hoist"] for c in candidates(128, weight_smem_bytes([128] * 9)))


# ------------------------------------------------------------------------------------------------ GPU

@pytest.mark.cuda
def test_cuda_width64_depth5_batch_2_21():
    seq = make_seq([64] * 6, ["relu"] * 5).cuda()
    mod = FusedNarrowMLP.from_module(seq, "fp16")
    x = torch.randn(2 ** 21, 64, device="cuda", dtype=torch.float16)
    y = mod(x)
    ref = narrow_mlp_ref(x, mod.weights, mod.params, mod.dims, mod.acts)
    assert sqnr(ref.float(), y.float()) > MIN_SQNR_KERNEL[torch.float16]
    assert dispatch.stats[("narrow_mlp", "triton:narrow_mlp")] >= 1


@pytest.mark.cuda
@pytest.mark.parametrize("wdtype", ["fp16", "bf16", "int8"])
@pytest.mark.parametrize("arch", list(ARCHS))
def test_cuda_every_candidate_config(wdtype, arch):
    dims, acts = ARCHS[arch]
    seq = make_seq(dims, acts).cuda()
    mod = FusedNarrowMLP.from_module(seq, wdtype)
    dtype = torch.bfloat16 if wdtype == "bf16" else torch.float16
    x = torch.randn(5000, dims[0], device="cuda", dtype=dtype)
    ref = narrow_mlp_ref(x, mod.weights, mod.params, mod.dims, mod.acts)
    from fused.narrow import padded_width
    pads = [padded_width(d) for d in dims]
    for cfg in candidates(max(pads), weight_smem_bytes(pads)):
        y = run_kernel(mod, x, config=cfg, out=torch.full_like(ref, float("nan")))
        assert sqnr(ref.float(), y.float()) > MIN_SQNR_KERNEL[dtype], cfg


def _every_pair(widths):
    """A walk through ``widths`` that takes every ordered pair (a, b) once (an Euler circuit of the
    complete digraph with loops), so every layer shape K -> N of those widths appears."""
    out, left = [], {a: list(widths) for a in widths}
    stack = [widths[0]]
    while stack:
        a = stack[-1]
        if left[a]:
            stack.append(left[a].pop())
        else:
            out.append(stack.pop())
    return out[::-1]


@pytest.mark.cuda
@pytest.mark.parametrize("wdtype", ["fp16", "int8"])
@pytest.mark.parametrize("top", [128, 64, 32])
def test_cuda_every_layer_shape(wdtype, top):
    # every K -> N of the padded widths up to ``top`` (odd real widths, so masks and padding are active),
    # in 8-layer pieces: a wgmma layout that is wrong for one tile shape / warp split shows here (the
    # 8-layer network faulted on sm_90 until narrow widths compiled with mma.sync). Every candidate config
    # for fp16 at width 128, the first three elsewhere (each 8-layer compile takes seconds)
    real = {16: 13, 32: 29, 64: 61, 128: 128}
    walk = [real[w] for w in _every_pair([w for w in (16, 32, 64, 128) if w <= top])]
    acts = ["relu", "silu", "gelu", "gelu_tanh", "none"]
    torch.manual_seed(0)
    for i in range(0, len(walk) - 1, 8):
        dims = walk[i:i + 9]
        seq = make_seq(dims, [acts[j % len(acts)] for j in range(len(dims) - 1)]).cuda()
        mod = FusedNarrowMLP.from_module(seq, wdtype)
        x = torch.randn(777, dims[0], device="cuda", dtype=torch.float16)
        ref = narrow_mlp_ref(x, mod.weights, mod.params, mod.dims, mod.acts)
        pads = [fused.narrow.padded_width(d) for d in dims]
        cands = candidates(top, weight_smem_bytes(pads))
        for cfg in cands if (wdtype, top) == ("fp16", 128) else cands[:3]:
            y = run_kernel(mod, x, config=cfg, out=torch.full_like(ref, float("nan")))
            assert sqnr(ref.float(), y.float()) > MIN_SQNR_KERNEL[torch.float16], (dims, cfg)


def test_narrow_widths_compile_without_wgmma(monkeypatch):
    # any padded width below 64 -> DISABLE_MMA_V3 while the kernel compiles (Triton's sm_90 wgmma fault with
    # 16/32-wide dots); 64/128-only networks keep wgmma
    import os

    from fused.kernels import launch
    from fused.kernels import narrow_mlp as nm
    seen = []
    real = nm.launch_kernel
    monkeypatch.setattr(nm, "launch_kernel", lambda *a, **kw: (seen.append(kw.get("compile_env")), real(*a, **kw)))
    for dims, v2 in (([5, 17, 6], True), ([64, 64, 64], False), ([64, 128, 29], True), ([64, 128, 33], False)):
        mod = FusedNarrowMLP.from_module(make_seq(dims, ["relu"] * (len(dims) - 1)), "fp16")
        seen.clear()
        run_kernel(mod, torch.randn(3, dims[0], dtype=torch.float16))
        assert seen and all((e == {"DISABLE_MMA_V3": "1"}) == v2 and (e is None) == (not v2) for e in seen)
    before = os.environ.get("DISABLE_MMA_V3")
    with launch._Env({"DISABLE_MMA_V3": "1"}):
        assert os.environ["DISABLE_MMA_V3"] == "1"
    assert os.environ.get("DISABLE_MMA_V3") == before


def test_every_pair_walk():
    w = _every_pair([16, 32, 64, 128])
    assert len(w) == 17 and w[0] == w[-1] == 16
    assert sorted(zip(w[:-1], w[1:])) == sorted((a, b) for a in (16, 32, 64, 128) for b in (16, 32, 64, 128))


def test_bench_example_smoke(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    p = subprocess.run([sys.executable, str(root / "examples" / "narrow_mlp_bench.py"), "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, cwd=root)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "| width | layers | batch |" in p.stdout
    for f in ("narrow_mlp.json", "narrow_mlp.md", "narrow_mlp.png"):
        assert (tmp_path / f).exists()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_relu16_keeps_nan_and_matches_fp32_relu(device, dtype, monkeypatch):
    """relu on packed 16-bit pairs after the rounding (RELU16): a NaN row stays NaN through every relu layer,
    as in torch, negative sums give 0, and every other value equals the fp32-relu kernel's bit for bit (relu
    commutes with the rounding). On the GPU this runs max.NaN.f16x2 / bf16x2; on the CPU the tl.where form."""
    from fused.kernels import narrow_mlp as nm

    dims = [64, 64, 48, 64, 64]
    mod = FusedNarrowMLP.from_module(make_seq(dims, ["relu", "relu", "relu", "none"]), "fp16").to(device)
    x = torch.randn(37, dims[0], dtype=dtype, device=device)
    x[5, 3] = float("nan")
    ys = {}
    for on in (True, False):
        monkeypatch.setattr(nm, "RELU16", on)
        assert (nm._relu16_mode(dtype) != 0) == on
        ys[on] = run_kernel(mod, x, out=torch.full((37, dims[-1]), float("nan"), dtype=dtype, device=device))
    ref = narrow_mlp_ref(x, mod.weights, mod.params, mod.dims, mod.acts)
    ok = torch.arange(37, device=device) != 5
    assert torch.isnan(ys[True][5]).all() and torch.isnan(ref[5]).all()
    assert not torch.isnan(ys[True][ok]).any()
    assert torch.equal(ys[True][ok], ys[False][ok])
    assert sqnr(ref[ok].float(), ys[True][ok].float()) > MIN_SQNR_KERNEL[dtype]
    # the first layer's relu really clips: its output has zeros (checked through the 1-layer prefix)
    one = FusedNarrowMLP.from_module(make_seq(dims[:2], ["relu"]), "fp16").to(device)
    monkeypatch.setattr(nm, "RELU16", True)
    h = run_kernel(one, x[ok])
    assert (h == 0).any() and (h >= 0).all()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_tma_input_tiles_equal_pointer_loads(device):
    """The TMA candidates (input tiles through a descriptor, zero-filled past M and past K_IN) give the same
    bits as pointer loads; an x a descriptor cannot take (strided columns, unaligned rows) runs pointer loads."""
    from fused.kernels.narrow_mlp import tma_ok

    bm = 16 if device == "cpu" else 128
    for dims, acts in (([40, 64, 24], ["relu", "none"]), ([64] * 4, ["relu", "silu", "none"])):
        mod = FusedNarrowMLP.from_module(make_seq(dims, acts), "fp16").to(device)
        for M in (1, 37, 300):
            x = torch.randn(M, dims[0], dtype=torch.float16, device=device)
            assert tma_ok(x, 64)
            ref = narrow_mlp_ref(x, mod.weights, mod.params, mod.dims, mod.acts)
            cfg = dict(BLOCK_M=bm, num_warps=4, num_stages=2, programs=3, hoist=True)
            ys = [run_kernel(mod, x, config=dict(cfg, tma=t), out=torch.full_like(ref, float("nan")))
                  for t in (True, False)]
            assert torch.equal(ys[0], ys[1]) and sqnr(ref.float(), ys[0].float()) > MIN_SQNR_KERNEL[torch.float16]
    xs = torch.randn(8, 128, dtype=torch.float16, device=device)[:, ::2]  # column stride 2
    assert not tma_ok(xs, 64) and not tma_ok(torch.randn(8, 12, dtype=torch.float16, device=device), 16)
    mod = FusedNarrowMLP.from_module(make_seq([64, 64, 8], ["relu", "none"]), "fp16").to(device)
    y = run_kernel(mod, xs, config=dict(BLOCK_M=bm, num_warps=4, num_stages=2, programs=2, hoist=True, tma=True))
    ref = narrow_mlp_ref(xs, mod.weights, mod.params, mod.dims, mod.acts)
    assert sqnr(ref.float(), y.float()) > MIN_SQNR_KERNEL[torch.float16]


def test_tma_candidates_offered(monkeypatch):
    """With narrow_mlp.TMA (on by default) every width class offers hoisted TMA candidates, each fitting the
    shared-memory budget with its weights and input stages (width 128: only 64-row tiles do); without it, none."""
    from fused.kernels import narrow_mlp as nm

    for on in (True, False):
        monkeypatch.setattr(nm, "TMA", on)
        for width in (16, 32, 64, 128):
            pads = [width] * 6
            tma = [c for c in candidates(width, weight_smem_bytes(pads)) if c.get("tma")]
            assert bool(tma) == on and all(c["hoist"] and c["num_stages"] >= 2 for c in tma)
            assert all(weight_smem_bytes(pads) + c["num_stages"] * c["BLOCK_M"] * width * 2 <= nm.SMEM_BUDGET
                       for c in tma)
            assert width != 128 or all(c["BLOCK_M"] == 64 for c in tma)
            assert not any(c.get("tma") for c in candidates(width, weight_smem_bytes(pads), tma=False))
    # the tuning key tells an x a descriptor can take from one it cannot (that one is tuned without TMA)
    from fused.kernels import tuning

    mod = FusedNarrowMLP.from_module(make_seq([64, 64, 8], ["relu", "none"]), "fp16")
    for x, ok in ((torch.randn(8, 64, dtype=torch.float16), True),
                  (torch.randn(8, 128, dtype=torch.float16)[:, ::2], False)):
        tuning._cache.clear()
        run_kernel(mod, x)
        assert [k[-2] for k in tuning._cache if k[0] == "narrow_mlp"] == [ok]


@pytest.mark.cuda
def test_cuda_eager_calls_are_replayed():
    """Eager calls of the module replay their recorded launch (fused.dispatch.eager), the TMA candidates'
    included (their descriptor is made on the device, so the launch takes only pointers): same bits."""
    from fused.kernels import launch, tuning

    mod = FusedNarrowMLP.from_module(make_seq([64] * 6, ["relu"] * 5), "fp16").cuda()
    x = torch.randn(3000, 64, device="cuda", dtype=torch.float16)
    want = mod(x)
    key = next(k for k in tuning._cache if k[0] == "narrow_mlp" and k[2] == tuple([64] * 6))
    for cfg in (dict(BLOCK_M=128, num_warps=8, num_stages=3, programs_per_sm=2, prefetch=False, hoist=True, tma=True),
                dict(BLOCK_M=128, num_warps=4, num_stages=1, programs_per_sm=3, prefetch=False, hoist=True)):
        tuning._cache[key] = cfg
        mod.__dict__.pop("_replays", None)
        ys = [mod(x) for _ in range(2)]
        before = launch.counts["replayed"]
        ys += [mod(x) for _ in range(3)]
        assert launch.counts["replayed"] - before == 3, cfg
        assert all(torch.equal(y, want) for y in ys), cfg
        assert dispatch.replay_status(mod)[0] == 1


@pytest.mark.cuda
def test_cuda_tma_replay_in_another_thread():
    """A module recorded in this thread replays its TMA launch in a fresh thread (Triton's scratch allocator is
    per thread: the replay sets ours there first). Written in the eleventh session after its last GPU call."""
    import threading

    from fused.kernels import launch, tuning

    mod = FusedNarrowMLP.from_module(make_seq([64] * 6, ["relu"] * 5), "fp16").cuda()
    x = torch.randn(3000, 64, device="cuda", dtype=torch.float16)
    mod(x)
    key = next(k for k in tuning._cache if k[0] == "narrow_mlp" and k[2] == tuple([64] * 6))
    tuning._cache[key] = dict(BLOCK_M=128, num_warps=8, num_stages=3, programs_per_sm=2, prefetch=False, hoist=True,
                              tma=True)
    mod.__dict__.pop("_replays", None)
    want = [mod(x) for _ in range(2)][-1]
    out = {}

    def worker():
        before = launch.counts["replayed"]
        out["y"] = mod(x)
        torch.cuda.synchronize()
        out["replayed"] = launch.counts["replayed"] - before

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert out["replayed"] == 1 and torch.equal(out["y"], want)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_tma_output_tiles_equal_pointer_stores(device, monkeypatch):
    """Output tiles by TMA store (clipped at M and at N_OUT) give the same bits as pointer stores, into a fresh
    output and into an out= view a descriptor can take; an output it cannot take (rows of 12 bytes) is stored
    by pointers. Offered to the tuner unless narrow_mlp.TMA_OUT = 0."""
    from fused.kernels import narrow_mlp as nm

    bm = 16 if device == "cpu" else 128
    for dims, acts in (([64, 64, 24], ["relu", "none"]), ([40, 64, 64, 64], ["relu", "silu", "none"]),
                       ([64, 32, 6], ["gelu", "none"])):
        mod = FusedNarrowMLP.from_module(make_seq(dims, acts), "fp16").to(device)
        for M in (1, 37, 300):
            x = torch.randn(M, dims[0], dtype=torch.float16, device=device)
            ref = narrow_mlp_ref(x, mod.weights, mod.params, mod.dims, mod.acts)
            cfg = dict(BLOCK_M=bm, num_warps=4, num_stages=2, programs=3, hoist=True, tma=True)
            ys = [run_kernel(mod, x, config=dict(cfg, tma_out=t), out=torch.full_like(ref, float("nan")))
                  for t in (True, False)]
            assert torch.equal(ys[0], ys[1]) and sqnr(ref.float(), ys[0].float()) > MIN_SQNR_KERNEL[torch.float16]
            assert nm.tma_ok(ys[0], 16) == (dims[-1] % 8 == 0)
            wide = torch.full((M, 2 * dims[-1] + 8), float("nan"), dtype=torch.float16, device=device)
            view = wide[:, 8:8 + dims[-1]]  # 16-byte aligned start, row stride 2·N + 8 elements
            run_kernel(mod, x, config=dict(cfg, tma_out=True), out=view)
            assert torch.equal(view, ys[1]) and torch.isnan(wide[:, :8]).all() and torch.isnan(wide[:, 8 + dims[-1]:]).all()
    monkeypatch.setattr(nm, "TMA_OUT", False)
    assert not any(c.get("tma_out") for c in candidates(64, weight_smem_bytes([64] * 6)))
    monkeypatch.setattr(nm, "TMA_OUT", True)
    outs = [c for c in candidates(64, weight_smem_bytes([64] * 6)) if c.get("tma_out")]
    assert len(outs) == 3 and all(c["tma"] for c in outs)
    assert not any(c.get("tma_out") for c in candidates(64, weight_smem_bytes([64] * 6), tma_out=False))


@pytest.mark.parametrize("wdtype", ["fp16", "bf16", "int8"])
@pytest.mark.parametrize("xdtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cpu_path_matches_reference(wdtype, xdtype):
    # the CPU path (addmm + in-place activation on cached fp32 layers) against the reference: both fp32 math,
    # one rounding to x's dtype; every activation, odd widths, 3-D and strided input
    seq = make_seq([5, 17, 33, 128, 3], ["relu", "gelu", "silu", "gelu_tanh"])
    mod = FusedNarrowMLP.from_module(seq, wdtype)
    x = torch.randn(2, 9, 10, dtype=xdtype)[:, :, ::2]
    dispatch.stats.clear()
    with torch.no_grad():
        y = mod(x)
    assert dict(dispatch.stats) == {("narrow_mlp", "cpu:narrow_addmm"): 1}
    ref = narrow_mlp_ref(x, mod.weights, mod.params, mod.dims, mod.acts)
    assert y.shape == ref.shape == (2, 9, 3) and y.dtype == xdtype
    assert sqnr(ref.float(), y.float()) > (100 if xdtype == torch.float32 else MIN_SQNR_KERNEL[xdtype] + 10)


def test_cpu_path_cache_follows_the_buffers_and_is_counted():
    seq = make_seq([6, 20, 4], ["relu", "none"])
    mod = FusedNarrowMLP.from_module(seq, "int8")
    x = torch.randn(3, 6)
    with torch.no_grad():
        y0 = mod(x)
    cached = fused.explain(nn.Sequential(mod), print_table=False)[0]
    assert cached["bytes_after"] == mod.weight_bytes() + 4 * (20 * 6 + 20 + 4 * 20 + 4)  # the fp32 layers
    other = FusedNarrowMLP.from_module(make_seq([6, 20, 4], ["relu", "none"]), "int8")
    mod.load_state_dict(other.state_dict())  # in place: the cached layers must not be served
    with torch.no_grad():
        y1 = mod(x)
    assert torch.equal(y1, other(x)) and not torch.equal(y0, y1)
    with torch.inference_mode():  # inference tensors have no version counter: unpacked per call, same result
        inf = FusedNarrowMLP.from_module(seq, "int8")
        assert torch.equal(inf(x), y0)
