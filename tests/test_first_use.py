"""What a first user trips on: each case here failed, printed noise or stayed silent before."""
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import fused
from fused.demo import LlamaMLP

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, **env) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=e, timeout=300)


def test_import_prints_nothing():
    r = _python("import fused")
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r.stderr


def test_cpu_path_runs_without_triton():
    r = _python("import sys, torch, fused\n"
                "from fused.demo import LlamaMLP\n"
                "for wo in (True, False):\n"
                "    m = fused.quantize(LlamaMLP(64, 128), fused.FusedInt8MLP(weight_only=wo))\n"
                "    assert m(torch.randn(3, 64)).shape == (3, 64)\n"
                "print('triton' in sys.modules)", PYTHONPATH=str(ROOT / "tests" / "hide_triton"))
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr


def test_meta_device_model_gets_a_clear_error():
    with torch.device("meta"):
        model = LlamaMLP(64, 128)
    with pytest.raises(ValueError, match="meta device"):
        fused.quantize(model, fused.FusedInt8MLP())


@pytest.mark.parametrize("src,dst", [(True, False), (False, True)])
def test_load_state_dict_from_another_mode_is_refused(src, dst, tmp_path):
    a = fused.quantize(LlamaMLP(64, 128), fused.FusedInt8MLP(weight_only=src))
    b = fused.quantize(LlamaMLP(64, 128), fused.FusedInt8MLP(weight_only=dst))
    with pytest.raises(ValueError, match="saved from a int8"):
        b.load_state_dict(a.state_dict())
    torch.save(a.state_dict(), tmp_path / "sd.pt")  # the metadata survives torch.save / weights_only load
    with pytest.raises(ValueError, match="convert the model with the same config"):
        b.load_state_dict(torch.load(tmp_path / "sd.pt", weights_only=True))
    same = fused.quantize(LlamaMLP(64, 128), fused.FusedInt8MLP(weight_only=src))
    same.load_state_dict(torch.load(tmp_path / "sd.pt", weights_only=True))
    x = torch.randn(2, 64)
    assert torch.equal(same(x), a(x))


def test_converting_again_with_another_config_warns():
    model = nn.Sequential(LlamaMLP(64, 128))
    fused.quantize(model, fused.FusedInt8MLP())
    with pytest.warns(UserWarning, match="already converted"):
        fused.quantize(model, fused.FusedFloat8MLP())
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        with pytest.raises(UserWarning, match="nothing"):  # the same config: only "nothing converted"
            fused.quantize(model, fused.FusedInt8MLP())


def test_demo_without_matplotlib_skips_the_plot(monkeypatch, capsys):
    import importlib.util

    from fused import cli, demo

    rows = [{"config": "bf16 (unconverted)", "weight_MiB": 1.0, "sqnr_db": float("inf"), "ms": 1.0, "ms_1": 1.0}]
    monkeypatch.setattr(demo, "run_demo", lambda *a, **k: rows)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert cli.main(["demo", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "no plot: matplotlib is not installed" in out


def test_demo_timing_warms_up_and_takes_a_median_of_many_calls():
    from fused.demo import time_forward

    calls = []

    class Counting(nn.Module):
        def forward(self, x):
            calls.append(1)
            return x
    t = time_forward(Counting(), torch.zeros(1), min_iters=15, min_seconds=0.0)
    assert len(calls) == 3 + 15 and t >= 0
