"""The decode block kernel (a whole MLP block in one launch at M <= 16) vs the composed reference, its op,
dispatch, the modules' use of it and explain.

On the CPU the kernel runs in Triton's interpreter on tiny odd shapes (`dispatch.force_path("triton")`
for the module path); the `cuda` tests run on the H200 with Llama-sized blocks. Reference: the two-launch
path's numerics, gated_ref/linear_ref (weight-only) composed, h rounded to x's dtype in between.
"""
import pytest
import torch
from torch import nn

import fused
from fused import dispatch
from fused.demo import LlamaMLP
from fused.reference import gated_ref, linear_ref, mlp_block_ref
from lowbit import quantize_weight, sqnr

ACTS = ["none", "relu", "gelu", "gelu_tanh", "silu"]
FMTS = ["int8", "float8_e4m3"]



@pytest.fixture(autouse=True)
def _decode_block_on(monkeypatch):
    """The decode block is off by default (measured slower on the H200); these tests switch it on."""
    monkeypatch.setattr(dispatch, "DECODE_BLOCK_MAX_M", 16)
    monkeypatch.setattr(dispatch, "_block_routes", {})

def _min_db(dtype):
    # bf16: the interpreter truncates where the GPU rounds (h and y: ~43 dB measured); fp16/fp32 match
    # the reference to the last bits or nearly (a missing rounding of h costs ~70 dB in fp16: see below)
    return {torch.bfloat16: 40.0, torch.float16: 80.0, torch.float32: 110.0}[dtype]


def _agrees(ref, y, dtype):
    """SQNR above _min_db; for fp16 also: every output within one fp16 step of the reference and at most 2 off. An
    fp32 difference in an activation can flip one rounding (numpy 2.4's erf in the interpreter against torch's:
    1 step in 60 outputs = 78.9 dB, CI 2026-12-02), where a missing rounding of h moves many (68-73 dB)."""
    if sqnr(ref, y) > _min_db(dtype):
        return True
    if dtype != torch.float16:
        return False
    up = torch.nextafter(ref, torch.full_like(ref, float("inf")))
    down = torch.nextafter(ref, torch.full_like(ref, -float("inf")))
    near = (y == ref) | (y == up) | (y == down)
    return bool(near.all()) and int((y != ref).sum()) <= 2


def _weights(K, H, D, gated, fmt, bias, device="cpu", fmt2=None):
    q1, s1 = quantize_weight(torch.randn((2 if gated else 1) * H, K, device=device) * K ** -0.5, fmt)
    q2, s2 = quantize_weight(torch.randn(D, H, device=device) * H ** -0.5, fmt2 or fmt)
    b1 = torch.randn(q1.shape[0], device=device) if bias else None
    b2 = torch.randn(D, device=device) if bias else None
    return q1, s1, b1, q2, s2, b2


def _x(M, K, dtype, view, device="cpu"):
    if view == "transposed":
        return torch.randn(K, M, device=device, dtype=dtype).t()
    if view == "3d_offset":
        return torch.randn(1, M + 1, K + 3, device=device, dtype=dtype)[0, 1:, 3:]
    return torch.randn(M, K, device=device, dtype=dtype)


def block_ref(x, q1, s1, b1, q2, s2, b2, act, gated, smooth_x=None, smooth_h=None):
    return mlp_block_ref(x, q1, s1, b1, q2, s2, b2, act, gated, smooth_x, smooth_h)


@pytest.fixture
def poisoned_empty(monkeypatch):
    """Every torch.empty float tensor starts as NaN: an output element the kernel never writes fails SQNR."""
    from test_kernels_w8 import _poisoned_empty

    _poisoned_empty(monkeypatch)


# ------------------------------------------------------------------------------------ the kernel, interpreted

