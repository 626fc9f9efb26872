"""`python -m fused`: the demo prints its table, --help works, bad arguments exit 2."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fused
from fused.cli import main

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "fused", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_demo_prints_the_table():
    r = run_cli("demo", "--tokens", "4")
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert "bf16, 4 tokens, on cpu" in out
    assert "| config | weight MiB | SQNR vs bf16 (dB) | ms / forward (4 tokens) | ms / forward (1 token) |" in out
    rows = {m.group(1): m.groups()[1:] for m in
            re.finditer(r"^\| ([^|]+?) \| ([\d.]+) \| ([\d.inf-]+) \| ([\d.]+) \| ([\d.]+) \|$", out, re.M)}
    names = ["bf16 (unconverted)", "int8 W8A16 (per-Linear)", "int8 W8A16 (blocks)", "int8 W8A8 (blocks)",
             "fp8 W8A8 (blocks)", "fp8 weight-only (blocks)"]
    assert list(rows) == names
    bf16_mib = float(rows["bf16 (unconverted)"][0])
    for name in names[1:]:
        mib, db, ms, ms_1 = map(float, rows[name])
        assert mib < 0.55 * bf16_mib  # 8-bit weights: about half the bf16 bytes
        assert 15 < db < 80 and ms > 0 and ms_1 > 0


def test_help():
    r = run_cli("--help", timeout=120)
    assert r.returncode == 0 and "demo" in r.stdout and "explain" in r.stdout


def test_demo_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["demo", "--help"])
    assert e.value.code == 0 and "--tokens" in capsys.readouterr().out


def test_unknown_explain_config_exits_2():
    r = run_cli("explain", "--config", "int3 nonsense", timeout=120)
    assert r.returncode == 2
    assert "unknown config 'int3 nonsense'" in r.stderr and "int8 W8A16 (blocks)" in r.stderr


def test_explain_prints_each_op(capsys):
    assert main(["explain", "--config", "fp8 W8A8 (blocks)", "--device", "cuda"]) == 0
    out = capsys.readouterr().out
    assert "blocks.0.mlp.gate_up" in out and "float8_e4m3" in out and "triton:w8a16_gemv|w8_gemm_w8a8" in out and "TOTAL" in out


def test_bad_subcommand_exits_2():
    with pytest.raises(SystemExit) as e:
        main(["no-such-command"])
    assert e.value.code == 2
    assert fused.__version__


def test_unknown_bench_config_exits_2(capsys):
    assert main(["bench", "--configs", "ours int3", "--no-baselines"]) == 2
    err = capsys.readouterr().err
    assert "unknown config(s) ['ours int3']" in err and "ours int8 W8A16" in err


def test_unknown_bench_baseline_exits_2(capsys):
    assert main(["bench", "--baselines", "bf16 compile,torchao int3"]) == 2
    err = capsys.readouterr().err
    assert "unknown baseline(s) ['torchao int3']" in err and "torchao fp8 rowwise + compile" in err


def test_bench_runs_only_the_named_baselines(tmp_path):
    """`--baselines` names the baselines that run: a torchao one only (CUDA-only, so none here) leaves out bf16
    compile."""
    import json

    for names, want in (("torchao fp8 rowwise + compile", set()), ("bf16 compile", {"bf16 compile"})):
        out = tmp_path / names.replace(" ", "_")
        assert main(["bench", "--baselines", names, "--configs", "ours int8 W8A8", "--blocks", "llama", "--m", "1",
                     "--out", str(out)]) == 0
        data = json.load(open(out / "bench.json"))
        assert {r["config"] for r in data["rows"]} == {"bf16 eager", "ours int8 W8A8"} | want
        assert data["refused_routes"] == {}  # route candidates left out by the route check (none timed here)
