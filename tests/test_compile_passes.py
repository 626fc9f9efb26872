"""fused.compile_passes: under torch.compile, per-Linear converted MLPs end up as one gated op + one linear
(gated blocks) or a linear with the activation fused + one linear (fc1-act-fc2); and the new
fusedmlp::gated_pair op (gate and up in separate tensors) against the stacked gated op."""
import contextlib
import os
import subprocess
import sys

import pytest
import torch
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend
from torch._inductor.utils import run_and_get_code
from torchao.quantization import quantize_

import fused
from fused import compile_passes, dispatch
from fused.demo import LlamaMLP
from fused.reference import gated_pair_ref
from lowbit import quantize_weight, sqnr


class FcMLP(nn.Module):
    """GPT/BERT style: fc2(act(fc1(x)))."""

    def __init__(self, d=32, h=40, act=None):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, d)
        self.act = act if act is not None else nn.GELU()

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class BiasedGLU(nn.Module):
    """Gated with biases, the up projection first in the product, GELU-tanh gate."""

    def __init__(self, d=32, h=48):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = nn.Linear(d, h), nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return self.down_proj(self.up_proj(x) * nn.functional.gelu(self.gate_proj(x), approximate="tanh"))


def _per_linear(model, cfg=None):
    model = model.eval()
    quantize_(model, cfg or fused.FusedInt8MLP())  # the default: every nn.Linear -> FusedLinear(act="none")
    assert all(type(m) is not nn.Linear for m in model.modules())
    return model


@contextlib.contextmanager
def _fresh(enabled=True, cache=False):
    """A fresh compile with the rewrites on/off; Inductor's caches off unless ``cache`` (a cache hit would
    skip the pass, and its counters with it)."""
    old = compile_passes.enabled()
    compile_passes.set_enabled(enabled)
    torch.compiler.reset()
    compile_passes.stats.clear()
    try:
        with torch._inductor.config.patch(fx_graph_cache=cache), \
                torch._functorch.config.patch(enable_autograd_cache=cache):
            yield
    finally:
        compile_passes.set_enabled(old)
        torch.compiler.reset()


def _op_calls(code: str) -> dict:
    return {op: code.count(f"torch.ops.fusedmlp.{op}.default(") for op in ("linear", "gated_pair", "gated")}


def _compiled_run(model, shapes, dtype):
    """Compile (fullgraph, dynamic) under a frame counter; run every shape; return outputs, refs, code."""
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(model, backend=counter, fullgraph=True, dynamic=True)
    outs, refs, code = [], [], None
    with torch.no_grad():
        for i, shape in enumerate(shapes):
            x = torch.randn(shape, dtype=dtype)
            if i == 0:
                y, codes = run_and_get_code(compiled, x)
                code = "\n".join(codes)
            else:
                y = compiled(x)
            outs.append(y)
            refs.append(model(x))  # eager converted model: 3 separate ops + torch activation/mul
    return outs, refs, code, counter


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_llama_block_becomes_gated_pair_plus_linear(dtype):
    model = _per_linear(LlamaMLP(32, 48)).to(dtype)
    with _fresh():
        dispatch.stats.clear()
        outs, refs, code, counter = _compiled_run(model, [(3, 32), (5, 32), (17, 32)], dtype)
        assert dict(compile_passes.stats) == {"linear+silu": 1, "gated_pair(silu)": 1}
    assert _op_calls(code) == {"linear": 1, "gated_pair": 1, "gated": 0}
    assert counter.frame_count == 1  # one graph for M = 3, 5, 17: no recompile
    for y, ref in zip(outs, refs):
        assert y.shape == ref.shape and y.dtype == dtype
        assert sqnr(ref, y) > 40
    # what ran: one gated_pair + one linear per compiled call (the eager refs add 3 linears each)
    assert sum(n for (op, _), n in dispatch.stats.items() if op == "gated_pair") == 3


@pytest.mark.parametrize("act, name", [(nn.GELU(), "gelu"), (nn.GELU(approximate="tanh"), "gelu_tanh"),
                                       (nn.ReLU(), "relu"), (nn.SiLU(), "silu")])
def test_fc_act_fc_becomes_two_linears_with_the_activation_fused(act, name):
    model = _per_linear(FcMLP(act=act)).to(torch.bfloat16)
    with _fresh():
        outs, refs, code, counter = _compiled_run(model, [(3, 32), (2, 5, 32), (2, 17, 32)], torch.bfloat16)
        assert counter.frame_count == 2  # one graph per input rank, none per M
        assert dict(compile_passes.stats) == {f"linear+{name}": 2}  # one rewrite in each
    assert _op_calls(code) == {"linear": 2, "gated_pair": 0, "gated": 0}
    assert f"'{name}'" in code or f'"{name}"' in code  # the activation is an argument of our op
    for y, ref in zip(outs, refs):
        assert sqnr(ref, y) > 40