@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("gated", [True, False])
def test_kernel_interpreted(gated, act, fmt, poisoned_empty):
    from fused.kernels.decode_block import decode_block

    for M, K, H, D, bias, dtype, view in [(1, 40, 24, 36, True, torch.bfloat16, "plain"),
                                          (3, 50, 37, 20, False, torch.float16, "transposed"),
                                          (16, 33, 70, 36, True, torch.bfloat16, "3d_offset")]:
        w = _weights(K, H, D, gated, fmt, bias)
        x = _x(M, K, dtype, view)
        y = decode_block(x, *w, act, gated)
        ref = block_ref(x, *w, act, gated)
        assert y.shape == (M, D) and y.dtype == dtype
        assert _agrees(ref, y, dtype), (M, K, H, D, dtype, view, sqnr(ref, y))


@pytest.mark.parametrize("gated", [True, False])
def test_split_mode_interpreted(gated, poisoned_empty):
    """SPLIT (int8 weights into int8 MMAs): x as two int8 planes per token and h's slice as two int8 planes
    per (token, slice), 15 bits each: within the reference's own rounding (fp16 h) by a wide margin."""
    from fused.kernels.decode_block import decode_block

    cfg = dict(BLOCK_M=16, BLOCK_H=16, BLOCK_K=32, BLOCK_D=16, num_warps=4, SPLIT=True)
    for M, K, H, D, bias, dtype, view, smooth in [(1, 40, 24, 36, True, torch.bfloat16, "plain", False),
                                                  (3, 64, 37, 20, False, torch.float16, "transposed", True),
                                                  (16, 33, 70, 36, True, torch.float16, "3d_offset", False)]:
        w = _weights(K, H, D, gated, "int8", bias)
        x = _x(M, K, dtype, view)
        sx, sh = (torch.rand(K) + 0.5, torch.rand(H) + 0.5) if smooth else (None, None)
        y = decode_block(x, *w, "silu", gated, smooth_x=sx, smooth_h=sh, config=cfg)
        ref = block_ref(x, *w, "silu", gated, sx, sh)
        assert y.shape == (M, D) and y.dtype == dtype
        assert sqnr(ref, y) > (40 if dtype == torch.bfloat16 else 60), (M, K, H, D, dtype, view)
    x = _x(3, 40, torch.float16, "plain")
    x[1, 3] = float("nan")
    w = _weights(40, 24, 36, gated, "int8", True)
    y = decode_block(x, *w, "silu", gated, config=cfg)
    assert torch.isnan(y[1]).all() and torch.isfinite(y[[0, 2]]).all()
    with pytest.raises(ValueError, match="int8 weights"):
        decode_block(x, *_weights(40, 24, 36, gated, "float8_e4m3", True), "silu", gated, config=cfg)


def test_fp32_activations_mixed_formats_and_bf16_bias(poisoned_empty):
    from fused.kernels.decode_block import decode_block

    for M, gated in [(1, True), (5, False)]:
        q1, s1, b1, q2, s2, b2 = _weights(45, 29, 19, gated, "float8_e4m3", True, fmt2="int8")
        b1, b2 = b1.to(torch.bfloat16), b2.to(torch.bfloat16)  # the bias follows the model's dtype
        x = _x(M, 45, torch.float32, "transposed")
        y = decode_block(x, q1, s1, b1, q2, s2, b2, "gelu", gated)
        assert sqnr(block_ref(x, q1, s1, b1, q2, s2, b2, "gelu", gated), y) > _min_db(torch.float32)


def test_thresholds_can_fail():
    """The fp16 threshold catches a missing rounding of h, and a wrong kernel input scores far below it."""
    from fused.kernels.decode_block import decode_block

    K, H, D = 40, 48, 36
    q1, s1, b1, q2, s2, b2 = _weights(K, H, D, True, "int8", True)
    x = torch.randn(3, K, dtype=torch.float16)
    ref = block_ref(x, q1, s1, b1, q2, s2, b2, "silu", True)
    assert sqnr(ref, decode_block(x, q1, s1, b1, q2, s2, b2, "silu", True)) > _min_db(torch.float16)
    h32 = gated_ref(x.float(), q1, s1, b1, "silu")  # h left in fp32: the rounding the block must keep
    unrounded = linear_ref(h32, q2, s2, b2).to(torch.float16)
    assert sqnr(ref, unrounded) < _min_db(torch.float16) and not _agrees(ref, unrounded, torch.float16)
    swapped = torch.cat([q1[H:], q1[:H]]), torch.cat([s1[H:], s1[:H]])  # up rows where gate rows belong
    y = decode_block(x, *swapped, b1, q2, s2, b2, "silu", True)
    assert sqnr(ref, y) < 20


