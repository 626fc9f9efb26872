"""fused.kernels.split_gemm: act_split(x) + the split GEMM in one ticketed launch, bit for bit against the two
launches it replaces (CPU: Triton's interpreter, where programs take the tickets in order), and on the GPU."""
import pytest
import torch

from fused.reference import gated_ref, linear_ref
from lowbit import quantize_weight, sqnr

FMTS = ["int8", "float8_e4m3"]


def _two_launches(x, q, s, b, act, gated, config=None, up=None):
    from fused.kernels.act_split import act_split
    from fused.kernels.w8_gemm import w8_gemm

    planes, xs = act_split(x, fp8=q.dtype == torch.float8_e4m3fn)
    return w8_gemm(planes, q, s, b, act, gated, x_scale=xs, out_dtype=x.dtype, x_split=True, config=config, up=up)


def _x(M, K, view, dtype=torch.bfloat16):
    if view == "transposed":
        return torch.randn(K, M, dtype=dtype).t()
    if view == "offset":
        return torch.randn(M + 1, K + 3, dtype=dtype)[1:, 3:]
    return torch.randn(M, K, dtype=dtype)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("gated", [False, True])
def test_split_gemm_bit_equal_interpreted(fmt, gated, poisoned):
    """Odd shapes (M = 1, 3, 17; N, K not multiples of 16), views of x, a NaN row and an Inf row, a zero weight row,
    split-K and the stacked-planes tile; twice in a row (the counters reset themselves)."""
    from fused.kernels.split_gemm import split_gemm

    torch.manual_seed(0)
    base = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=4, num_stages=1, num_warps=4)
    for M, N, K, bias, act, view, cfg in [(3, 37, 50, True, "silu", "plain", base),
                                          (17, 20, 70, False, "gelu_tanh", "transposed", dict(base, SPLIT_K=2)),
                                          (1, 9, 40, True, "relu", "offset", dict(base, BLOCK_M=32, STACK=True)),
                                          (5, 24, 64, False, "none", "plain", None)]:
        R = 2 * N if gated else N
        q, s = quantize_weight(torch.randn(R, K), fmt)
        q[2] = 0
        s[2] = 0.0
        b = torch.randn(R) if bias else None
        x = _x(M, K, view)
        x[0, 4] = float("nan")
        if M > 2:
            x[2, 7] = float("inf")
        want = _two_launches(x, q, s, b, act, gated, config=cfg)
        for _ in range(2):
            y = split_gemm(x, q, s, b, act, gated, config=cfg)
            assert y.shape == (M, N) and y.dtype == x.dtype
            torch.testing.assert_close(y, want, rtol=0, atol=0, equal_nan=True)
        assert torch.isnan(y[0]).all()
        if M > 1:
            ref = (gated_ref if gated else linear_ref)(x[1:2], q, s, b, act)
            assert sqnr(ref.float(), y[1:2].float()) > 40


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("gated", [False, True])
def test_quant_gemm_bit_equal_interpreted(fmt, gated, poisoned):
    """quant_gemm (act_quant's rows + the W8A8 GEMM in one launch) against act_quant + w8_gemm: odd shapes, views,
    NaN and Inf rows, split-K; fp32 and bf16 x."""
    from fused.kernels.act_quant import act_quant
    from fused.kernels.split_gemm import quant_gemm
    from fused.kernels.w8_gemm import w8_gemm

    torch.manual_seed(3)
    base = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=4, num_stages=1, num_warps=4)
    for M, N, K, bias, act, view, cfg, dtype in [(3, 37, 50, True, "silu", "plain", base, torch.bfloat16),
                                                 (17, 20, 70, False, "gelu", "transposed", dict(base, SPLIT_K=2),
                                                  torch.float32),
                                                 (1, 9, 40, True, "relu", "offset", None, torch.bfloat16)]:
        R = 2 * N if gated else N
        q, s = quantize_weight(torch.randn(R, K), fmt)
        b = torch.randn(R) if bias else None
        x = _x(M, K, view, dtype)
        if M > 2:
            x[1, 4], x[2, 7] = float("nan"), float("inf")
        xq, xs = act_quant(x, fp8=fmt != "int8")
        want = w8_gemm(xq, q, s, b, act, gated, x_scale=xs, out_dtype=x.dtype, config=cfg)
        for _ in range(2):
            y = quant_gemm(x, q, s, b, act, gated, config=cfg)
            torch.testing.assert_close(y, want, rtol=0, atol=0, equal_nan=True)
        ref = (gated_ref if gated else linear_ref)(x[:1], q, s, b, act, dynamic=True)
        assert sqnr(ref.float(), y[:1].float()) > 25


