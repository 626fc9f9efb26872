"""The decode chain (fused.kernels.decode_chain: both layers' GEMV tiles as one chain of work items in one
launch) against the two-launch path with the same tiles (bit for bit) and against the composed reference.

On the CPU the kernel runs in Triton's interpreter, which runs programs one after another: there the first
program takes every ticket. The `cuda` tests run programs concurrently (the ready flags and the ticket
order really matter there) on Llama-sized blocks.
"""
import pytest
import torch

from fused.kernels import decode_chain as dc
from fused.kernels.w8a16_gemv import w8a16_gemv
from fused.reference import mlp_block_ref
from lowbit import quantize_weight, sqnr

ACTS = ["none", "relu", "gelu", "gelu_tanh", "silu"]


def _weights(K, H, D, gated, fmt, bias, device="cpu"):
    q1, s1 = quantize_weight(torch.randn((2 if gated else 1) * H, K, device=device) * K ** -0.5, fmt)
    q2, s2 = quantize_weight(torch.randn(D, H, device=device) * H ** -0.5, fmt)
    b1 = torch.randn(q1.shape[0], device=device, dtype=torch.bfloat16) if bias else None
    b2 = torch.randn(D, device=device) if bias else None
    return q1, s1, b1, q2, s2, b2


def _x(M, K, view, device="cpu", dtype=torch.bfloat16):
    if view == "transposed":
        return torch.randn(K, M, device=device, dtype=dtype).t()
    if view == "3d_offset":
        return torch.randn(1, M + 1, K + 3, device=device, dtype=dtype)[0, 1:, 3:]
    return torch.randn(M, K, device=device, dtype=dtype)


def two_launches(x, q1, s1, b1, q2, s2, b2, act, gated, cfg):
    """The two-launch path with the chain's tiles: w8a16_gemv (first layer) then w8a16_gemv (down)."""
    K, H = x.shape[1], q2.shape[1]
    g, d = dc.gemv_configs(cfg, K, H)
    h = w8a16_gemv(x, q1, s1, b1, act, gated, config=g)
    # the GEMV's own split sizing (cdiv(K, split) rounded to BK) must give the chain's chunk size
    _, _, kps2, split2 = dc.split_sizes(cfg, K, H)
    assert dc.cdiv(dc.cdiv(H, split2), cfg["BK2"]) * cfg["BK2"] == kps2 or split2 == 1
    return w8a16_gemv(h, q2, s2, b2, "none", False, config=d)


def _workspace_zero(device):
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device(device)
    return int(dc._sync[dev].abs().sum()) == 0


@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("gated", [True, False])
def test_chain_equals_two_launches_interpreted(gated, act, fmt):
    M, K, H, D = (1, 40, 72, 24) if gated else (3, 33, 50, 20)
    w = _weights(K, H, D, gated, fmt, bias=not gated)
    for view in ("contiguous", "transposed"):
        x = _x(M, K, view)
        cfg = dc.interpret_config(M)
        out = torch.full((M, D), float("nan"), dtype=x.dtype)
        y = dc.decode_chain(x, *w, act, gated, cfg, out=out)
        assert y is out and torch.equal(y, two_launches(x, *w, act, gated, cfg))
        assert sqnr(mlp_block_ref(x, *w, act, gated), y) > 40  # bf16: the interpreter truncates h and y
        assert _workspace_zero("cpu")


@pytest.mark.parametrize("M", [1, 3, 16])
def test_chain_shapes_views_and_splits(M):
    """Odd K, H, D (not multiples of 16), a 3-D offset view, first-layer split-K, more chunks than tiles
    per chunk, tiles past H and D, and an output with strides; a persistent grid and one program per item."""
    K, H, D = 37, 90, 45
    w = _weights(K, H, D, True, "int8", bias=True)
    one_per_item = {k: v for k, v in dc.interpret_config(M).items() if k != "programs"}  # LOOP=False
    for cfg in (dc.interpret_config(M), dict(dc.interpret_config(M), SPLIT1=1, SPLIT2=3, BK2=16, programs=1),
                dict(dc.interpret_config(M), SPLIT1=3, BK1=16, SPLIT2=1, programs=5), one_per_item):
        x = _x(M, K, "3d_offset")
        y = dc.decode_chain(x, *w, "silu", True, cfg)
        assert torch.equal(y, two_launches(x, *w, "silu", True, cfg)), cfg
        big = torch.full((M, 2 * D), float("nan"), dtype=x.dtype)
        dc.decode_chain(x, *w, "silu", True, cfg, out=big[:, ::2])
        assert torch.equal(big[:, ::2], y) and torch.isnan(big[:, 1::2]).all()
        assert _workspace_zero("cpu")


def test_chain_errors_and_empty():
    w = _weights(32, 48, 16, True, "int8", bias=False)
    with pytest.raises(ValueError, match="rows < M"):
        dc.decode_chain(torch.randn(3, 32), *w, "silu", True, dict(dc.interpret_config(1)))
    with pytest.raises(ValueError, match="gated"):
        dc.decode_chain(torch.randn(1, 32), *w, "silu", False, dc.interpret_config(1))
    assert dc.decode_chain(torch.randn(0, 32), *w, "silu", True, dc.interpret_config(1)).shape == (0, 16)


