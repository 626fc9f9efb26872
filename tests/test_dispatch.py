"""fused.dispatch: which path each (op, format, mode, device) takes, and that fallbacks are visible."""
import pytest
import torch

from fused import dispatch
from lowbit import quantize_weight


@pytest.mark.parametrize("op,fmt,dynamic,cuda_path", [
    ("linear", "int8", False, "triton:int8_linear"),
    ("linear", "int8", True, "reference"),
    ("linear", "float8_e4m3", False, "reference"),
    ("linear", "float8_e4m3", True, "reference"),
    ("gated", "int8", False, "reference"),
    ("gated", "float8_e4m3", True, "reference"),
])
def test_plan(op, fmt, dynamic, cuda_path):
    assert dispatch.plan(op, fmt, dynamic, "cpu") == ("reference", "CPU path (pure torch)")
    path, why = dispatch.plan(op, fmt, dynamic, "cuda")
    assert path == cuda_path
    if path == "reference":  # no kernel yet: a counted, named fallback, never silent
        assert why.startswith(f"FALLBACK: no Triton kernel yet for {op}/{fmt}/")
    with dispatch.force_path("reference"):
        assert dispatch.plan(op, fmt, dynamic, "cuda") == ("reference", "forced")
    with dispatch.force_path("triton"):
        assert dispatch.plan(op, fmt, dynamic, "cpu")[0] == cuda_path
    assert dispatch._forced is None  # the context restores


def test_stats_count_every_call():
    q, s = quantize_weight(torch.randn(8, 16), "int8")
    key = ("gated", "reference")
    before = dispatch.stats[key]
    dispatch.gated(torch.randn(2, 16), q, s)
    dispatch.gated(torch.randn(0, 16), q, s)
    assert dispatch.stats[key] == before + 2


@pytest.mark.cuda
def test_strict_mode_raises_on_a_cuda_fallback():
    q, s = quantize_weight(torch.randn(8, 16, device="cuda"), "float8_e4m3")
    dispatch.set_strict(True)
    try:
        with pytest.raises(RuntimeError, match="strict mode: FALLBACK"):
            dispatch.linear(torch.randn(2, 16, device="cuda", dtype=torch.bfloat16), q, s)
    finally:
        dispatch.set_strict(False)
