"""Save / load of converted models: state_dict + torch.load(weights_only=True), fused.save / fused.load
(safetensors + header), refusal of mismatching models, and moving checkpoints between devices."""
import json

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

import fused
from fused.checkpoint import read_metadata

CONFIGS = [fused.FusedInt8MLP(), fused.FusedInt8MLP(weight_only=False), fused.FusedFloat8MLP(),
           fused.FusedFloat8MLP(weight_only=True)]
IDS = ["int8-wo", "int8-w8a8", "fp8-w8a8", "fp8-wo"]


class Llama(nn.Module):
    def __init__(self, d=32, h=48, act=nn.SiLU):
        super().__init__()
        self.gate_proj = nn.Linear(d, h, bias=False)
        self.up_proj = nn.Linear(d, h, bias=False)
        self.down_proj = nn.Linear(h, d, bias=False)
        self.act_fn = act()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Net(nn.Module):
    """A gated block, an fc1-act-fc2 block with biases, an unconverted LayerNorm and a lone Linear."""

    def __init__(self, d=32, act=nn.SiLU):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.mlp = Llama(d, 48, act)
        self.ffn = nn.Sequential(nn.Linear(d, 40), nn.GELU(), nn.Linear(40, d))
        self.head = nn.Linear(d, 24)

    def forward(self, x):
        x = self.norm(x)
        return self.head(self.ffn(self.mlp(x)))


def converted(cfg, seed, **kw):
    torch.manual_seed(seed)
    model = Net(**kw)
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)  # not the init value, so a missed load shows
    return fused.quantize(model, cfg)


def assert_same_state(a: nn.Module, b: nn.Module):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k].dtype == sb[k].dtype and sa[k].shape == sb[k].shape, k
        # bytes, not values: bit-exact, and works for float8 and NaN alike
        assert torch.equal(sa[k].cpu().contiguous().view(torch.uint8), sb[k].cpu().contiguous().view(torch.uint8)), k


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_state_dict_weights_only_round_trip(cfg, tmp_path):
    src = converted(cfg, seed=1)
    torch.save(src.state_dict(), tmp_path / "sd.pt")
    dst = converted(cfg, seed=2)  # a fresh conversion of other random weights
    sd = torch.load(tmp_path / "sd.pt", weights_only=True, map_location="cpu")
    dst.load_state_dict(sd)
    assert_same_state(src, dst)
    x = torch.randn(3, 32, dtype=torch.bfloat16)
    assert torch.equal(run(src, x), run(dst, x))


def run(model, x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return model(x)


@pytest.mark.parametrize("map_location", ["cpu", torch.device("cpu"), {"cpu": "cpu"}, lambda s, loc: s])
def test_torch_load_map_location(map_location, tmp_path):
    src = converted(fused.FusedInt8MLP(), seed=1)
    torch.save(src.state_dict(), tmp_path / "sd.pt")
    dst = converted(fused.FusedInt8MLP(), seed=2)
    dst.load_state_dict(torch.load(tmp_path / "sd.pt", weights_only=True, map_location=map_location))
    assert_same_state(src, dst)


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_fused_save_load_round_trip(cfg, tmp_path):
    src = converted(cfg, seed=1)
    meta = fused.save(src, tmp_path / "m.safetensors")
    dst = converted(cfg, seed=2)
    dst.ffn.fc1.source_bytes = 0
    assert fused.load(tmp_path / "m.safetensors", dst) is dst
    assert_same_state(src, dst)
    x = torch.randn(2, 5, 32)
    assert torch.equal(run(src, x), run(dst, x))
    assert dst.ffn.fc1.source_bytes == src.ffn.fc1.source_bytes > 0  # explain's "before" survives the trip
    header = read_metadata(tmp_path / "m.safetensors")
    assert header["format"] == "fusedmlp.checkpoint" and header["fusedmlp_version"] == fused.__version__
    qdtype = str(src.mlp.gate_up.qweight.dtype).removeprefix("torch.")
    assert header["tensors"]["mlp.gate_up.qweight"] == {"dtype": qdtype, "shape": [96, 32]}
    assert header["config"]["mlp.gate_up"]["act"] == "silu"
    assert json.loads(meta["config"]) == header["config"]


def _refused(path, model, *words):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError) as e:
        fused.load(path, model)
    for w in words:
        assert w in str(e.value), str(e.value)
    after = model.state_dict()
    assert all(torch.equal(before[k].view(torch.uint8), after[k].view(torch.uint8)) for k in before), \
        "a refused load must not change the model"


def test_mismatched_models_are_refused_naming_the_key(tmp_path):
    path = tmp_path / "m.safetensors"
    fused.save(converted(fused.FusedInt8MLP(), seed=1), path)
    _refused(path, converted(fused.FusedFloat8MLP(weight_only=True), seed=2), "'ffn.fc1'", "format='int8'")
    _refused(path, converted(fused.FusedInt8MLP(weight_only=False), seed=2), "'ffn.fc1'", "mode='weight-only'")
    _refused(path, converted(fused.FusedInt8MLP(), seed=2, act=nn.GELU), "'mlp.gate_up'", "act")
    _refused(path, converted(fused.FusedInt8MLP(), seed=2, d=16), "in_features")
    plain = Net()
    _refused(path, plain, "'ffn.fc1'", "fused.quantize(model, fused.FusedInt8MLP(weight_only=True))")
    bigger = converted(fused.FusedInt8MLP(), seed=2)
    bigger.extra = nn.LayerNorm(4)
    _refused(path, bigger, "'extra.weight'", "missing")
    more = converted(fused.FusedInt8MLP(), seed=2)
    more.tail = fused.FusedLinear.from_float(torch.randn(8, 24), None)
    _refused(path, more, "'tail'", "not in the checkpoint")
    fewer = converted(fused.FusedInt8MLP(), seed=2)
    del fewer.norm
    fewer.norm = nn.Identity()
    _refused(path, fewer, "'norm.bias', 'norm.weight'", "do not exist in the model")


