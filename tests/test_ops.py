"""fused.ops: the torch.library custom ops (opcheck), torch.compile through them, and no silent backward."""
import copy

import pytest
import torch
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend
from torchao.quantization import quantize_

import fused
from fused import dispatch
from fused.demo import LlamaMLP
from lowbit import quantize_weight, sqnr


def _args(op, fmt, bias, dynamic, shape=(3, 16), dtype=torch.float32):
    n = 12
    q, s = quantize_weight(torch.randn(n, 16), fmt)
    b = torch.randn(n, dtype=dtype) if bias else None
    return (torch.randn(*shape, dtype=dtype), q, s, b, "silu" if op == "gated" else "gelu", dynamic)


@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
@pytest.mark.parametrize("op", ["linear", "gated"])
def test_opcheck(op, fmt):
    target = getattr(torch.ops.fusedmlp, op).default
    # opcheck's test_schema compares inputs before/after with an op that has no float8 CPU kernel
    # (torch's limitation, not the op's): for fp8 check the no-mutation part of the schema by hand.
    utils = ["test_schema"] if fmt == "int8" else []
    utils += ["test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"]
    for bias, dynamic, shape, dtype in [(True, False, (3, 16), torch.float32),
                                        (False, True, (2, 5, 16), torch.float32),
                                        (True, True, (1, 16), torch.bfloat16),
                                        (False, False, (0, 16), torch.bfloat16)]:
        args = _args(op, fmt, bias, dynamic, shape, dtype)
        torch.library.opcheck(target, args, test_utils=utils)
        before = [a.clone() for a in args[:4] if a is not None]
        target(*args)
        after = [a for a in args[:4] if a is not None]
        assert all(torch.equal(b.view(torch.uint8) if b.element_size() == 1 else b,
                               a.view(torch.uint8) if a.element_size() == 1 else a)
                   for b, a in zip(before, after))


class Mixed(nn.Module):
    def __init__(self, d=32, h=48):
        super().__init__()
        self.gated = LlamaMLP(d, h)
        self.seq = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):
        return self.seq(self.gated(x)) + x


def test_compile_fullgraph_dynamic_matches_eager():
    model = Mixed().eval()
    quantize_(model, fused.FusedInt8MLP(weight_only=False), filter_fn=fused.is_mlp)
    assert isinstance(model.gated, fused.FusedGatedMLP) and isinstance(model.seq, fused.FusedMLP)
    torch.compiler.reset()
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(model, backend=counter, fullgraph=True, dynamic=True)
    with torch.no_grad():
        # (M=1 would add a graph: dynamo specialises sizes 0 and 1 for every tensor, not our doing)
        for shape in [(5, 32), (17, 32), (2, 7, 32), (3, 9, 32)]:
            x = torch.randn(shape)
            out, ref = compiled(x), model(x)
            assert out.shape == ref.shape
            assert sqnr(ref, out) >= 100  # same op underneath; only the glue is compiled
    # the op is opaque to the compiler: one graph per input rank serves every batch size
    assert counter.frame_count == 2


@pytest.mark.parametrize("filter_fn", [None, fused.is_mlp], ids=["per_linear", "blocks"])
def test_backward_raises_instead_of_a_wrong_gradient(filter_fn):
    model = Mixed().eval()
    quantize_(model, fused.FusedInt8MLP(), filter_fn=filter_fn)
    x = torch.randn(3, 32, requires_grad=True)
    y = model(x)  # forward works (autograd sees the registered op)
    assert y.requires_grad
    with pytest.raises(RuntimeError, match="inference-only: no backward"):
        y.sum().backward()
    with torch.no_grad():  # the advertised way: no op, no graph
        torch.testing.assert_close(model(x), y.detach())


def test_eager_calls_are_counted_per_path():
    model = Mixed().eval()
    quantize_(model, fused.FusedFloat8MLP(), filter_fn=fused.is_mlp)
    before = copy.copy(dispatch.stats)
    with torch.no_grad():
        model(torch.randn(2, 32))
    fp8 = "cpu:fp8_dequant_mm"  # fp8 on the CPU: emulated (fused/cpu.py)
    assert dispatch.stats[("gated", fp8)] == before[("gated", fp8)] + 1
    assert dispatch.stats[("linear", fp8)] == before[("linear", fp8)] + 3