def test_decode_block_takes_chain_configs():
    from fused.kernels.decode_block import decode_block

    w = _weights(40, 72, 24, True, "float8_e4m3", bias=False)
    x = torch.randn(1, 40, dtype=torch.bfloat16)
    cfg = dc.interpret_config(1)
    assert torch.equal(decode_block(x, *w, "silu", True, config=cfg), two_launches(x, *w, "silu", True, cfg))
    with pytest.raises(ValueError, match="SmoothQuant"):
        decode_block(x, *w, "silu", True, smooth_x=torch.ones(40), config=cfg)


def test_candidates_tile_the_llama_block():
    for M in (1, 16):
        cands = dc.candidates(M, True)
        assert cands and all(c["CHAIN"] and c["BM1"] >= M and c["BM2"] >= M for c in cands)
        for c in cands:  # a chunk holds whole first-layer tiles: the ready counts are exact
            kps2 = dc.split_sizes(c, 4096, 14336)[2]
            assert kps2 % c["BN1"] == 0 and kps2 % c["BK2"] == 0


def test_chain_compiles_for_sm90():
    """ptxas (from the Triton wheel) compiles the Llama candidates for the H200 without a GPU; no data atomics
    (only the ticket, ready and split-K counters)."""
    from sm90_compile import memory_ops_in_subprocess

    ops = memory_ops_in_subprocess("decode_chain_configs")
    if ops is None:
        pytest.skip("no ptxas in this Triton install")
    assert len(ops) == 4
    for label, names in ops.items():
        assert not any(n.endswith("f32") for n in names if n.startswith(("red.", "atom."))), (label, names)
        assert "red.global.gpu.release.add.u32" in names and "ld.global.gpu.acquire.b32" in names, (label, names)


# ------------------------------------------------------------------------------------------ on the GPU

@pytest.mark.cuda
@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
@pytest.mark.parametrize("M", [1, 3, 16])
def test_chain_cuda(M, fmt):
    """Every candidate on the Llama block: bit-equal to the two launches with its tiles, bit-stable over
    repeated calls and CUDA-graph replays, workspace left at zero. Plain fc1-gelu-fc2 with biases too."""
    torch.manual_seed(M)
    K, H, D = 4096, 14336, 4096
    w = _weights(K, H, D, True, fmt, bias=False, device="cuda")
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    ref = mlp_block_ref(x, *w, "silu", True)
    cands = dc.candidates(M, True)
    for cfg in cands:
        y = dc.decode_chain(x, *w, "silu", True, cfg)
        assert torch.equal(y, two_launches(x, *w, "silu", True, cfg)), cfg
        assert sqnr(ref, y) > 45, cfg
        assert all(torch.equal(y, dc.decode_chain(x, *w, "silu", True, cfg)) for _ in range(3)), cfg
        torch.cuda.synchronize()
        assert _workspace_zero("cuda"), cfg
    cfg = cands[0]
    out = torch.empty(M, D, device="cuda", dtype=torch.bfloat16)
    dc.decode_chain(x, *w, "silu", True, cfg, out=out)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dc.decode_chain(x, *w, "silu", True, cfg, out=out)
    want = out.clone()
    for _ in range(5):
        out.fill_(float("nan"))
        g.replay()
        assert torch.equal(out, want)
    wp = _weights(2048, 8192, 2048, False, fmt, bias=True, device="cuda")
    xp = torch.randn(M, 2048, device="cuda", dtype=torch.bfloat16)
    for cfg in cands[:3]:
        y = dc.decode_chain(xp, *wp, "gelu_tanh", False, cfg)
        assert torch.equal(y, two_launches(xp, *wp, "gelu_tanh", False, cfg)), cfg


@pytest.mark.cuda
@pytest.mark.parametrize("M", [1, 16])
def test_chain_timing_cuda(M, capsys, monkeypatch):
    """GPU time (CUDA graph replay, median) of each chain candidate vs the two tuned GEMV launches."""
    from triton.testing import do_bench

    from fused import dispatch
    from fused.kernels import tuning

    monkeypatch.setenv("FUSED_TUNE", "1")  # the tests' default (0) takes each kernel's first candidate
    monkeypatch.setattr(tuning, "_cache", {})

    K, H, D = 4096, 14336, 4096
    for fmt in ("int8", "float8_e4m3"):
        q1, s1, b1, q2, s2, b2 = _weights(K, H, D, True, fmt, bias=False, device="cuda")
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)

        def graph_us(fn):
            return do_bench(dispatch._graph_replay(fn).replay, warmup=25, rep=200, return_mode="median") * 1e3

        two = graph_us(lambda: dispatch.linear(dispatch.gated(x, q1, s1, b1, "silu"), q2, s2, b2))
        cands = dc.candidates(M, True)
        rows = sorted((graph_us(lambda: dc.decode_chain(x, q1, s1, b1, q2, s2, b2, "silu", True, c)), i)
                      for i, c in enumerate(cands))
        rows = [(t, str(cands[i]), cands[i]) for t, i in rows]
        # the fair comparison: the two GEMV launches with the best chain candidate's own tiles
        same = graph_us(lambda: two_launches(x, q1, s1, b1, q2, s2, b2, "silu", True, rows[0][2]))
        with capsys.disabled():
            print(f"\nchain {fmt} M={M}: two launches {two:.1f} µs (dispatch, tuned picks), {same:.1f} with the "
                  f"chain's best tiles; chain best {rows[0][0]:.1f} {rows[0][1]}")
            for t, c, _ in rows[1:]:
                print(f"   {t:.1f} {c}")
