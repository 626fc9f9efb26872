"""SmoothQuant-style smoothing (fused.smoothing): calibration, neutrality before quantization, the W8A8
accuracy gain on outlier channels, block and per-Linear conversion, checkpoints, bad input."""
import copy

import pytest
import torch
from torch import nn

import fused
from fused.checkpoint import read_metadata
from fused.demo import LlamaMLP
from fused.smoothing import S_MAX, S_MIN, factors
from lowbit import sqnr




class Net(nn.Module):
    """A gated block, an fc1-GELU-fc2 block with biases and a lone Linear; the input has a few channels
    ~50x larger than the rest (the activation outliers smoothing is for)."""

    def __init__(self, d=32):
        super().__init__()
        self.mlp = LlamaMLP(d, 48)
        self.ffn = nn.Sequential(nn.Linear(d, 40), nn.GELU(), nn.Linear(40, d))
        self.head = nn.Linear(d, 24)

    def forward(self, x):
        x = x + self.mlp(x)
        return self.head(x + self.ffn(x))


def outlier_inputs(n, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        x = torch.randn(2, 7, d, generator=g)
        x[..., OUTLIERS] *= 50.0
        out.append(x)
    return out


OUTLIERS = [3, 17, 29]


def make_net(seed=0):
    """As in real transformers, the weights reading the outlier channels are small: the outliers are
    not what the output is made of, but they set every token's int8 activation scale."""
    torch.manual_seed(seed)
    net = Net().eval()
    with torch.no_grad():
        for lin in (net.mlp.gate_proj, net.mlp.up_proj, net.ffn[0], net.head):
            lin.weight[:, OUTLIERS] /= 50.0
    return net


def w8a8(smoothing=None):
    return fused.FusedInt8MLP(weight_only=False, smoothing=smoothing)


def test_factors_formula_and_clamp():
    x, w = torch.tensor([4.0, 1e12, 0.0, 9.0]), torch.tensor([1.0, 1e-12, 3.0, 0.0])
    s = factors(x, w, 0.5)
    assert s.dtype == torch.float32
    assert s[0].item() == pytest.approx(2.0)
    assert s[1].item() == pytest.approx(S_MAX)  # clamped
    assert s[2].item() == 1.0 and s[3].item() == 1.0  # nothing to balance on all-zero channels
    assert factors(torch.tensor([1e-20]), torch.tensor([1e20]), 0.5).item() == pytest.approx(S_MIN)
    assert torch.equal(factors(x[:1], w[:1], 1.0), torch.tensor([4.0]))  # alpha 1: s = max|X|


def test_calibrate_keys_shapes_and_gated_share():
    net = make_net()
    s = fused.calibrate_smoothing(net, outlier_inputs(3))
    assert set(s) == {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "ffn.0", "ffn.2", "head"}
    assert s["ffn.2"].shape == (40,) and s["head"].dtype == torch.float32
    assert torch.equal(s["mlp.gate_proj"], s["mlp.up_proj"])  # one x, one stacked weight
    # the outlier channels get the largest factors
    assert set(s["mlp.gate_proj"].topk(3).indices.tolist()) == set(OUTLIERS)
    assert net.training is False
    only = fused.calibrate_smoothing(net, outlier_inputs(1), filter_fn=lambda m, fqn: fqn == "head")
    assert set(only) == {"head"}


def test_calibrate_input_forms_and_mode_restored():
    class Kw(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 4)

        def forward(self, x, scale=1.0):
            return self.lin(x * scale)

    m = Kw().train()
    x = torch.randn(3, 8)
    a = fused.calibrate_smoothing(m, [x])["lin"]
    b = fused.calibrate_smoothing(m, [(x,)])["lin"]
    c = fused.calibrate_smoothing(m, [{"x": x / 2, "scale": 2.0}])["lin"]
    assert torch.equal(a, b) and torch.allclose(a, c)
    assert m.training  # restored


@pytest.mark.parametrize("alpha", [-0.1, 1.5, True, "0.5", float("nan")])
def test_calibrate_bad_alpha(alpha):
    with pytest.raises(ValueError, match="alpha must be a number in \\[0, 1\\]"):
        fused.calibrate_smoothing(make_net(), outlier_inputs(1), alpha=alpha)


def test_calibrate_bad_input():
    net = make_net()
    with pytest.raises(ValueError, match="calibration is empty"):
        fused.calibrate_smoothing(net, [])
    with pytest.raises(ValueError, match="never reached .*head"):
        _unreached()
    with pytest.raises(TypeError, match="only nn.Linear"):
        fused.calibrate_smoothing(net, outlier_inputs(1), filter_fn=lambda m, fqn: fqn == "ffn")
    with pytest.raises(ValueError, match="no nn.Linear"):
        fused.calibrate_smoothing(nn.Sequential(nn.ReLU()), [torch.randn(2)])
    bad = outlier_inputs(1)[0]
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN/Inf activations"):
        fused.calibrate_smoothing(net, [bad])


def _unreached():
    class Skip(nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.head = nn.Linear(2, 2), nn.Linear(2, 2)

        def forward(self, x):
            return self.used(x)

    fused.calibrate_smoothing(Skip(), [torch.randn(1, 2)])


def test_smoothing_is_neutral_before_quantization():
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(5, 19, generator=g) * 10, torch.randn(13, 19, generator=g)
    s = factors(x.abs().amax(0), w.abs().amax(0), 0.5)
    assert s.std() > 0.1  # a real rescaling, not ~1
    ref = x @ w.t()
    smoothed = (x / s) @ (w * s).t()
    assert sqnr(ref, smoothed) > 120  # equal up to fp32 rounding


@pytest.mark.parametrize("blocks", [True, False], ids=["blocks", "per-linear"])
def test_w8a8_sqnr_improves_with_smoothing(blocks):
    net, calib, test = make_net(), outlier_inputs(4), outlier_inputs(2, seed=9)
    s = fused.calibrate_smoothing(net, calib)
    with torch.no_grad():
        ref = torch.cat([net(x) for x in test])
        plain = fused.quantize(copy.deepcopy(net), w8a8(), blocks=blocks)
        smooth = fused.quantize(copy.deepcopy(net), w8a8(s), blocks=blocks)
        out_plain, out_smooth = torch.cat([plain(x) for x in test]), torch.cat([smooth(x) for x in test])
    db_plain, db_smooth = sqnr(ref, out_plain), sqnr(ref, out_smooth)
    assert db_smooth > db_plain + 15, (db_plain, db_smooth)  # measured: 16.8 -> 42.8 dB
    kinds = {type(m).__name__ for m in smooth.modules()}
    assert ("FusedGatedLinear" in kinds) == blocks
    smoothed = [m for m in smooth.modules() if isinstance(m, (fused.FusedLinear, fused.FusedGatedLinear))]
    assert len(smoothed) == (5 if blocks else 6)
    assert all(m.smooth_inv is not None and m.smooth_inv.dtype == torch.float32 for m in smoothed)
    assert "smoothed" in repr(smooth)


def test_smooth_inv_is_one_over_s_and_module_math():
    net = make_net()
    s = fused.calibrate_smoothing(net, outlier_inputs(2))
    conv = fused.quantize(copy.deepcopy(net), w8a8(s))
    assert torch.equal(conv.head.smooth_inv, 1.0 / s["head"])
    assert torch.equal(conv.mlp.gate_up.smooth_inv, 1.0 / s["mlp.gate_proj"])
    # the module's forward is the unsmoothed op on x / s with the smoothed weight
    lin = conv.head
    x = outlier_inputs(1, seed=3)[0]
    expect = fused.dispatch.linear((x.float() * lin.smooth_inv).to(x.dtype), lin.qweight, lin.scale, lin.bias,
                                   lin.act, lin.dynamic)
    assert torch.equal(lin(x), expect)
    # bf16 model: smooth_inv and scales stay fp32, the output stays bf16
    conv16 = fused.quantize(copy.deepcopy(net).to(torch.bfloat16), w8a8(s))
    conv16.to(torch.bfloat16)
    assert conv16.head.smooth_inv.dtype == torch.float32
    assert conv16(x.to(torch.bfloat16)).dtype == torch.bfloat16


def test_root_block_and_partial_dict():
    block = LlamaMLP(32, 48).eval()
    x = outlier_inputs(2)
    s = fused.calibrate_smoothing(block, x)
    assert set(s) == {"gate_proj", "up_proj", "down_proj"}
    conv = fused.quantize(copy.deepcopy(block), w8a8(s))  # the root is the block: child fqns have no prefix
    assert isinstance(conv, fused.FusedGatedMLP) and conv.gate_up.smooth_inv is not None
    # only the Linears named in the dict are smoothed
    conv = fused.quantize(copy.deepcopy(block), w8a8({"down_proj": s["down_proj"]}))
    assert conv.gate_up.smooth_inv is None and conv.down.smooth_inv is not None


def test_config_and_conversion_errors():
    s = {"head": torch.ones(32)}
    with pytest.raises(ValueError, match="weight_only=False"):
        fused.FusedInt8MLP(smoothing=s)
    with pytest.raises(ValueError, match="not supported with sparsity"):
        fused.FusedFloat8MLP(sparsity="2:4", smoothing=s)
    with pytest.raises(TypeError, match="must be a dict"):
        w8a8([torch.ones(3)])
    with pytest.raises(TypeError, match="1-D floating tensor"):
        w8a8({"head": torch.ones(2, 3)})
    with pytest.raises(ValueError, match="finite and > 0"):
        w8a8({"head": torch.tensor([1.0, 0.0])})
    assert "smoothing" not in repr(w8a8(s))  # tensors kept out of the repr
    with pytest.raises(ValueError, match="head: smoothing vector has shape \\(7,\\).*in_features=32"):
        fused.quantize(make_net(), w8a8({"head": torch.ones(7)}))
    g = {"mlp.gate_proj": torch.ones(32), "mlp.up_proj": torch.full((32,), 2.0)}
    with pytest.raises(ValueError, match="mlp: gate_proj and up_proj share their input"):
        fused.quantize(make_net(), w8a8(g))


def _smoothed_pair():
    net = make_net()
    s = fused.calibrate_smoothing(net, outlier_inputs(2))
    return fused.quantize(copy.deepcopy(net), w8a8(s)), fused.quantize(copy.deepcopy(net), w8a8())


def test_state_dict_round_trip_bit_exact(tmp_path):
    smooth, plain = _smoothed_pair()
    assert "head.smooth_inv" in smooth.state_dict() and "head.smooth_inv" not in plain.state_dict()
    torch.save(smooth.state_dict(), tmp_path / "sd.pt")
    sd = torch.load(tmp_path / "sd.pt", weights_only=True)
    fresh = fused.quantize(make_net(seed=5), w8a8(fused.calibrate_smoothing(make_net(seed=5), outlier_inputs(1))))
    fresh.load_state_dict(sd)
    for k, v in smooth.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k
    x = outlier_inputs(1, seed=4)[0]
    assert torch.equal(fresh(x), smooth(x))


def test_state_dict_refuses_smoothing_mismatch():
    smooth, plain = _smoothed_pair()
    with pytest.raises(ValueError, match="'mlp.gate_up.smooth_inv': the checkpoint is smoothed"):
        copy.deepcopy(plain).load_state_dict(smooth.state_dict())
    with pytest.raises(ValueError, match="'mlp.gate_up.smooth_inv' missing: this module is smoothed"):
        copy.deepcopy(smooth).load_state_dict(plain.state_dict())


def test_fused_save_load(tmp_path):
    smooth, plain = _smoothed_pair()
    fused.save(smooth, tmp_path / "s.safetensors")
    fused.save(plain, tmp_path / "p.safetensors")
    meta = read_metadata(tmp_path / "s.safetensors")
    assert meta["config"]["head"]["smoothed"] is True
    assert "smoothed" not in read_metadata(tmp_path / "p.safetensors")["config"]["head"]  # header unchanged
    fresh = fused.quantize(make_net(seed=5), w8a8(fused.calibrate_smoothing(make_net(seed=5), outlier_inputs(1))))
    fused.load(tmp_path / "s.safetensors", fresh)
    for k, v in smooth.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k
    with pytest.raises(ValueError, match="checkpoint has smoothed=True, the model has smoothed=False.*smooth_inv"):
        fused.load(tmp_path / "s.safetensors", copy.deepcopy(plain))
    with pytest.raises(ValueError, match="checkpoint has smoothed=False, the model has smoothed=True"):
        fused.load(tmp_path / "p.safetensors", copy.deepcopy(smooth))


def test_sweep_entry_calibrates():
    from fused.sweep import convert, get_config, sweep
    from fused.tasks import model_task

    entry = get_config("int8-w8a8-smooth")
    assert entry.calibrate == 2
    with pytest.raises(ValueError, match="calibrates on the task's batches"):
        convert(make_net(), entry, torch.float32)
    task = model_task(make_net(), outlier_inputs(3))
    res = sweep(task, ["int8 W8A8", "int8 W8A8 smooth"], iters=1, progress=False)
    plain, smooth = res.row("int8 W8A8"), res.row("int8 W8A8 smooth")
    assert smooth.status == "ok"
    assert smooth.metrics["output_sqnr_db"] > plain.metrics["output_sqnr_db"] + 15  # measured: 15.6 -> 41.7 dB


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_every_path_sees_the_smoothed_input(path):
    # smoothing lives in the module, so the Triton kernels (interpreted here) and the pure-torch
    # reference run it alike; compare each with the default CPU path
    net = make_net()
    conv = fused.quantize(copy.deepcopy(net), w8a8(fused.calibrate_smoothing(net, outlier_inputs(2))))
    x = outlier_inputs(1, seed=6)[0][:1, :3]
    with torch.no_grad():
        base = conv(x)
        with fused.dispatch.force_path(path):
            out = conv(x)
    assert sqnr(base, out) > 40


@pytest.mark.cuda
def test_cuda_smoothed_matches_cpu():
    net = make_net()
    s = fused.calibrate_smoothing(net, outlier_inputs(2))
    cpu = fused.quantize(copy.deepcopy(net), w8a8(s))
    gpu = fused.quantize(copy.deepcopy(net).cuda(), w8a8(s))  # s on the CPU: moved to the weight's device
    assert gpu.head.smooth_inv.is_cuda
    x = outlier_inputs(1, seed=6)[0]
    with torch.no_grad():
        assert sqnr(cpu(x), gpu(x.cuda()).cpu()) > 40
        assert sqnr(net(x), gpu(x.cuda()).cpu()) > 35