def test_smoothing_folded_in(poisoned_empty):
    from fused.kernels.decode_block import decode_block

    K, H, D = 36, 40, 28
    for gated in (True, False):
        w = _weights(K, H, D, gated, "int8", True)
        sx, sh = torch.rand(K) * 4 + 0.1, torch.rand(H) * 4 + 0.1
        # (bf16: the interpreter truncates 4 times in a row here, biased: ~34 dB; the GPU test covers bf16)
        for dtype in (torch.float16, torch.float32):
            x = _x(2, K, dtype, "plain") * 5
            y = decode_block(x, *w, "silu", gated, smooth_x=sx, smooth_h=sh)
            ref = block_ref(x, *w, "silu", gated, sx, sh)
            assert sqnr(ref, y) > _min_db(dtype)
            assert sqnr(ref, decode_block(x, *w, "silu", gated)) < 30  # the smoothing does matter


def test_nan_propagates_and_zero_rows_stay_finite():
    from fused.kernels.decode_block import decode_block

    K, H, D = 40, 37, 24
    q1, s1, b1, q2, s2, b2 = _weights(K, H, D, True, "int8", True)
    q1[5], s1[5] = 0, 0.0  # an all-zero weight row: scale 0
    q2[:, 3], q2[7], s2[7] = 0, 0, 0.0
    x = torch.randn(4, K, dtype=torch.bfloat16)
    x[2, 11] = float("nan")
    y = decode_block(x, q1, s1, b1, q2, s2, b2, "silu", True)
    ref = block_ref(x, q1, s1, b1, q2, s2, b2, "silu", True)
    assert torch.isnan(y[2]).all() and torch.isnan(ref[2]).all()
    ok = torch.tensor([0, 1, 3])
    assert torch.isfinite(y[ok]).all() and sqnr(ref[ok], y[ok]) > _min_db(torch.bfloat16)


def test_empty_batch():
    from fused.kernels.decode_block import decode_block

    w = _weights(16, 8, 12, True, "int8", False)
    assert decode_block(torch.randn(0, 16), *w, "silu", True).shape == (0, 12)
    with dispatch.force_path("triton"):
        assert dispatch.mlp_block(torch.randn(2, 0, 16), *w).shape == (2, 0, 12)


def test_workspace_left_zero_and_deterministic_mode(poisoned_empty, monkeypatch):
    """One-launch mode: the last program per chunk re-zeroes the workspace and counters (no memset);
    deterministic mode: fixed-order partial sums, bit-identical, and chosen by torch's global flag."""
    from fused.kernels import decode_block as db
    from fused.kernels import splitk

    K, H, D = 40, 70, 36  # 5 programs of BLOCK_H=16 (interpreter config), 3 chunks of BLOCK_D=16
    w = _weights(K, H, D, True, "float8_e4m3", True)
    x = torch.randn(3, K, dtype=torch.float32)
    ys = [db.decode_block(x, *w, "gelu_tanh", True) for _ in range(2)]
    acc, count = db._workspace[x.device]
    assert torch.count_nonzero(acc) == 0 and torch.count_nonzero(count) == 0
    assert torch.equal(ys[0], ys[1])

    det = [db.decode_block(x, *w, "gelu_tanh", True, deterministic=True) for _ in range(3)]
    assert all(torch.equal(det[0], d) for d in det[1:])
    assert sqnr(ys[0], det[0]) > _min_db(torch.float32)  # same sum, another order
    parts = []  # the deterministic mode's partials buffer is requested: that mode ran
    monkeypatch.setattr(db, "splitk_buffers", lambda *a: parts.append(a) or splitk.buffers(*a))
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        y = db.decode_block(x, *w, "gelu_tanh", True)
    finally:
        torch.use_deterministic_algorithms(old)
    assert len(parts) == 1 and torch.equal(y, det[0])