def test_sparse_linear_gets_the_activation_too():
    model = _per_linear(FcMLP(act=nn.GELU(approximate="tanh")), fused.FusedInt8MLP(sparsity="2:4"))
    with _fresh():
        outs, refs, code, _ = _compiled_run(model, [(5, 32)], torch.float32)
        assert dict(compile_passes.stats) == {"sparse24_linear+gelu_tanh": 1}
    assert code.count("torch.ops.fusedmlp.sparse24_linear.default(") == 2
    assert sqnr(refs[0], outs[0]) > 100


def test_biased_glu_w8a8_fp32():
    """Biases, the product in the other order, W8A8 (dynamic) linears, fp32: all carried into gated_pair."""
    model = _per_linear(BiasedGLU(), fused.FusedInt8MLP(weight_only=False))
    with _fresh():
        outs, refs, code, _ = _compiled_run(model, [(2, 5, 32), (3, 17, 32)], torch.float32)  # 3-D x
        assert dict(compile_passes.stats) == {"linear+gelu_tanh": 1, "gated_pair(gelu_tanh)": 1}
    assert _op_calls(code) == {"linear": 1, "gated_pair": 1, "gated": 0}
    for y, ref in zip(outs, refs):
        assert sqnr(ref, y) > 100


def test_disabled_runs_the_unrewritten_graph_and_the_cache_tells_them_apart():
    """Off (FUSED_COMPILE_PASSES=0 / set_enabled(False)): 3 linears and Inductor's own silu * mul. With
    Inductor's caches on, the on/off state is in the cache key: no graph of the other state is served."""
    model = _per_linear(LlamaMLP(32, 48)).to(torch.bfloat16)
    for enabled, want in [(True, {"linear": 1, "gated_pair": 1, "gated": 0}),
                          (False, {"linear": 3, "gated_pair": 0, "gated": 0}),
                          (True, {"linear": 1, "gated_pair": 1, "gated": 0})]:
        with _fresh(enabled=enabled, cache=True):
            outs, refs, code, _ = _compiled_run(model, [(3, 32)], torch.bfloat16)
        assert _op_calls(code) == want, enabled
        assert sqnr(refs[0], outs[0]) > 40


def test_env_switch():
    env = dict(os.environ, FUSED_COMPILE_PASSES="0")
    out = subprocess.run([sys.executable, "-c", "import fused; print(fused.compile_passes.enabled())"],
                         env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


class SharedGate(nn.Module):
    """The gate's raw output is used twice (no activation fusion may drop it); gate and up see different
    inputs (no gated pair)."""

    def __init__(self, d=32, h=48):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = nn.Linear(d, h), nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        g = self.gate_proj(x)
        return self.down_proj(nn.functional.silu(g) * self.up_proj(x * 2) + g)


def test_no_rewrite_where_it_would_change_the_result():
    model = _per_linear(SharedGate())
    with _fresh():
        outs, refs, code, _ = _compiled_run(model, [(5, 32)], torch.float32)
        assert dict(compile_passes.stats) == {}
    assert _op_calls(code) == {"linear": 3, "gated_pair": 0, "gated": 0}
    assert sqnr(refs[0], outs[0]) > 100


def test_install_is_idempotent_and_keeps_other_passes():
    from torch._inductor import config

    seen = []

    def other(graph):
        seen.append(len(graph.nodes))

    with config.patch(post_grad_custom_post_pass=other):
        compile_passes.install()
        compile_passes.install()
        passes = config.post_grad_custom_post_pass.passes
        assert passes[0] is other and sum(isinstance(p, compile_passes.FusedMLPPass) for p in passes) == 1
        model = _per_linear(LlamaMLP(32, 48))
        with _fresh():
            _, _, code, _ = _compiled_run(model, [(3, 32)], torch.float32)
        assert seen and _op_calls(code)["gated_pair"] == 1
    assert isinstance(config.post_grad_custom_post_pass, compile_passes.FusedMLPPass)  # as installed at import


# ---------------------------------------------------------------------------------------- the new op

def _pair_args(fmt, bias, dynamic, shape=(3, 16), dtype=torch.float32, act="silu"):
    (wg, sg), (wu, su) = quantize_weight(torch.randn(12, 16), fmt), quantize_weight(torch.randn(12, 16), fmt)
    bg, bu = (torch.randn(12, dtype=dtype), torch.randn(12, dtype=dtype)) if bias else (None, None)
    return (torch.randn(*shape, dtype=dtype), wg, sg, bg, wu, su, bu, act, dynamic)


@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
def test_gated_pair_opcheck(fmt):
    target = torch.ops.fusedmlp.gated_pair.default
    # (fp8: no test_schema, for torch's reason given in tests/test_ops.py::test_opcheck)
    utils = ["test_schema"] if fmt == "int8" else []
    utils += ["test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"]
    for bias, dynamic, shape, dtype in [(True, False, (3, 16), torch.float32),
                                        (False, True, (2, 5, 16), torch.float32),
                                        (True, True, (1, 16), torch.bfloat16),
                                        (False, False, (0, 16), torch.bfloat16)]:
        torch.library.opcheck(target, _pair_args(fmt, bias, dynamic, shape, dtype), test_utils=utils)


@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_gated_pair_cpu_paths_match_the_stacked_op(fmt, dynamic):
    """On every CPU path (int8pack, tiled dequant, int_mm, fp8 emulated) gated_pair = gated on the stacked
    weights (the same aten kernels on the same rows) and the reference."""
    for shape, dtype in [((1, 16), torch.bfloat16), ((3, 16), torch.bfloat16), ((2, 5, 16), torch.float32),
                         ((20, 16), torch.float16)]:
        x, wg, sg, bg, wu, su, bu, act, dyn = _pair_args(fmt, True, dynamic, shape, dtype, "gelu")
        y = dispatch.gated_pair(x, wg, sg, bg, wu, su, bu, act, dyn)
        stacked = dispatch.gated(x, torch.cat([wg, wu]), torch.cat([sg, su]), torch.cat([bg, bu]), act, dyn)
        assert y.shape == (*shape[:-1], 12) and y.dtype == dtype
        assert sqnr(stacked, y) > 120, (shape, dtype)
        assert sqnr(gated_pair_ref(x, wg, sg, bg, wu, su, bu, act, dyn), y) > 30, (shape, dtype)


@pytest.mark.parametrize("dynamic", [False, True])
def test_gated_pair_triton_path_end_to_end(dynamic):
    """dispatch -> Triton (interpreter): GEMV at M <= 16, tiled GEMM (W8A8 with act_quant) above."""
    for shape in [(3, 16), (17, 16)]:
        args = _pair_args("int8", True, dynamic, shape, torch.float32)
        with dispatch.force_path("triton"):
            y = dispatch.gated_pair(*args)
        ref_dynamic = dynamic and shape[0] > dispatch.GEMV_MAX_M
        assert sqnr(gated_pair_ref(*args[:-1], ref_dynamic), y) > 80, shape


def test_gated_pair_bad_input():
    x, wg, sg, bg, wu, su, bu, act, dyn = _pair_args("int8", True, False)
    with pytest.raises(ValueError, match="both have a bias"):
        dispatch.gated_pair(x, wg, sg, bg, wu, su, None, act, dyn)
    with pytest.raises(ValueError, match="gate and up weights differ"):
        dispatch.gated_pair(x, wg, sg, bg, wu[:6], su[:6], bu[:6], act, dyn)
    with pytest.raises(ValueError, match="features"):
        dispatch.gated_pair(x[:, :8], wg, sg, bg, wu, su, bu, act, dyn)


# ------------------------------------------------------------------------------------------ on the GPU

def _cuda_kernels_per_forward(fn, x, forwards=5) -> float:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn(x)  # compile, tune, allocate the split-K workspace
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(forwards):
            fn(x)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA
               and not any(k in e.name.lower() for k in ("memcpy", "memset"))]
    return len(kernels) / forwards


