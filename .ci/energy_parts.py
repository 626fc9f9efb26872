"""Energy per kernel of a block's parts (thirty-fourth session). `.ci/energy.py` showed every 8-bit Llama block from
M=1024 at the 700 W cap (fp8 W8A8 237.5 mJ at M=1024 and 1719.4 at 8192 against 199.5 / 1531.5 for cuBLAS's two fp8
GEMMs alone; int8 W8A16 426.5 against 376.6 for cuBLAS's bf16 GEMMs): which parts spend the difference? Each part is
captured as its own CUDA graph on the block's real operands and timed sustained as energy.py does (mJ and µs per
replay, W, SM clock).
usage: python .ci/energy_parts.py [M,..] [fp8a8,int8a16,fp8a8cfg,int8a8cfg]; on the CPU: a smoke run of the part
list (no NVML)."""
import copy
import json
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), ".ci"))
import fused  # noqa: E402
from fused import dispatch  # noqa: E402
from fused.bench import OURS, make_block  # noqa: E402


def parts_fp8a8(blk, M, d, dev):
    """The fp8 W8A8 block's pieces: both routes of its first layer (cuBLAS + scale_epilogue + act_quant(h), Triton
    gated + act_quant(h)) and both of its second (Triton w8_gemm, cuBLAS rowwise)."""
    from fused.kernels.act_quant import act_quant
    from fused.kernels.scale_epilogue import scale_epilogue
    from fused.kernels.w8_gemm import w8_gemm

    w1, s1, w2, s2 = blk.gate_up.qweight, blk.gate_up.scale, blk.down.qweight, blk.down.scale
    x = torch.randn(M, d, device=dev, dtype=torch.bfloat16)
    xq, xs = act_quant(x, fp8=True)
    y = torch._scaled_mm(xq, w1.t(), xs[:, None], s1[None, :], out_dtype=torch.bfloat16, use_fast_accum=True) \
        if dev == "cuda" else (xq.float() * xs[:, None]) @ (w1.float() * s1[:, None]).t()
    y = y.to(torch.bfloat16)
    h = scale_epilogue(y, None, None, None, "silu", True, torch.bfloat16, m=M)
    hq, hs = act_quant(h, fp8=True)
    out = {
        "act_quant(x)": lambda: act_quant(x, fp8=True),
        "triton gated w8_gemm (+epilogue, h bf16)": lambda: w8_gemm(xq, w1, s1, None, "silu", True, x_scale=xs,
                                                                     out_dtype=torch.bfloat16),
        "scale_epilogue (y -> h bf16)": lambda: scale_epilogue(y, None, None, None, "silu", True, torch.bfloat16, m=M),
        "act_quant(h)": lambda: act_quant(h, fp8=True),
        "triton down w8_gemm": lambda: w8_gemm(hq, w2, s2, None, "none", False, x_scale=hs, out_dtype=torch.bfloat16),
    }
    if dev == "cuda":
        out["cublas gated rowwise (y bf16)"] = lambda: torch._scaled_mm(
            xq, w1.t(), xs[:, None], s1[None, :], out_dtype=torch.bfloat16, use_fast_accum=True)
        out["cublas down rowwise"] = lambda: torch._scaled_mm(
            hq, w2.t(), hs[:, None], s2[None, :], out_dtype=torch.bfloat16, use_fast_accum=True)
        out["copy of y (read + write, bytes of y)"] = lambda: y.clone()
    return x, out


def parts_int8a16(blk, M, d, dev):
    """The int8 W8A16 block's two Gluon launches (where they run) and cuBLAS's bf16 GEMMs on the dequantized
    weights."""
    w1, s1, w2, s2 = blk.gate_up.qweight, blk.gate_up.scale, blk.down.qweight, blk.down.scale
    x = torch.randn(M, d, device=dev, dtype=torch.bfloat16)
    h = torch.randn(M, w2.shape[1], device=dev, dtype=torch.bfloat16)
    out = {}
    if dev == "cuda" and dispatch._ws_supports(x, w1, gated=True) is None:
        out["gluon gated w8a16_ws"] = lambda: dispatch._w8a16_ws(x, w1, s1, None, "silu", True)
        out["gluon down w8a16_ws"] = lambda: dispatch._w8a16_ws(h, w2, s2, None, "none", False)
    b1 = (w1.float() * s1[:, None]).to(torch.bfloat16)
    b2 = (w2.float() * s2[:, None]).to(torch.bfloat16)
    out["cublas bf16 gated GEMM (y)"] = lambda: x @ b1.t()
    out["cublas bf16 down GEMM"] = lambda: h @ b2.t()
    return x, out