def test_out_argument_with_strides():
    from fused.kernels.decode_block import decode_block

    w = _weights(24, 20, 18, False, "int8", True)
    x = torch.randn(3, 24, dtype=torch.bfloat16)
    out = torch.full((18, 3), float("nan"), dtype=torch.bfloat16).t()
    y = decode_block(x, *w, "relu", False, out=out)
    assert y is out and sqnr(block_ref(x, *w, "relu", False), out) > _min_db(torch.bfloat16)
    with pytest.raises(ValueError, match="out must be"):
        decode_block(x, *w, "relu", False, out=torch.empty(3, 17, dtype=torch.bfloat16))


# --------------------------------------------------------------------------------------- dispatch and op

def test_plan_and_stats():
    assert dispatch.plan("mlp_block", "int8", False, "cuda", M=1)[0] == "triton:decode_block"
    assert dispatch.plan("mlp_block", "int8", True, "cuda", M=dispatch.DECODE_BLOCK_MAX_M)[0] == "triton:decode_block"
    assert dispatch.plan("mlp_block", "int8", False, "cuda", M=dispatch.DECODE_BLOCK_MAX_M + 1)[0] == "per_layer"
    assert dispatch.plan("mlp_block", "float8_e4m3", False, "cuda")[0] == "triton:decode_block|per_layer"
    assert dispatch.plan("mlp_block", "int8", False, "cpu", M=1)[0] == "per_layer"
    with dispatch.force_path("triton"):
        assert dispatch.plan("mlp_block", "int8", False, "cpu", M=3)[0] == "triton:decode_block"
    with dispatch.force_path("reference"):
        assert dispatch.plan("mlp_block", "int8", False, "cuda", M=1)[0] == "per_layer"

    w = _weights(32, 24, 16, True, "int8", True)
    x = torch.randn(2, 3, 32, dtype=torch.bfloat16)
    dispatch.stats.clear()
    with dispatch.force_path("triton"):
        y = dispatch.mlp_block(x, *w, "silu", True)
    assert dispatch.stats == {("mlp_block", "triton:decode_block"): 1}
    assert y.shape == (2, 3, 16) and sqnr(block_ref(x, *w, "silu", True), y) > _min_db(torch.bfloat16)
    # on the CPU (not forced) the block runs layer by layer, each layer on its own CPU path
    dispatch.stats.clear()
    y = dispatch.mlp_block(x, *w, "silu", True)
    assert dispatch.stats[("mlp_block", "per_layer")] == 1
    assert {op for op, _ in dispatch.stats} == {"mlp_block", "gated", "linear"}
    assert sqnr(block_ref(x, *w, "silu", True), y) > 30  # int8pack/bf16 GEMM rounding, not the kernel


def test_bad_inputs_are_clear_errors():
    q1, s1, b1, q2, s2, b2 = _weights(32, 24, 16, True, "int8", False)
    x = torch.randn(2, 32)
    with pytest.raises(ValueError, match="down weight expects 24 features, the first layer gives 12"):
        dispatch.mlp_block(x, q1[:24], s1[:24], None, q2, s2, None, "silu", True)
    with pytest.raises(ValueError, match="even row count"):
        dispatch.mlp_block(x, q1[:47], s1[:47], None, q2, s2, None, "silu", True)
    with pytest.raises(TypeError, match="w2 must be int8 or float8_e4m3fn"):
        dispatch.mlp_block(x, q1, s1, None, q2.to(torch.bfloat16), s2, None, "silu", True)
    with pytest.raises(TypeError, match="activations must be"):
        dispatch.mlp_block(x.to(torch.int32), q1, s1, None, q2, s2, None, "silu", True)
    with pytest.raises(ValueError, match="input has 31 features"):
        dispatch.mlp_block(x[:, :31], q1, s1, None, q2, s2, None, "silu", True)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("path", [None, "triton"])