def test_split_gemm_separate_up_and_errors(poisoned):
    from fused.kernels.split_gemm import split_gemm

    torch.manual_seed(1)
    M, N, K = 4, 24, 64
    qg, sg = quantize_weight(torch.randn(N, K), "int8")
    qu, su = quantize_weight(torch.randn(N, K), "int8")
    bg, bu = torch.randn(N), torch.randn(N)
    x = torch.randn(M, K, dtype=torch.bfloat16)
    y = split_gemm(x, qg, sg, bg, "silu", True, up=(qu, su, bu))
    assert torch.equal(y, split_gemm(x, torch.cat([qg, qu]), torch.cat([sg, su]), torch.cat([bg, bu]), "silu", True))
    assert torch.equal(y, _two_launches(x, qg, sg, bg, "silu", True, up=(qu, su, bu)))
    assert split_gemm(x[:0], qg, sg, bg, "silu", True, up=(qu, su, bu)).shape == (0, N)
    with pytest.raises(ValueError, match="bf16/fp16"):
        split_gemm(x.float(), qg, sg)
    with pytest.raises(ValueError, match="8-bit weights"):
        split_gemm(x, qg.float(), sg)


@pytest.mark.parametrize("fmt", FMTS)
def test_dispatch_one_launch_split_interpreted(fmt, monkeypatch):
    """dispatch.SPLIT_ONE_LAUNCH: W8A16 at SPLIT_MIN_M <= M (linear, stacked gated, separate gate/up pair, 3-D x)
    runs split_gemm, counted under its own path, explained, bit-equal to act_split + the split GEMM."""
    from fused import dispatch

    torch.manual_seed(2)
    q, s = quantize_weight(torch.randn(2 * 24, 64), fmt)
    b = torch.randn(48)
    x = torch.randn(2, 20, 64, dtype=torch.bfloat16)
    outs = {}
    for one in (False, True):
        monkeypatch.setattr(dispatch, "SPLIT_ONE_LAUNCH", one)
        monkeypatch.setattr(dispatch, "_cuda_paths", {})
        dispatch.stats.clear()
        with torch.no_grad(), dispatch.force_path("triton"):
            outs[one] = (dispatch.linear(x, q[:24], s[:24], b[:24], "relu"), dispatch.gated(x[0], q, s, b, "silu"),
                         dispatch.gated_pair(x[1], q[:24], s[:24], b[:24], q[24:], s[24:], b[24:], "silu"))
        path = "triton:split_gemm" if one else "triton:act_split+w8_gemm_split"
        assert dispatch.stats[("linear", path)] == 1 and dispatch.stats[("gated", path)] == 1, dict(dispatch.stats)
        assert sum(v for k, v in dispatch.stats.items() if k[1] == path) == 3
        plan, why = dispatch.plan("gated", fmt, False, "cuda", M=100, dtype=torch.bfloat16)
        assert plan == path and ("one launch" in why) == one
    for a, c in zip(outs[False], outs[True]):
        assert torch.equal(a, c)
    assert outs[True][0].shape == (2, 20, 24)


@pytest.mark.parametrize("fmt", FMTS)
def test_dispatch_one_launch_quant_interpreted(fmt, monkeypatch):
    """dispatch.QUANT_ONE_LAUNCH: W8A8 above the GEMV range (linear, gated, gate/up pair, and a block's first layer
    handing h on quantized) runs quant_gemm, counted under its own path, bit-equal to act_quant + the W8A8 GEMM."""
    import copy

    import fused
    from fused import dispatch
    from fused.demo import LlamaMLP

    torch.manual_seed(4)
    q, s = quantize_weight(torch.randn(2 * 24, 64), fmt)
    b = torch.randn(48)
    x = torch.randn(2, 20, 64, dtype=torch.bfloat16)
    base = LlamaMLP(64, 48).bfloat16().eval()
    cfg = (fused.FusedInt8MLP if fmt == "int8" else fused.FusedFloat8MLP)(weight_only=False)
    block = fused.quantize(copy.deepcopy(base), cfg, blocks=True)
    outs = {}
    for one in (False, True):
        monkeypatch.setattr(dispatch, "QUANT_ONE_LAUNCH", one)
        monkeypatch.setattr(dispatch, "_cuda_paths", {})
        dispatch.stats.clear()
        with torch.no_grad(), dispatch.force_path("triton"):
            outs[one] = (dispatch.linear(x, q[:24], s[:24], b[:24], "relu", dynamic=True),
                         dispatch.gated(x[0], q, s, b, "silu", dynamic=True),
                         dispatch.gated_pair(x[1], q[:24], s[:24], b[:24], q[24:], s[24:], b[24:], "silu", dynamic=True),
                         block(x))
        path = "triton:quant_gemm_w8a8" if one else "triton:w8_gemm_w8a8"
        assert dispatch.stats[("linear", path)] == 1 and dispatch.stats[("gated", path)] == 1, dict(dispatch.stats)
        assert dispatch.stats[("gated", path + "+act_quant (h out)")] == 1, dict(dispatch.stats)
    for a, c in zip(outs[False], outs[True]):
        assert torch.equal(a, c)


