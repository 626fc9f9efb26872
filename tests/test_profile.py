"""fused.profile: report fields, launch counting, fused paths, compare, trace and PNG export."""
import dataclasses
import json

import pytest
import torch
from torch import nn

import fused
from fused import cpu, dispatch
from fused.demo import DemoModel, LlamaMLP
from fused.profile import FORWARD_RANGE, before_after, compare, profile
from fused.sweep import param_bytes


def tiny_demo(dtype=torch.bfloat16):
    return DemoModel(64, 96, layers=1).to(dtype).eval()


class Layer(nn.Module):
    def __init__(self, mlp):
        super().__init__()
        self.mlp = mlp

    def forward(self, x):
        return self.mlp(x)


@pytest.mark.parametrize("model, launches", [
    (nn.Linear(8, 4), 1),                                               # aten::linear
    (nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), 3),  # linear, relu, linear
])
def test_cpu_launches_count_top_level_aten_ops(model, launches):
    r = profile(model.eval(), torch.randn(3, 8), forwards=2, warmup=1)
    assert r.launches == launches
    assert "aten ops called from Python" in r.launch_unit
    assert r.aten_ops > r.launches  # aten::linear calls aten::t / addmm underneath
    assert r.fused_op_calls == 0 and r.paths == {}


def test_report_fields_trace_and_json(tmp_path):
    model = tiny_demo()
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    r = profile(model, x, forwards=2, trace_path=tmp_path / "t.json", label="tiny")
    assert r.label == "tiny" and r.device == "cpu" and r.forwards == 2
    assert r.wall_ms > 0 and 0 < r.busy_ms <= r.wall_ms
    assert r.idle_ms == pytest.approx(r.wall_ms - r.busy_ms, abs=1e-6)
    assert r.weight_bytes == param_bytes(model)
    assert r.peak_memory_bytes >= 0
    assert r.top_cpu and all(o.self_cpu_us >= 0 for o in r.top_cpu)
    assert r.top_device == []  # no device on the CPU
    json.loads(json.dumps(r.to_dict()))  # JSON-able
    trace = json.loads((tmp_path / "t.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert FORWARD_RANGE in names and ("aten::linear" in names or "aten::mm" in names)
    assert "chrome trace" in r.format()


def test_fused_paths_read_from_dispatch_stats():
    model = tiny_demo()
    fused.quantize(model, fused.FusedInt8MLP())
    r = profile(model, torch.randn(4, 64, dtype=torch.bfloat16), forwards=3)
    # 1 gated block (gate_up + down) and 1 GELU block (fc1 + fc2), per forward (M=4: oneDNN's copy when it is on)
    p = "cpu:split_qlinear" if cpu.ONEDNN and cpu.onednn_ok() else "cpu:int8pack"
    assert r.paths == {f"gated -> {p}": 1.0, f"linear -> {p}": 3.0}
    assert r.fused_op_calls == 4.0
    assert r.fallbacks == 0.0  # the reference is the CPU path, not a fallback
    names = {o.name: o for o in r.top_cpu}
    assert "fusedmlp::gated" in names or "fusedmlp::linear" in names  # annotated in the trace
    assert f"gated -> {p}" in r.format()


def test_triton_path_shows_in_report():
    # per-Linear W8A16 runs the Triton int8 kernel (interpreter on CPU) when forced
    model = Layer(LlamaMLP(32, 48)).to(torch.bfloat16).eval()
    fused.quantize(model, fused.FusedInt8MLP(), blocks=False)
    with dispatch.force_path("triton"):
        r = profile(model, torch.randn(3, 32, dtype=torch.bfloat16), forwards=1, warmup=0)
    assert r.paths == {"linear -> triton:w8a16_gemv": 3.0}


def test_before_after_writes_outputs(tmp_path):
    model = tiny_demo()
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    cmp = before_after(model, x, fused.FusedInt8MLP(), out_dir=tmp_path, label="int8", forwards=1)
    for name in ("trace_before.json", "trace_after.json", "profile.json"):
        json.loads((tmp_path / name).read_text())
    assert (tmp_path / "profile.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = {r["metric"]: r for r in cmp.rows()}
    # 8-bit weights: about half of bf16 (scales and the unconverted norms on top)
    assert 0.45 < rows["weights MiB"]["after/before"] < 0.6
    assert cmp.before.paths == {} and cmp.after.paths
    assert "after/before" in cmp.format()
    assert fused.profile.compare is compare  # reachable from the exported function too


def test_compare_refuses_mixed_devices():
    r = profile(nn.Linear(4, 4).eval(), torch.randn(2, 4), forwards=1)
    with pytest.raises(ValueError, match="different devices"):
        compare(r, dataclasses.replace(r, device="cuda:0"))


def test_before_after_nothing_converted_is_an_error():
    model = nn.Sequential(nn.ReLU(), nn.Tanh())
    with pytest.raises(ValueError, match="nothing"):
        before_after(model, torch.randn(2, 4), fused.FusedInt8MLP())


def test_bad_arguments():
    with pytest.raises(ValueError, match="forwards"):
        profile(nn.Linear(4, 4), torch.randn(2, 4), forwards=0)


@pytest.mark.cuda
def test_cuda_kernels_idle_memory():
    model = Layer(LlamaMLP(256, 512)).to("cuda", torch.bfloat16).eval()
    x = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16)
    before = profile(model, x, forwards=3)
    assert before.launch_unit == "device kernels"
    assert before.launches >= 5  # gate, up, down matmuls + silu + mul (cuBLAS may add more)
    assert 0 < before.busy_ms <= before.wall_ms and before.idle_ms >= 0
    assert before.top_device and before.top_device[0].self_device_us > 0
    converted = Layer(LlamaMLP(256, 512)).to("cuda", torch.bfloat16).eval()
    fused.quantize(converted, fused.FusedInt8MLP(), blocks=False)
    after = profile(converted, x, forwards=3)
    assert after.paths == {"linear -> triton:w8a16_gemv": 3.0}
    assert after.fallbacks == 0
    # a reference path on the GPU is reported as a fallback
    blocks = Layer(LlamaMLP(256, 512)).to("cuda", torch.bfloat16).eval()
    fused.quantize(blocks, fused.FusedInt8MLP(weight_only=False))
    r = profile(blocks, x, forwards=1)
    ref_calls = sum(v for k, v in r.paths.items() if k.endswith("-> reference"))
    assert r.fallbacks == ref_calls
