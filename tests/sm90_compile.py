"""Compile a Triton kernel for sm_90 on a machine without a GPU (Triton's wheel ships ptxas), specialised
as a real launch would be: integer arguments equal to 1 become constants, pointers and 16-divisible
integers carry the divisibility hint. Catches what the interpreter cannot: code that does not compile
for the GPU. Run in a process WITHOUT TRITON_INTERPRET (the interpreter replaces the jit functions).

    python tests/sm90_compile.py   # the decode block's default configs; prints one line per kernel
"""
from __future__ import annotations

import inspect
import re


def compile_sm90(fn, pointers: dict, ints: dict, constexprs: dict, num_warps: int = 4,
                 num_stages: int | None = None) -> dict:
    """``pointers`` {arg: "*bf16"...}, ``ints`` {arg: value}, ``constexprs`` {arg: value}.
    Returns {"ptx": str, "memory_ops": sorted PTX memory instruction names, "kernel": the CompiledKernel}."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig, attrs, consts = {}, {}, dict(constexprs)
    for p in fn.params:  # constexpr parameters with a default: the default, unless given (as a launch would)
        if p.is_constexpr and p.name not in constexprs and p.default is not inspect.Parameter.empty:
            consts[p.name] = p.default
    for i, name in enumerate(fn.arg_names):
        if name in consts:
            sig[name] = "constexpr"
        elif name in pointers:
            sig[name] = pointers[name]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif ints[name] == 1:
            sig[name], consts[name] = "constexpr", 1
        else:
            sig[name] = "i32"
            if ints[name] % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    options = dict(num_warps=num_warps) if num_stages is None else dict(num_warps=num_warps, num_stages=num_stages)
    kernel = triton.compile(ASTSource(fn, sig, constexprs=consts, attrs=attrs), target=GPUTarget("cuda", 90, 32),
                            options=options)
    ptx = kernel.asm["ptx"]
    return {"ptx": ptx, "memory_ops": sorted(set(re.findall(r"\b(?:red|atom|ld\.global|st\.global)\.[\w.]+", ptx))),
            "kernel": kernel}


def _json_in_subprocess(code: str):
    """The last stdout line of python ``code`` as json, run in a process without TRITON_INTERPRET (a test process
    runs the interpreter) with the repository on the path; None when this Triton has no ptxas."""
    import json
    import os
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(root)
    run = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'tests'); " + code], cwd=root,
                         env=env, capture_output=True, text=True, timeout=600)
    if run.returncode != 0 and "ptxas" in run.stderr and "not found" in run.stderr:
        return None
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def memory_ops_in_subprocess(configs: str):
    """{label: PTX memory ops} for every config of ``configs`` (a function of this file), compiled in a process
    without TRITON_INTERPRET; None when this Triton has no ptxas."""
    return _json_in_subprocess(f"import json; from sm90_compile import compile_sm90, {configs}; "
                               f"print(json.dumps({{c[0]: compile_sm90(*c[1:])['memory_ops'] for c in {configs}()}}))")


def decode_block_configs():
    """(label, kernel, pointers, ints, constexprs, num_warps) for the decode block's default configs on the
    Llama-3-8B block: M = 1 and 16, int8 and fp8, one-launch and deterministic, plus the reduce kernel."""
    from fused.kernels import decode_block as db

    K, H, D = 4096, 14336, 4096
    out = []
    for M in (1, 16):
        cfg = db._candidates(M, K, H, D, True)[0]
        for fp8 in (False, True):
            for det in (False, True):
                w = "*u8" if fp8 else "*i8"
                pointers = dict(x_ptr="*bf16", w1_ptr=w, s1_ptr="*fp32", b1_ptr="*bf16", sx_ptr="*fp32", w2_ptr=w,
                                s2_ptr="*fp32", b2_ptr="*bf16", sh_ptr="*fp32", y_ptr="*bf16", ws_ptr="*fp32",
                                count_ptr="*i32")
                ints = dict(M=M, K=K, H=H, D=D, stride_xm=K, stride_xk=1, stride_w1r=K, stride_w1k=1,
                            stride_w2d=H, stride_w2h=1, stride_ym=D, stride_yd=1)
                consts = dict(GATED=True, ACT="silu", HAS_B1=True, HAS_B2=True, SMOOTH_X=True, SMOOTH_H=True,
                              W1_FP8=fp8, W2_FP8=fp8, DETERMINISTIC=det, BLOCK_M=cfg["BLOCK_M"],
                              BLOCK_H=cfg["BLOCK_H"], BLOCK_K=cfg["BLOCK_K"], BLOCK_D=cfg["BLOCK_D"], DOT="native",
                              CVT=cfg["CVT"], SPLIT=False, QS=32639.0, MIN_S=1e-12)
                label = f"decode_block M={M} {'fp8' if fp8 else 'int8'} {'deterministic' if det else 'atomic'}"
                out.append((label, db._decode_block_kernel, pointers, ints, consts, cfg["num_warps"]))
                if not fp8 and not det:  # the int8-MMA (split activations) variant
                    sc = db._candidates(M, K, H, D, True, split_ok=True)[-4]
                    consts = dict(consts, SPLIT=True, BLOCK_M=16, BLOCK_H=sc["BLOCK_H"], BLOCK_K=sc["BLOCK_K"],
                                  BLOCK_D=sc["BLOCK_D"])
                    out.append((label + " split", db._decode_block_kernel, pointers, ints, consts, sc["num_warps"]))
        out.append((f"decode_block_reduce M={M}", db._decode_block_reduce_kernel,
                    dict(part_ptr="*fp32", s2_ptr="*fp32", b2_ptr="*bf16", y_ptr="*bf16"),
                    dict(M=M, D=D, P=H // cfg["BLOCK_H"], stride_ym=D, stride_yd=1),
                    dict(HAS_B2=True, BLOCK_M=cfg["BLOCK_M"], BLOCK_D=cfg["BLOCK_D"]), 4))
    return out


if __name__ == "__main__":
    for label, fn, pointers, ints, consts, warps in decode_block_configs():
        print(label, "|", " ".join(compile_sm90(fn, pointers, ints, consts, warps)["memory_ops"]))


def decode_chain_configs():
    """(label, kernel, pointers, ints, constexprs, num_warps) for the decode chain's first candidate at M = 1
    (int8) and M = 16 (fp8) on the Llama-3-8B block, as a persistent loop and one program per item."""
    from fused.kernels import decode_chain as dc

    K, H, D = 4096, 14336, 4096
    out = []
    for M, fp8 in ((1, False), (16, True)):
        c = dc.candidates(M, True)[0]
        w = "*u8" if fp8 else "*i8"
        pointers = dict(x_ptr="*bf16", w1_ptr=w, s1_ptr="*fp32", b1_ptr="*bf16", w2_ptr=w, s2_ptr="*fp32",
                        b2_ptr="*bf16", h_ptr="*bf16", y_ptr="*bf16", part_ptr="*fp32", count_ptr="*i32",
                        sync_ptr="*i32")
        kps1, _, kps2, split2 = dc.split_sizes(c, K, H)
        ints = dict(M=M, K=K, H=H, D=D, KPS1=kps1, KPS2=kps2, PART2=0, stride_xm=K, stride_xk=1, stride_w1r=K,
                    stride_w1k=1, stride_w2d=H, stride_w2h=1, stride_ym=D, stride_yd=1)
        consts = dict(GATED=True, ACT="silu", HAS_B1=True, HAS_B2=True, W1_FP8=fp8, W2_FP8=fp8, DOT="native",
                      CVT=c["CVT"], BM1=c["BM1"], BN1=c["BN1"], BK1=c["BK1"], SPLIT1=c["SPLIT1"], JOINT=False,
                      BM2=c["BM2"], BN2=c["BN2"], BK2=c["BK2"], SPLIT2=split2, CHUNKS_P2=8, PHASES=3)
        for loop in (True, False):  # a persistent grid, one program per item
            out.append((f"M={M} {'fp8' if fp8 else 'int8'} {'loop' if loop else 'one item'}", dc._decode_chain_kernel,
                        pointers, ints, dict(consts, LOOP=loop), c["num_warps"]))
    return out


def sparse24_mma_configs():
    """(label, kernel, pointers, ints, constexprs, num_warps) for sparse24_mma's default config on the Llama-3-8B
    block's gate/up (M = 1) and down (M = 16) shapes, int8 and e4m3, two x planes."""
    from fused.kernels import sparse24_mma as sm

    out = []
    for value, ptr in (("int8", "*i8"), ("fp8", "*u8")):
        for N, K, gated, M in ((14336, 4096, True, 1), (4096, 14336, False, 16)):
            c = sm._candidates(M, N, K, gated)[0]
            pointers = dict(xq_ptr=ptr, xs_ptr="*fp32", v_ptr=ptr, m_ptr="*u8", ws_ptr="*fp32", b_ptr="*bf16",
                            y_ptr="*bf16", part_ptr="*fp32", count_ptr="*i32", x_ptr=ptr)
            ints = dict(M=M, N=N, K=K, K_PER_SPLIT=K // c["SPLIT_K"], stride_xp=M * K, stride_xm=K, stride_vn=K // 2,
                        stride_ym=N, stride_yn=1, stride_x0=0, stride_x1=0)
            consts = dict(VALUE=value, PLANES=2, NT=1 if M <= 8 else 2, GATED=gated, HAS_BIAS=True,
                          ACT="silu" if gated else "none", SPLIT_K=c["SPLIT_K"], W=c["W"], U=c["U"], EVEN=True,
                          FENCE=c["FENCE"], ASM=True, PDL=gated, PAIRS=M <= 4)  # the route's M=1 gate/up form
            out.append((f"sparse24_mma {value} M={M} {'gated' if gated else 'linear'}", sm._sparse24_mma_kernel,
                        pointers, ints, consts, c["num_warps"]))
    # SPLIT_X (sparse24_mma_x: the planes made by each program from the 16-bit x)
    from lowbit.quant import MIN_SCALE, SPLIT_QMAX
    c = sm._candidates(1, 14336, 4096, True)[0]
    pointers = dict(xq_ptr="*i8", xs_ptr="*fp32", v_ptr="*i8", m_ptr="*u8", ws_ptr="*fp32", b_ptr="*bf16",
                    y_ptr="*bf16", part_ptr="*fp32", count_ptr="*i32", x_ptr="*bf16")
    ints = dict(M=3, N=14336, K=4096, K_PER_SPLIT=4096 // c["SPLIT_K"], stride_xp=3 * 4096 // c["SPLIT_K"],
                stride_xm=4096 // c["SPLIT_K"], stride_vn=2048, stride_ym=14336, stride_yn=1, stride_x0=4096,
                stride_x1=1)
    consts = dict(VALUE="int8", PLANES=2, NT=1, GATED=True, HAS_BIAS=False, ACT="silu", SPLIT_K=c["SPLIT_K"], W=c["W"],
                  U=c["U"], EVEN=True, FENCE=c["FENCE"], ASM=True, SPLIT_X=True, QMAX=float(SPLIT_QMAX),
                  MIN_S=MIN_SCALE)
    out.append(("sparse24_mma_x int8 M=3 gated", sm._sparse24_mma_kernel, pointers, ints, consts, c["num_warps"]))
    # STAGES: the weights through shared memory by Triton's pipeliner (cp.async): still no layout conversion
    pointers = dict(pointers, x_ptr="*i8")
    ints = dict(M=1, N=14336, K=4096, K_PER_SPLIT=1024, stride_xp=4096, stride_xm=4096, stride_vn=2048,
                stride_ym=14336, stride_yn=1, stride_x0=0, stride_x1=0)
    consts = dict(VALUE="int8", PLANES=2, NT=1, GATED=True, HAS_BIAS=False, ACT="silu", SPLIT_K=4, W=4, U=1,
                  EVEN=True, ASM=True, PDL=True, PAIRS=True, STAGES=4)
    out.append(("sparse24_mma int8 M=1 gated stages", sm._sparse24_mma_kernel, pointers, ints, consts, 4))
    return out