@pytest.mark.cuda
@pytest.mark.parametrize("M,split,one", [(1, True, False), (64, False, False), (64, True, False), (64, True, True),
                                         (300, True, True)])
def test_compiled_per_linear_llama_block_launches_two_kernels_cuda(M, split, one, monkeypatch):
    """The issue's count: 2 kernel launches per Llama block under torch.compile with the default
    (per-Linear) conversion: the gated kernel (gate + up + SiLU + product) and the down projection.
    Except where int8 W8A16 takes split activations (dispatch.SPLIT_MIN_M <= M <= SPLIT_MAX_M): act_split
    runs before each of the two GEMMs (4 launches; made inside the GEMM instead, one launch per layer, the
    H200 block took 230.6 µs vs 86.6 at M=64). dispatch.SPLIT_MAX_M = 0 gives back 2 launches there, and so does
    dispatch.SPLIT_ONE_LAUNCH (act_split and the split GEMM in one ticketed launch, fused.kernels.split_gemm)."""
    if not split:
        monkeypatch.setattr(dispatch, "SPLIT_MAX_M", 0)
    monkeypatch.setattr(dispatch, "SPLIT_ONE_LAUNCH", one)
    monkeypatch.setattr(dispatch, "_cuda_paths", {})
    model = _per_linear(LlamaMLP(256, 512)).to(device="cuda", dtype=torch.bfloat16)
    x = torch.randn(M, 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad(), _fresh():
        compiled = torch.compile(model, fullgraph=True, dynamic=True)
        launches = _cuda_kernels_per_forward(compiled, x)
        assert dict(compile_passes.stats) == {"linear+silu": 1, "gated_pair(silu)": 1}
        assert sqnr(model(x), compiled(x)) > 35
    print(f"M={M}: {launches:g} CUDA kernels per compiled per-Linear Llama block (split activations {split})")
    by_split = split and not one and dispatch.SPLIT_MIN_M <= M <= dispatch.SPLIT_MAX_M
    assert launches == (4 if by_split else 2)
    with torch.no_grad(), _fresh(enabled=False):
        off = _cuda_kernels_per_forward(torch.compile(model, fullgraph=True, dynamic=True), x)
    print(f"M={M}: {off:g} CUDA kernels with FUSED_COMPILE_PASSES=0")
    assert off >= 4  # 3 linears + Inductor's silu * mul
