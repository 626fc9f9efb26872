"""2:4 configs, modules, dispatch, custom ops and explain: FusedInt8MLP / FusedFloat8MLP(sparsity="2:4"),
FusedBF16MLP; CPU reference path vs the Triton path (interpreter) end to end."""
import copy
import io

import pytest
import torch
from torch import nn
from torchao.quantization import quantize_

import fused
from fused import dispatch, ops
from fused.demo import DemoModel
from fused.sparse_modules import FusedSparseGatedLinear, FusedSparseLinear
from lowbit import sqnr
from sparsity import is_24_sparse, magnitude_mask_24, pack_24, prune_24_, unpack_24

CONFIGS = {
    "int8": lambda: fused.FusedInt8MLP(sparsity="2:4"),
    "int8-w8a8": lambda: fused.FusedInt8MLP(sparsity="2:4", weight_only=False),
    "fp8-w8a8": lambda: fused.FusedFloat8MLP(sparsity="2:4"),
    "fp8": lambda: fused.FusedFloat8MLP(sparsity="2:4", weight_only=True),
    "bf16": lambda: fused.FusedBF16MLP(),
}


def small_model():
    # 2 gated SiLU blocks + 1 GELU-tanh block; d=32 (K % 16 == 0), h=44 (K % 8 == 4 for down)
    return DemoModel(d=32, h=44, layers=2).eval()


def sparse_ops(model):
    return [m for m in model.modules() if isinstance(m, (FusedSparseLinear, FusedSparseGatedLinear))]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_config_prunes_packs_and_matches_triton(name):
    base = small_model()
    model = copy.deepcopy(base)
    fused.quantize(model, CONFIGS[name]())
    mods = sparse_ops(model)
    assert len(mods) == 2 * 2 + 2  # gate_up + down per gated block, fc1 + fc2
    assert not any(isinstance(m, nn.Linear) for m in model.modules())
    for m in mods:
        assert is_24_sparse(unpack_24(m.values, m.meta))
    # the config prunes by magnitude: the model equals the magnitude-pruned float model up to quantization
    pruned = copy.deepcopy(base)
    prune_24_(pruned)
    x = torch.randn(2, 9, 32)  # M = 18: the tiled sparse kernel, W8A8 when the config says so
    with torch.no_grad():
        y_ref_path = model(x)
        with dispatch.force_path("triton"):
            y_triton = model(x)
        y_pruned = pruned(x)
    assert sqnr(y_pruned, y_ref_path) > (22 if "fp8" in name else 30)
    assert sqnr(y_ref_path, y_triton) > 100  # fp32 activations: same math up to summation order
    # M = 5: the sparse GEMV, weight-only even for W8A8 configs (dispatch.GEMV_MAX_M); the reference path
    # quantizes the activations, so those two differ by the activation quantization error only
    with torch.no_grad():
        y_ref_small = model(x[:, :5])
        with dispatch.force_path("triton"):
            y_triton_small = model(x[:, :5])
    assert sqnr(y_ref_small, y_triton_small) > (25 if "w8a8" in name else 100)