def test_opcheck(fmt, path):
    target = torch.ops.fusedmlp.mlp_block.default
    # opcheck's test_schema compares inputs with an op that has no float8 CPU kernel (torch's limit)
    utils = ["test_schema"] if fmt == "int8" else []
    utils += ["test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"]
    with dispatch.force_path(path):
        for gated, bias, shape, dtype in [(True, False, (3, 24), torch.bfloat16),
                                          (False, True, (2, 2, 24), torch.float32),
                                          (True, True, (0, 24), torch.bfloat16)]:
            w = _weights(24, 20, 16, gated, fmt, bias)
            args = (torch.randn(*shape, dtype=dtype), *w, "gelu", gated, False, None, None)
            torch.library.opcheck(target, args, test_utils=utils)


# ------------------------------------------------------------------------------------------- modules

class Model(nn.Module):
    def __init__(self, d=40):
        super().__init__()
        self.gated = LlamaMLP(d, 56)
        self.ffn = nn.Sequential(nn.Linear(d, 52), nn.GELU(), nn.Linear(52, d))

    def forward(self, x):
        return self.ffn(self.gated(x)) + x


@pytest.mark.parametrize("cfg", [fused.FusedInt8MLP(), fused.FusedFloat8MLP(weight_only=True)], ids=["int8", "fp8"])
def test_end_to_end_blocks_take_the_decode_block(cfg):
    model = Model().to(torch.bfloat16).eval()
    fused.quantize(model, cfg, blocks=True)
    assert isinstance(model.gated, fused.FusedGatedMLP) and isinstance(model.ffn, fused.FusedMLP)
    x = torch.randn(2, 3, 40, dtype=torch.bfloat16).transpose(0, 1)  # 3-D, not contiguous
    with torch.no_grad():
        with dispatch.force_path("reference"):
            ref = model(x)
        dispatch.stats.clear()
        with dispatch.force_path("triton"):
            out = model(x)
    assert dispatch.stats == {("mlp_block", "triton:decode_block"): 2}
    assert out.shape == ref.shape and out.dtype == torch.bfloat16
    assert sqnr(ref, out) > 38  # two blocks of bf16 truncation (interpreter) vs rounding


def test_above_the_decode_limit_the_layers_run():
    model = Model().to(torch.bfloat16).eval()
    fused.quantize(model, fused.FusedInt8MLP(), blocks=True)
    x = torch.randn(dispatch.DECODE_BLOCK_MAX_M + 1, 40, dtype=torch.bfloat16)
    with torch.no_grad():
        with dispatch.force_path("reference"):
            ref = model(x)
        dispatch.stats.clear()
        with dispatch.force_path("triton"):
            out = model(x)
    assert dispatch.stats[("mlp_block", "per_layer")] == 2
    with dispatch.force_path("triton"):  # each layer's own path at this M (split activations from M=17)
        gated, linear = (dispatch.plan(op, "int8", False, "cpu", M=x.shape[0], dtype=x.dtype)[0] for op in ("gated", "linear"))
    assert gated == "triton:act_split+w8_gemm_split" if x.shape[0] >= dispatch.SPLIT_MIN_M else "triton:w8a16_gemv"
    assert dispatch.stats[("gated", gated)] == 1
    assert dispatch.stats[("linear", linear)] == 3
    assert sqnr(ref, out) > 38


def test_smoothed_w8a8_blocks_fold_the_smoothing():
    """A W8A8 smoothed model at decode runs weight-only through the block with both smooth_inv folded."""
    torch.manual_seed(1)
    model = Model().eval()
    s = {"gated.gate_proj": torch.rand(40) + 0.5, "gated.up_proj": None, "gated.down_proj": torch.rand(56) + 0.5,
         "ffn.0": torch.rand(40) + 0.5, "ffn.2": torch.rand(52) + 0.5}
    s["gated.up_proj"] = s["gated.gate_proj"]
    fused.quantize(model, fused.FusedInt8MLP(weight_only=False, smoothing=s))
    assert model.gated.down.smooth_inv is not None and model.ffn.fc1.smooth_inv is not None
    x = torch.randn(3, 40)
    with torch.no_grad():
        dispatch.stats.clear()
        with dispatch.force_path("triton"):
            out = model(x)
        assert dispatch.stats == {("mlp_block", "triton:decode_block"): 2}
        g, f = model.gated, model.ffn
        h = block_ref(x, g.gate_up.qweight, g.gate_up.scale, g.gate_up.bias, g.down.qweight, g.down.scale,
                      g.down.bias, "silu", True, g.gate_up.smooth_inv, g.down.smooth_inv)
        ref = block_ref(h, f.fc1.qweight, f.fc1.scale, f.fc1.bias, f.fc2.qweight, f.fc2.scale, f.fc2.bias,
                        "gelu", False, f.fc1.smooth_inv, f.fc2.smooth_inv) + x
    assert sqnr(ref, out) > _min_db(torch.float32)