def test_split_gemm_compiles_for_sm90():
    """The ticketed kernels compile for sm_90 (ptxas, no GPU) with the tuned tiles, split planes and quantized x, int8
    and fp8 (first_layer too), and their registers stay within 16 of w8_gemm's tile (the row phases are light)."""
    import os
    import pathlib
    import re
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(root)
    run = subprocess.run([sys.executable, "tests/w8_gemm_sass.py", "split_gemm"], cwd=root, env=env,
                         capture_output=True, text=True, timeout=600)
    if run.returncode != 0 and "ptxas" in run.stderr and "not found" in run.stderr:
        pytest.skip("no ptxas in this Triton")
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [line for line in run.stdout.splitlines() if line.startswith("one_launch")]
    assert len(rows) == 7, run.stdout  # 3 W8A8 (quant_gemm) and 4 split (split_gemm) tiles
    first = [line for line in run.stdout.splitlines() if line.startswith("first_layer")]
    assert len(first) == 4, run.stdout  # fused.kernels.first_layer with the M=128 and M=1024 gate/up tiles
    for line in rows + first:  # "one_launch <variant>: <n> SASS instructions, REG:<r> vs w8_gemm REG:<r0>"
        r, r0 = (int(v) for v in re.findall(r"REG:(\d+)", line))
        assert r <= r0 + 16, line


# ------------------------------------------------------------------------------------------ on the GPU

@pytest.mark.cuda
@pytest.mark.parametrize("fmt", FMTS)
def test_split_gemm_cuda(fmt):
    """On the GPU, Llama shapes at M = 17 / 128 / 300 with w8_gemm's own configs (STACK and split-K included where
    tuned): bit-equal to act_split + w8_gemm, every call the same, close to the weight-only reference; quant_gemm
    bit-equal to act_quant + the W8A8 w8_gemm."""
    from fused.kernels.split_gemm import gemm_config, split_gemm

    torch.manual_seed(0)
    for gated, (N, K) in ((True, (14336, 4096)), (False, (4096, 14336)), (True, (1000, 520))):
        q, s = quantize_weight(torch.randn((2 if gated else 1) * N, K, device="cuda"), fmt)
        for M in (17, 128, 300):
            x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            want = _two_launches(x, q, s, None, "silu" if gated else "none", gated)
            cfg = gemm_config(M, N, K, gated, q.dtype)
            y = split_gemm(x, q, s, None, "silu" if gated else "none", gated)
            assert torch.equal(y, want), (gated, N, K, M, cfg)
            assert all(torch.equal(y, split_gemm(x, q, s, None, "silu" if gated else "none", gated)) for _ in range(3))
            ref = (gated_ref if gated else linear_ref)(x, q, s, None, "silu" if gated else "none")
            assert sqnr(ref.float(), y.float()) > 40, (gated, M)
            # the W8A8 twin against act_quant + the W8A8 GEMM (its own tuned config)
            from fused.kernels.act_quant import act_quant
            from fused.kernels.split_gemm import quant_gemm
            from fused.kernels.w8_gemm import w8_gemm

            act = "silu" if gated else "none"
            xq, xs = act_quant(x, fp8=fmt != "int8")
            want = w8_gemm(xq, q, s, None, act, gated, x_scale=xs, out_dtype=x.dtype)
            assert torch.equal(quant_gemm(x, q, s, None, act, gated), want), (gated, N, K, M)