def test_already_24_weights_keep_their_mask():
    model = small_model()
    calib = [torch.randn(8, 32) for _ in range(2)]
    prune_24_(model, "wanda", calib)
    masks = {n: m.weight != 0 for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    fused.quantize(model, fused.FusedBF16MLP(), blocks=False)  # per Linear: names stay
    for n, m in model.named_modules():
        if isinstance(m, FusedSparseLinear):
            # bf16 cast keeps every kept value non-zero here; wanda's mask, not magnitude's
            assert torch.equal(unpack_24(m.values, m.meta) != 0, masks[n])


def test_prepare_keeps_rows_that_are_already_24():
    from fused.sparse_modules import prepare_24

    w = torch.randn(6, 16)
    w[:3] = w[:3] * (torch.rand(3, 4, 4).argsort(-1) < 2).reshape(3, 16).float()  # a random 2:4 mask
    out = prepare_24(w, prune=True, where="x")
    assert torch.equal(out[:3], w[:3])
    assert is_24_sparse(out) and torch.equal(out[3:], w[3:] * magnitude_mask_24(w[3:].abs()))


def test_prune_false_refuses_dense_and_k_alignment_is_checked_at_quantize_time():
    model = nn.Sequential(nn.Linear(16, 8))
    with pytest.raises(ValueError, match=r"0: weight is not 2:4 sparse and prune=False"):
        quantize_(model, fused.FusedInt8MLP(sparsity="2:4", prune=False))
    model = nn.Sequential(nn.Linear(18, 8))
    with pytest.raises(ValueError, match=r"0: 2:4 sparsity .*multiple of 4; got K=18"):
        quantize_(model, fused.FusedInt8MLP(sparsity="2:4"))
    ok = nn.Sequential(nn.Linear(16, 8))
    prune_24_(ok)
    quantize_(ok, fused.FusedInt8MLP(sparsity="2:4", prune=False))
    assert isinstance(ok[0], FusedSparseLinear)


def test_config_validation():
    with pytest.raises(ValueError, match="only has a 2:4 form"):
        fused.FusedBF16MLP(sparsity=None)
    with pytest.raises(ValueError, match="sparsity must be one of"):
        fused.FusedInt8MLP(sparsity="1:2")
    with pytest.raises(TypeError, match="prune must be a bool"):
        fused.FusedFloat8MLP(sparsity="2:4", prune="yes")
    with pytest.raises(ValueError, match="bfloat16 2:4 is weight-only"):
        FusedSparseLinear(16, 8, fmt="bfloat16", dynamic=True)
    with pytest.raises(ValueError, match="values format must be one of"):
        FusedSparseLinear(16, 8, fmt="int4")


def test_nan_weights_refused_naming_the_module():
    model = nn.Sequential(nn.Linear(16, 8))
    with torch.no_grad():
        model[0].weight[2, 3] = float("nan")
    with pytest.raises(ValueError, match=r"0: weight has 1 NaN"):
        quantize_(model, fused.FusedFloat8MLP(sparsity="2:4"))


def test_memory_and_explain_rows():
    model = nn.Sequential(nn.Linear(4096, 8, bias=False))
    fused.quantize(model, fused.FusedInt8MLP(sparsity="2:4"))
    rows = fused.explain(model, print_table=False)
    assert rows[0]["format"] == "int8 2:4" and rows[0]["op"] == "sparse24_linear"
    assert rows[0]["path"] == "cpu:s24+int8pack" and "saves memory, not time" in rows[0]["why"]
    # 0.5 (values) + 0.125 (positions) + 4/K (fp32 row scale) bytes per original weight
    assert rows[0]["bytes_after"] / (8 * 4096) == pytest.approx(0.625 + 4 / 4096)
    assert rows[0]["bytes_after"] / (8 * 4096) <= 0.65
    cuda = fused.explain(model, device="cuda", print_table=False)
    assert cuda[0]["path"] == "triton:sparse24_gemv|sparse24_linear" and "sparse GEMV" in cuda[0]["why"]
    for fmt, dyn in [("int8", True), ("float8_e4m3", False), ("float8_e4m3", True), ("bfloat16", False)]:
        assert dispatch.plan("sparse24_gated", fmt, dyn, "cuda")[0] == "triton:sparse24_gemv|sparse24_linear"
        # decode takes the weight-only sparse GEMV (W8A8 configs too), larger M the tiled sparse kernel
        assert dispatch.plan("sparse24_gated", fmt, dyn, "cuda", M=dispatch.GEMV_MAX_M)[0] == "triton:sparse24_gemv"
        assert dispatch.plan("sparse24_gated", fmt, dyn, "cuda", M=dispatch.GEMV_MAX_M + 1)[0] == "triton:sparse24_linear"


@pytest.mark.parametrize("name", ["int8", "fp8-w8a8", "bf16"])
def test_state_dict_round_trip(name):
    model = small_model()
    fused.quantize(model, CONFIGS[name]())
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=True)
    other = DemoModel(d=32, h=44, layers=2, seed=1).eval()  # other weights, same structure
    fused.quantize(other, CONFIGS[name]())
    other.load_state_dict(sd)
    x = torch.randn(3, 32)
    with torch.no_grad():
        assert torch.equal(model(x), other(x))