def test_sparse_blocks_keep_their_layers():
    model = Model().eval()
    fused.quantize(model, fused.FusedInt8MLP(sparsity="2:4"), blocks=True)
    assert not model.gated.block_fusable()
    dispatch.stats.clear()
    with torch.no_grad(), dispatch.force_path("triton"):
        model(torch.randn(2, 40))
    assert not any(op == "mlp_block" for op, _ in dispatch.stats)


def test_compiled_graph_holds_one_block_op():
    from torch._dynamo.testing import EagerAndRecordGraphs

    model = Model().to(torch.bfloat16).eval()
    fused.quantize(model, fused.FusedInt8MLP())
    x = torch.randn(2, 40, dtype=torch.bfloat16)
    torch.compiler.reset()
    backend = EagerAndRecordGraphs()
    with torch.no_grad(), dispatch.force_path("triton"):
        eager = model(x)
        out = torch.compile(model, backend=backend, fullgraph=True)(x)
    code = "\n".join(g.code for g in backend.graphs)
    assert code.count("fusedmlp.mlp_block") == 2 and "fusedmlp.gated" not in code
    assert torch.equal(out, eager)
    torch.compiler.reset()


def test_explain_reports_the_block_path(capsys):
    model = Model()
    fused.quantize(model, fused.FusedInt8MLP())
    rows = {r["module"]: r for r in fused.explain(model, device="cuda")}
    table = capsys.readouterr().out
    assert rows["gated.gate_up"]["block_path"] == "triton:decode_block|per_layer"
    assert rows["ffn.fc2"]["block_path"] == "triton:decode_block|per_layer"
    assert rows["gated.gate_up"]["path"] == "triton:w8a16_gemv|w8_gemm_w8a16"  # the layer's own path
    assert "mlp_block" in table and "one launch" in table
    cpu = fused.explain(model, print_table=False)
    assert all(r["block_path"] == "per_layer" for r in cpu)
    sparse = Model()
    fused.quantize(sparse, fused.FusedInt8MLP(sparsity="2:4"))
    assert all(r["block_path"] is None for r in fused.explain(sparse, device="cuda", print_table=False))


def test_profile_lists_the_block_op():
    model = Model().to(torch.bfloat16).eval()
    fused.quantize(model, fused.FusedInt8MLP())
    with dispatch.force_path("triton"):
        r = fused.profile(model, torch.randn(3, 40, dtype=torch.bfloat16), forwards=1, warmup=0)
    assert r.paths == {"mlp_block -> triton:decode_block": 2.0} and r.fused_op_calls == 2.0
    assert "fusedmlp::mlp_block" in {o.name for o in r.top_cpu}


def test_compiles_for_sm90_and_deterministic_mode_has_no_atomics():
    """ptxas (from the Triton wheel) compiles the default configs for the H200 here, without a GPU; the
    one-launch kernel reduces with fp32 atomics, the deterministic one has no atomic at all."""
    from sm90_compile import memory_ops_in_subprocess

    ops = memory_ops_in_subprocess("decode_block_configs")
    if ops is None:
        pytest.skip("no ptxas in this Triton install")
    assert len(ops) == 12  # 2 M x (int8, fp8) x (atomic, deterministic) + 2 int8 split + 2 reduce
    for label, names in ops.items():
        atomics = [n for n in names if n.startswith(("red.", "atom."))]
        if "atomic" in label:
            assert any(n.startswith("red.global") and n.endswith("f32") for n in atomics), (label, names)
            assert "atom.global.gpu.acq_rel.add.u32" in atomics, (label, names)
        else:
            assert atomics == [], (label, names)


# ------------------------------------------------------------------------------------------ on the GPU