def test_state_dict_of_another_config_is_refused_naming_the_key():
    sd = converted(fused.FusedInt8MLP(), seed=1).state_dict()
    with pytest.raises(ValueError, match="'mlp.gate_up.qweight'.*float8_e4m3fn"):
        converted(fused.FusedFloat8MLP(), seed=2).load_state_dict(sd)


def test_foreign_files_are_refused(tmp_path):
    save_file({"w": torch.zeros(2)}, str(tmp_path / "plain.safetensors"))
    with pytest.raises(ValueError, match="not a fusedmlp checkpoint"):
        fused.load(tmp_path / "plain.safetensors", converted(fused.FusedInt8MLP(), seed=1))
    meta = fused.save(converted(fused.FusedInt8MLP(), seed=1), tmp_path / "m.safetensors")
    tensors = {"w": torch.zeros(2)}
    save_file(tensors, str(tmp_path / "v2.safetensors"), metadata={**meta, "format_version": "99"})
    with pytest.raises(ValueError, match="format_version '99'"):
        fused.load(tmp_path / "v2.safetensors", converted(fused.FusedInt8MLP(), seed=1))


def test_header_disagreeing_with_model_names_the_key(tmp_path):
    src = converted(fused.FusedInt8MLP(), seed=1)
    meta = fused.save(src, tmp_path / "m.safetensors")
    shapes = json.loads(meta["tensors"])
    shapes["head.scale"]["shape"] = [25]
    save_file({k: v.contiguous() for k, v in src.state_dict().items()}, str(tmp_path / "bad.safetensors"),
              metadata={**meta, "tensors": json.dumps(shapes)})
    _refused(tmp_path / "bad.safetensors", converted(fused.FusedInt8MLP(), seed=2), "'head.scale'", "(25,)")


def test_save_refuses_an_unconverted_model(tmp_path):
    with pytest.raises(ValueError, match="no converted module"):
        fused.save(Net(), tmp_path / "m.safetensors")


def test_tied_tensors_save_and_load(tmp_path):
    src = converted(fused.FusedInt8MLP(), seed=1)
    src.norm2 = src.norm  # the same parameters under two names: safetensors refuses shared memory
    fused.save(src, tmp_path / "m.safetensors")
    dst = converted(fused.FusedInt8MLP(), seed=2)
    dst.norm2 = dst.norm
    fused.load(tmp_path / "m.safetensors", dst)
    assert_same_state(src, dst)


@pytest.mark.cuda
@pytest.mark.parametrize("cfg", [fused.FusedInt8MLP(), fused.FusedFloat8MLP()], ids=["int8", "fp8"])
def test_gpu_to_cpu_and_back(cfg, tmp_path):
    # converted on the GPU, loaded on the CPU (safetensors and torch.load + map_location), and the reverse
    torch.manual_seed(1)
    gpu = fused.quantize(Net().cuda(), cfg)
    fused.save(gpu, tmp_path / "g.safetensors")
    torch.save(gpu.state_dict(), tmp_path / "g.pt")
    cpu_a, cpu_b = converted(cfg, seed=2), converted(cfg, seed=3)
    fused.load(tmp_path / "g.safetensors", cpu_a)
    cpu_b.load_state_dict(torch.load(tmp_path / "g.pt", weights_only=True, map_location="cpu"))
    assert_same_state(gpu, cpu_a)
    assert_same_state(gpu, cpu_b)
    assert all(t.device.type == "cpu" for t in cpu_a.state_dict().values())

    fused.save(cpu_a, tmp_path / "c.safetensors")
    torch.manual_seed(4)
    gpu2 = fused.quantize(Net().cuda(), cfg)
    fused.load(tmp_path / "c.safetensors", gpu2)
    assert_same_state(cpu_a, gpu2)
    assert all(t.device.type == "cuda" for t in gpu2.state_dict().values())
    gpu3 = fused.quantize(Net().cuda(), cfg)
    gpu3.load_state_dict(torch.load(tmp_path / "g.pt", weights_only=True, map_location="cuda"))
    assert_same_state(gpu, gpu3)


def test_stored_data_disagreeing_with_the_header_is_refused(tmp_path):
    src = converted(fused.FusedInt8MLP(), seed=1)
    meta = fused.save(src, tmp_path / "m.safetensors")
    tensors = {k: v.contiguous() for k, v in src.state_dict().items()}
    tensors["head.scale"] = torch.zeros(25)  # our header still says (24,)
    save_file(tensors, str(tmp_path / "bad.safetensors"), metadata=meta)
    _refused(tmp_path / "bad.safetensors", converted(fused.FusedInt8MLP(), seed=2), "'head.scale'", "corrupt")
