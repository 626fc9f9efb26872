"""torch.export of converted models: the graph holds our custom ops (their fake impls trace it), and the
exported program runs on the CPU with the eager model's outputs, also after torch.export.save/load."""
import pytest
import torch
from torch import nn
from torch.export import Dim

import fused
from fused import dispatch
from fused.demo import LlamaMLP

CONFIGS = [fused.FusedInt8MLP(), fused.FusedInt8MLP(weight_only=False), fused.FusedFloat8MLP()]
IDS = ["int8-wo", "int8-w8a8", "fp8-w8a8"]




def model_for(cfg, dtype):
    model = nn.Sequential(nn.LayerNorm(32), LlamaMLP(32, 48), nn.Sequential(nn.Linear(32, 40), nn.GELU(), nn.Linear(40, 32)),
                          nn.Linear(32, 16))
    fused.quantize(model, cfg)
    model[0].to(dtype)  # the LayerNorm runs in the activation dtype
    return model


def fused_ops(ep) -> list[str]:
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function" and "fusedmlp" in str(n.target)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_export_runs_with_eager_outputs(cfg, dtype):
    model = model_for(cfg, dtype).eval()
    x = torch.randn(2, 5, 32, dtype=dtype)
    ep = torch.export.export(model, (x,))
    # the module forward took the custom-op path while exporting: one op per fused module, no aten matmuls
    assert fused_ops(ep) == ["fusedmlp.gated.default"] + ["fusedmlp.linear.default"] * 4
    others = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"} - set(fused_ops(ep))
    assert not any("mm" in t or "linear" in t for t in others), others
    with torch.no_grad():
        want = model(x)
        dispatch.stats.clear()
        got = ep.module()(x)
    assert got.dtype == dtype and torch.equal(got, want)
    assert sum(n for (op, path), n in dispatch.stats.items() if path.startswith("cpu:")) == 5


def test_export_with_dynamic_batch_and_save_load(tmp_path):
    model = model_for(fused.FusedInt8MLP(), torch.bfloat16).eval()
    x = torch.randn(3, 32, dtype=torch.bfloat16)
    ep = torch.export.export(model, (x,), dynamic_shapes=({0: Dim("batch", min=1, max=1024)},))
    torch.export.save(ep, tmp_path / "m.pt2")
    loaded = torch.export.load(tmp_path / "m.pt2")
    with torch.no_grad():
        for m in (1, 9, 64):  # decode (int8pack) and prefill (tiled GEMM) sizes through one graph
            xm = torch.randn(m, 32, dtype=torch.bfloat16)
            want = model(xm)
            assert torch.equal(ep.module()(xm), want)
            assert torch.equal(loaded.module()(xm), want)


def test_exported_program_of_a_loaded_checkpoint(tmp_path):
    src = model_for(fused.FusedInt8MLP(), torch.bfloat16)
    fused.save(src, tmp_path / "m.safetensors")
    dst = fused.load(tmp_path / "m.safetensors", model_for(fused.FusedInt8MLP(), torch.bfloat16))
    x = torch.randn(4, 32, dtype=torch.bfloat16)
    ep = torch.export.export(dst, (x,))
    with torch.no_grad():
        assert torch.equal(ep.module()(x), src(x))