def configs_fp8a8(blk, M, d, dev):
    """The gated fp8 W8A8 GEMM (x quantized, silu·mul epilogue, h bf16) once per tuner candidate of w8_gemm
    (pointer tiles, and the persistent TMA tiles where FUSED_W8_TMA=1), beside cuBLAS's rowwise GEMM of the same
    product (bf16 y of twice h's width, no epilogue): which tile spends the fewest joules at the cap?"""
    from fused.kernels import w8_gemm as wg
    from fused.kernels import w8a8_tma
    from fused.kernels.act_quant import act_quant

    w1, s1 = blk.gate_up.qweight, blk.gate_up.scale
    H, K = w1.shape[0] // 2, w1.shape[1]
    x = torch.randn(M, d, device=dev, dtype=torch.bfloat16)
    xq, xs = act_quant(x, fp8=True)
    cands = wg._candidates(M, H, K, True, True) + w8a8_tma.candidates(M, H, K, True)
    if os.environ.get("ENERGY_CANDS", "1") == "0":  # the Triton candidates left out (measured before)
        cands = []
    if dev != "cuda":
        cands = [dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=4, num_stages=1, num_warps=4, SPLIT_K=1)]
    out = {}
    for c in cands:
        name = ("tma " if c.get("TMA") else "") + "{BLOCK_M}x{BLOCK_N}x{BLOCK_K} s{num_stages} w{num_warps}".format(
            **c) + (" tmaY" if c.get("TMA_Y") else "") + (f" sk{c['SPLIT_K']}" if c.get("SPLIT_K", 1) > 1 else "")
        out[name] = lambda c=c: wg.w8_gemm(xq, w1, s1, None, "silu", True, x_scale=xs, out_dtype=torch.bfloat16,
                                            config=c)
    if dev == "cuda":
        from fused.kernels.w8a8_ws import w8a8_ws

        # (BLOCK_K=64, STAGES=10: 1342 mJ at 8192, thirty-fourth); ENERGY_WS_CFGS: a JSON list of configs instead
        for c in json.loads(os.environ.get("ENERGY_WS_CFGS", '[{}, {"STAGES": 6}, {"STAGES": 5}]')):
            out[f"gluon w8a8_ws {c}"] = lambda c=c: w8a8_ws(xq, xs, w1, s1, None, "silu", True, config=c)
        # the same product as one plain GEMM ([2H, K], y of 2H columns): is the gap the gated form's or the shape's?
        out["gluon w8a8_ws plain on gate|up"] = lambda: w8a8_ws(xq, xs, w1, s1, None, "none", False)
        out["triton w8_gemm plain on gate|up"] = lambda: wg.w8_gemm(xq, w1, s1, None, "none", False, x_scale=xs,
                                                                    out_dtype=torch.bfloat16)
        out["cublas gated rowwise (y bf16)"] = lambda: torch._scaled_mm(
            xq, w1.t(), xs[:, None], s1[None, :], out_dtype=torch.bfloat16, use_fast_accum=True)
        w2, s2 = blk.down.qweight, blk.down.scale
        h = torch.randn(M, w2.shape[1], device=dev, dtype=torch.bfloat16)
        hq, hs = act_quant(h, fp8=True)
        out["triton down w8_gemm (tuner pick)"] = lambda: wg.w8_gemm(hq, w2, s2, None, "none", False, x_scale=hs,
                                                                      out_dtype=torch.bfloat16)
        for c in json.loads(os.environ.get("ENERGY_WS_DOWN_CFGS", '[{}, {"BLOCK_K": 64, "STAGES": 10}]')):
            out[f"gluon down w8a8_ws {c}"] = lambda c=c: w8a8_ws(hq, hs, w2, s2, None, "none", False, config=c)
        out["cublas down rowwise"] = lambda: torch._scaled_mm(
            hq, w2.t(), hs[:, None], s2[None, :], out_dtype=torch.bfloat16, use_fast_accum=True)
    return x, out


