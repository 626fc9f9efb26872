"""`python -m fused profile|sweep|demo`: --help, defaults, clear errors for a bad model path or config."""
import json

import pytest

from fused.cli import main


@pytest.mark.parametrize("cmd", ["demo", "explain", "profile", "sweep"])
def test_help(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        main([cmd, "--help"])
    assert e.value.code == 0
    assert f"usage: fusedmlp {cmd}" in capsys.readouterr().out


@pytest.mark.parametrize("cmd", ["profile", "sweep"])
def test_bad_model_path(cmd, tmp_path, capsys):
    assert main([cmd, "--model", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert f"fusedmlp {cmd}: error: model path" in err and "does not exist" in err
    assert main([cmd, "--model", str(tmp_path)]) == 2  # a directory, but no model in it
    assert "no config.json" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["sweep", "--configs", "int8-w8a16,int3"], ["profile", "--config", "int3"]])
def test_unknown_config(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "unknown config 'int3'" in err and "choose from: bf16, int8 W8A16" in err


def test_profile_refuses_a_config_that_converts_nothing(capsys):
    assert main(["profile", "--config", "bf16"]) == 2
    assert "converts nothing" in capsys.readouterr().err


def test_profile_sparse_config(tmp_path):
    assert main(["profile", "--config", "int8 W8A16 2:4", "--tokens", "2", "--out", str(tmp_path)]) == 0


@pytest.mark.parametrize("argv", [["sweep", "--iters", "0"], ["sweep", "--threads", "0"], ["profile", "--tokens", "0"],
                                  ["profile", "--forwards", "0", "--tokens", "2"]])
def test_bad_numbers(argv, capsys):
    assert main(argv) == 2
    assert "error:" in capsys.readouterr().err


def test_list_configs(capsys):
    assert main(["sweep", "--list-configs"]) == 0
    out = capsys.readouterr().out.split("\n")
    assert "bf16" in out and "int8 W8A16" in out and "fp8 weight-only" in out


def test_sweep_demo_end_to_end(tmp_path, capsys):
    out = tmp_path / "sw"
    assert main(["sweep", "--tokens", "4", "--configs", "bf16,int8-w8a16", "--iters", "1", "--out", str(out),
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "| int8 W8A16 |" in text and "wrote" in text
    data = json.loads((out / "sweep.json").read_text())
    assert [r["config"] for r in data["rows"]] == ["fp32", "bf16", "int8 W8A16"]
    assert data["meta"]["command"].startswith("python -m fused sweep --tokens 4")
    assert (out / "sweep.png").exists() and (out / "sweep.md").exists()


def test_profile_demo_end_to_end(tmp_path, capsys):
    assert main(["profile", "--tokens", "4", "--forwards", "1", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "launches / forward" in text and "gated -> cpu:" in text
    for name in ("profile.json", "profile.png", "trace_before.json", "trace_after.json"):
        assert (tmp_path / name).exists()


def test_demo_prints_plot_path(tmp_path, capsys, monkeypatch):
    import fused.demo

    real = fused.demo.run_demo  # the full demo runs in CI (.ci/run); a tiny one is enough for the plot
    monkeypatch.setattr(fused.demo, "run_demo", lambda device, tokens: real(device, tokens, d=64, h=96, layers=1))
    png = tmp_path / "demo.png"
    assert main(["demo", "--tokens", "2", "--plot", str(png)]) == 0
    assert f"plot: {png}" in capsys.readouterr().out
    assert png.read_bytes()[:4] == b"\x89PNG"