LLAMA_8B = (4096, 14336, 4096)  # K, H, D


def _cuda_case(M, gated, fmt, bias, act, shape=LLAMA_8B):
    K, H, D = shape
    w = _weights(K, H, D, gated, fmt, bias, device="cuda")
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    return x, w


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("M", [1, 3, 16])
@pytest.mark.parametrize("gated", [True, False])
def test_decode_block_cuda(M, gated, fmt, poisoned_empty):
    from fused.kernels.decode_block import decode_block

    act, bias = ("silu", False) if gated else ("gelu_tanh", True)
    x, w = _cuda_case(M, gated, fmt, bias, act, LLAMA_8B if gated else (2048, 8192, 2048))
    ref = block_ref(x, *w, act, gated)
    y = decode_block(x, *w, act, gated)
    det = [decode_block(x, *w, act, gated, deterministic=True) for _ in range(5)]
    assert all(torch.equal(det[0], d) for d in det[1:])
    assert sqnr(ref, y) > 45 and sqnr(ref, det[0]) > 45
    # the two-launch path (split-K GEMV twice) lands as close
    h = (dispatch.gated if gated else dispatch.linear)(x, w[0], w[1], w[2], act)
    assert sqnr(ref, dispatch.linear(h, w[3], w[4], w[5])) > 45
    if fmt == "int8":  # the int8-MMA candidates (split activations)
        from fused.kernels.decode_block import _candidates

        K, H, D = x.shape[1], w[3].shape[1], w[3].shape[0]
        for cfg in [c for c in _candidates(M, K, H, D, gated, split_ok=True) if c.get("SPLIT")]:
            assert sqnr(ref, decode_block(x, *w, act, gated, config=cfg)) > 45, cfg


@pytest.mark.cuda
def test_module_paths_and_cuda_graph_cuda():
    model = LlamaMLP(4096, 14336)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * p.shape[-1] ** -0.5)
    model = nn.Sequential(model.cuda().to(torch.bfloat16).eval())
    fused.quantize(model, fused.FusedInt8MLP())
    for M in (1, 16, 17):
        x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
        dispatch.stats.clear()
        with torch.no_grad():
            y = model(x)
            with dispatch.force_path("reference"):
                ref = model(x)
        path = "triton:decode_block" if M <= dispatch.DECODE_BLOCK_MAX_M else "per_layer"
        assert dispatch.stats[("mlp_block", path)] == 1
        assert sqnr(ref, y) > 45
    # the workspace survives CUDA graph replays (the kernel re-zeroes it; no memset node)
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        want = model(x)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = model(x)
        for _ in range(3):
            g.replay()
            assert sqnr(want, out) > 60


@pytest.mark.cuda
@pytest.mark.parametrize("M", [1, 16])
def test_decode_block_timing_cuda(M, capsys):
    """GPU time (CUDA graph replay, median) of one decode_block launch vs the two GEMV launches."""
    from triton.testing import do_bench

    from fused.kernels.decode_block import decode_block

    x, (q1, s1, b1, q2, s2, b2) = _cuda_case(M, True, "int8", False, "silu")

    def graph_us(fn):
        fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        return do_bench(g.replay, warmup=25, rep=200, return_mode="median") * 1e3

    one = graph_us(lambda: decode_block(x, q1, s1, b1, q2, s2, b2, "silu", True))
    det = graph_us(lambda: decode_block(x, q1, s1, b1, q2, s2, b2, "silu", True, deterministic=True))
    two = graph_us(lambda: dispatch.linear(dispatch.gated(x, q1, s1, b1, "silu"), q2, s2, b2))
    with capsys.disabled():
        print(f"\nLlama-3-8B MLP int8, M={M}: decode_block {one:.1f} µs, deterministic {det:.1f} µs, two launches {two:.1f} µs")
    # measured on the H200 (2026-11-30): one launch lost (M=1: 85 vs 68 µs; M=16: 116 vs 77), which is why
    # dispatch.DECODE_BLOCK_MAX_M defaults to 0; this reports the numbers and checks the deterministic
    # mode stays within its expected cost (a second launch and a partials round trip)
    assert det < 4 * two