def configs_int8a8(blk, M, d, dev):
    """The int8 W8A8 block's GEMMs: Triton's tuner pick and the Gluon kernel, gated and down (x and h quantized per
    token), beside torch._int_mm (cuBLAS, int32 out, no epilogue)."""
    from fused.kernels.act_quant import act_quant
    from fused.kernels.w8_gemm import w8_gemm

    w1, s1, w2, s2 = blk.gate_up.qweight, blk.gate_up.scale, blk.down.qweight, blk.down.scale
    x = torch.randn(M, d, device=dev, dtype=torch.bfloat16)
    xq, xs = act_quant(x, fp8=False)
    h = torch.randn(M, w2.shape[1], device=dev, dtype=torch.bfloat16)
    hq, hs = act_quant(h, fp8=False)
    out = {"triton gated w8_gemm (tuner pick)": lambda: w8_gemm(xq, w1, s1, None, "silu", True, x_scale=xs,
                                                                 out_dtype=torch.bfloat16),
           "triton down w8_gemm (tuner pick)": lambda: w8_gemm(hq, w2, s2, None, "none", False, x_scale=hs,
                                                                out_dtype=torch.bfloat16)}
    if dev == "cuda":
        from fused.kernels.w8a8_ws import w8a8_ws

        for c in ({}, dict(STAGES=4)):
            out[f"gluon gated w8a8_ws {c}"] = lambda c=c: w8a8_ws(xq, xs, w1, s1, None, "silu", True, config=c)
            out[f"gluon down w8a8_ws {c}"] = lambda c=c: w8a8_ws(hq, hs, w2, s2, None, "none", False, config=c)
        out["cublas gated _int_mm (int32 y)"] = lambda: torch._int_mm(xq, w1.t())
        out["cublas down _int_mm"] = lambda: torch._int_mm(hq, w2.t())
    return x, out


def main():
    Ms = [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "1024,8192").split(",")]
    kinds = (sys.argv[2] if len(sys.argv) > 2 else "fp8a8,int8a16").split(",")
    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    d, hdim = (4096, 14336) if cuda else (64, 128)
    base = make_block("llama", d, hdim, dev)
    nvml = None
    if cuda:
        from energy import Nvml, measure

        nvml = Nvml()
        print(f"enforced power limit {nvml.limit_w():.0f} W")
    for kind in kinds:
        name, maker = {"fp8a8": ("ours fp8 W8A8", parts_fp8a8), "int8a16": ("ours int8 W8A16", parts_int8a16),
                       "fp8a8cfg": ("ours fp8 W8A8", configs_fp8a8),
                       "int8a8cfg": ("ours int8 W8A8", configs_int8a8)}[kind]
        model = fused.quantize(copy.deepcopy(base), OURS[name](), blocks=True)
        blk = next(m for m in model.modules() if hasattr(m, "gate_up"))
        with torch.no_grad():
            for M in Ms:
                x, parts = maker(blk, M, d, dev)
                if not kind.endswith("cfg"):
                    parts = dict({"whole block": lambda model=model, x=x: model(x)}, **parts)
                for pname, fn in parts.items():
                    for _ in range(3):
                        fn()  # tuning, route timings
                    if not cuda:
                        print(f"{kind} M={M} {pname}: ran")
                        continue
                    g = dispatch._graph_replay(fn)
                    if g is None:
                        print(f"{kind} M={M:5d} {pname:42s}: could not be captured")
                        continue
                    us, mj, w, mhz, why = measure(g.replay, nvml)
                    print(f"{kind} M={M:5d} {pname:42s}: {us:8.1f} µs {mj:8.2f} mJ, {w:4.0f} W, SM {mhz:5.0f} MHz, "
                          f"reasons 0x{why:x}", flush=True)
                    del g
        del model
        if cuda:
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