def test_checkpoint_of_another_config_is_refused():
    a, b = small_model(), small_model()
    fused.quantize(a, CONFIGS["int8"]())
    fused.quantize(b, CONFIGS["fp8"]())
    with pytest.raises(ValueError, match=r"checkpoint key 'blocks\.0\.mlp\.gate_up\.values': expected torch\.float8"):
        b.load_state_dict(a.state_dict())
    dense = small_model()
    fused.quantize(dense, fused.FusedInt8MLP())
    with pytest.raises(RuntimeError, match="values"):  # dense checkpoint: keys missing
        a.load_state_dict(dense.state_dict())


def test_module_edge_inputs():
    lin = nn.Linear(20, 13)
    mod = FusedSparseLinear.from_float(lin.weight, lin.bias, "int8", act="relu")
    # M = 0, 3-D, non-contiguous, both paths
    for path in ("reference", "triton"):
        with dispatch.force_path(path), torch.no_grad():
            assert mod(torch.empty(0, 20)).shape == (0, 13)
            x = torch.randn(4, 20, 3).transpose(1, 2)
            ref = torch.relu(x @ mod.dense_weight().t() + lin.bias)
            assert sqnr(ref, mod(x)) > 100
    # autocast: runs in bf16 like nn.Linear
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        assert mod(torch.randn(2, 20)).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="input has 16 features, the packed 2:4 weight expects 20"):
        mod(torch.randn(2, 16))
    with pytest.raises(TypeError, match="activations must be"):
        mod(torch.ones(2, 20, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="device mismatch: activations on meta, weights on cpu"):
        dispatch.sparse24_linear(torch.randn(2, 20, device="meta"), mod.values, mod.meta, mod.scale)
    x = torch.randn(2, 20, requires_grad=True)
    with pytest.raises(RuntimeError, match="inference-only"):
        mod(x).sum().backward()


def test_quantizing_twice_warns_nothing_converted():
    model = small_model()
    fused.quantize(model, CONFIGS["int8"]())
    with pytest.warns(UserWarning, match="nothing in DemoModel was converted"):
        fused.quantize(model, CONFIGS["int8"]())


@pytest.mark.parametrize("op, gated", [(ops.sparse24_linear, False), (ops.sparse24_gated, True)])
@pytest.mark.parametrize("vdtype", ["int8", "float8_e4m3", "bfloat16"])
def test_opcheck(op, gated, vdtype):
    w = torch.randn(2 * 6, 24)
    w = w * magnitude_mask_24(w.abs())
    if vdtype == "bfloat16":
        (v, m), s = pack_24(w.bfloat16()), None
    else:
        from lowbit import quantize_weight
        q, s = quantize_weight(w, vdtype)
        v, m = pack_24(q)
    x = torch.randn(2, 3, 24, dtype=torch.bfloat16)
    dyn = vdtype != "bfloat16"
    # test_schema compares tensors with ops CPU fp8 lacks ("mul" on Float8_e4m3fn); the int8 and bf16 cases
    # run it on the same op and code path
    utils = [u for u in ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
             if not (u == "test_schema" and vdtype == "float8_e4m3")]
    torch.library.opcheck(op, (x, v, m, s, torch.randn(12), "silu", dyn), test_utils=utils)
    torch.library.opcheck(op, (x, v, m, s, None, "none", False), test_utils=utils)


def test_torch_compile_sees_the_op():
    mod = FusedSparseGatedLinear.from_float(torch.randn(2 * 8, 16), None, "int8")
    x = torch.randn(3, 16)
    with torch.no_grad():
        eager = mod(x)
        compiled = torch.compile(mod, backend="aot_eager", fullgraph=True)(x)
    assert torch.equal(eager, compiled)