def w8_mma_facts():
    """{label: [mma.sync m16n8k32 instructions in the PTX, layout conversions in the TTGIR]} for w8_mma's first
    candidates on the Llama-3-8B gate/up (two planes, M=1) and down (one plane, M=8) shapes."""
    from fused.kernels import w8_mma as wm

    out = {}
    for N, K, gated, M, P, value in ((14336, 4096, True, 1, 2, "int8"), (4096, 14336, False, 8, 1, "int8"),
                                     (14336, 4096, True, 1, 2, "fp8"), (14336, 4096, True, 16, 2, "int8")):
        for c in wm._candidates(N, K, gated)[:2]:
            ptr = "*i8" if value == "int8" else "*u8"
            pointers = dict(xq_ptr=ptr, xs_ptr="*fp32", w_ptr=ptr, ws_ptr="*fp32", b_ptr="*bf16", y_ptr="*bf16",
                            part_ptr="*fp32", count_ptr="*i32")
            ints = dict(M=M, N=N, K=K, K_PER_SPLIT=K // c["SPLIT_K"], stride_xp=M * K, stride_xm=K, stride_wn=K,
                        stride_ym=N, stride_yn=1)
            consts = dict(PLANES=P, NT=1 if M <= 8 else 2, PAIRS=P == 2 and M <= 4, GATED=gated, HAS_BIAS=True,
                          ACT="silu" if gated else "none",
                          SPLIT_K=c["SPLIT_K"], W=c["W"], STAGES=c["STAGES"], ASM=True, PDL=gated, VALUE=value)
            r = compile_sm90(wm._w8_mma_kernel, pointers, ints, consts, c["num_warps"])
            out[f"w8_mma {value} M={M} {'gated' if gated else 'linear'} {c}"] = [
                r["ptx"].count("mma.sync.aligned.m16n8k32"), r["kernel"].asm["ttgir"].count("convert_layout")]
    return out


def mma_facts(configs: str = "sparse24_mma_configs"):
    """{label: [mma.sp instructions in the PTX, layout conversions in the TTGIR, 16-byte vector loads]} (run in a
    process without TRITON_INTERPRET). sparse24_mma's lanes are the physical threads: a layout conversion would move
    a value computed for one lane into another, so there must be none."""
    out = {}
    for label, *c in globals()[configs]():
        r = compile_sm90(*c)
        ttgir = r["kernel"].asm["ttgir"]
        out[label] = [r["ptx"].count("mma.sp"), ttgir.count("convert_layout"),
                      len(re.findall(r"ld\.global[\w.:]*\.v4\.b32", r["ptx"]))]
    return out


def facts_in_subprocess(func: str):
    """json of ``func``() (a facts function here) compiled in a process without TRITON_INTERPRET, for a test; skips
    the test when this Triton has no ptxas."""
    import pytest

    out = _json_in_subprocess(f"import json; from sm90_compile import {func}; print(json.dumps({func}()))")
    if out is None:
        pytest.skip("this Triton has no ptxas")
    return out
