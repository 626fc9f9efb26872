"""fused.modules: the converted modules' weights survive .to(), deepcopy and checkpoints; bad loads fail."""
import copy
import io

import pytest
import torch

from fused import FusedGatedLinear, FusedLinear
from fused.reference import gated_ref, linear_ref
from lowbit import sqnr


def _linear(fmt="int8", dynamic=False, bias=True):
    w, b = torch.randn(12, 20), (torch.randn(12) if bias else None)
    return FusedLinear.from_float(w, b, fmt, dynamic=dynamic, act="gelu"), w, b


@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
def test_from_float_matches_reference_and_float(fmt):
    mod, w, b = _linear(fmt)
    x = torch.randn(3, 20)
    with torch.no_grad():
        y = mod(x)
    # fp32 math, another summation order (the CPU's fp32 GEMMs run on oneDNN, the reference's on MKL): ~1e-7
    assert sqnr(linear_ref(x, mod.qweight, mod.scale, mod.bias, "gelu"), y) > 120
    assert sqnr(torch.nn.functional.gelu(x @ w.t() + b), y) > (35 if fmt == "int8" else 25)
    assert mod.source_bytes == 12 * 20 * 4 + 12 * 4
    assert mod.weight_bytes() == 12 * 20 + 12 * 4 + 12 * 4


@pytest.mark.parametrize("cast", ["to_bf16", "half", "double"])
@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
def test_dtype_casts_keep_the_8bit_weights_and_fp32_scales(fmt, cast):
    """model.to(torch.bfloat16) / .half() after quantizing must not turn fp8 qweight into bf16 (2x the
    bytes) or the fp32 scales into bf16 (lost precision; the kernels need fp32)."""
    mod, _, _ = _linear(fmt)
    q, s = mod.qweight.clone(), mod.scale.clone()
    dtype = {"to_bf16": torch.bfloat16, "half": torch.float16, "double": torch.float64}[cast]
    mod = mod.to(dtype) if cast == "to_bf16" else getattr(mod, cast)()
    assert mod.qweight.dtype == q.dtype and mod.scale.dtype == torch.float32
    assert torch.equal(mod.qweight.view(torch.uint8), q.view(torch.uint8)) and torch.equal(mod.scale, s)
    assert mod.bias.dtype == dtype  # the bias follows the model, as nn.Linear's does
    x = torch.randn(2, 20, dtype=dtype)
    with torch.no_grad():
        assert mod(x).dtype == dtype


def test_device_move_and_deepcopy():
    mod, _, _ = _linear("float8_e4m3", dynamic=True)
    meta = copy.deepcopy(mod).to("meta")
    assert meta.qweight.device.type == "meta" and meta.qweight.dtype == torch.float8_e4m3fn
    assert mod.qweight.device.type == "cpu"  # deepcopy: the original is untouched
    clone = copy.deepcopy(mod)
    x = torch.randn(4, 20)
    with torch.no_grad():
        assert torch.equal(clone(x), mod(x))
    assert clone.qweight.data_ptr() != mod.qweight.data_ptr()


@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
def test_gated_linear_stacks_gate_then_up(fmt):
    g, u = torch.randn(6, 16), torch.randn(6, 16)
    mod = FusedGatedLinear.from_float(torch.cat([g, u]), None, fmt, act="silu")
    x = torch.randn(5, 16)
    with torch.no_grad():
        y = mod(x)
    assert y.shape == (5, 6)
    assert torch.equal(y, gated_ref(x, mod.qweight, mod.scale, None, "silu"))
    assert sqnr(torch.nn.functional.silu(x @ g.t()) * (x @ u.t()), y) > (35 if fmt == "int8" else 22)
    with pytest.raises(ValueError, match="even row count"):
        FusedGatedLinear.from_float(torch.randn(5, 16))


def test_bad_activation_name():
    with pytest.raises(ValueError, match="activation must be one of"):
        FusedLinear(4, 4, act="tanh")


def test_state_dict_roundtrip_weights_only():
    mod, _, _ = _linear("float8_e4m3", dynamic=True)
    buf = io.BytesIO()
    torch.save(mod.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=True)
    fresh, _, _ = _linear("float8_e4m3", dynamic=True)
    fresh.load_state_dict(sd)
    x = torch.randn(3, 20)
    with torch.no_grad():
        assert torch.equal(fresh(x), mod(x))


def test_loading_another_format_or_shape_names_the_key():
    int8, _, _ = _linear("int8")
    fp8, _, _ = _linear("float8_e4m3")
    with pytest.raises(ValueError, match=r"checkpoint key 'qweight': expected torch.int8 .* got torch.float8_e4m3fn"):
        int8.load_state_dict(fp8.state_dict())
    small = FusedLinear.from_float(torch.randn(12, 8))
    with pytest.raises(ValueError, match=r"checkpoint key 'qweight': expected torch.int8 \(12, 20\)"):
        int8.load_state_dict(small.state_dict())
    sd = int8.state_dict()
    del sd["scale"]
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "scale"'):
        int8.load_state_dict(sd)
