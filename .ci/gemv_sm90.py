"""Compile w8a16_gemv variants for sm_90 without a GPU and count their global load widths (16-byte
v4 loads expected for the weight tiles). Run without TRITON_INTERPRET: python .ci/gemv_sm90.py"""
import re, sys, collections
import os
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT); sys.path.insert(0, os.path.join(ROOT, "tests"))
from sm90_compile import compile_sm90
from fused.kernels import w8a16_gemv as g

def run(label, gated, M, N, K, cfg, fp8=False):
    w = "*u8" if fp8 else "*i8"
    pointers = dict(x_ptr="*bf16", w_ptr=w, ws_ptr="*fp32", b_ptr="*fp32", wu_ptr=w, su_ptr="*fp32", bu_ptr="*fp32",
                    y_ptr="*bf16", part_ptr="*fp32", count_ptr="*i32")
    split = cfg["SPLIT_K"]
    kper = -(-(-(-K // split)) // cfg["BLOCK_K"]) * cfg["BLOCK_K"]
    ints = dict(M=M, N=N, K=K, K_PER_SPLIT=kper, u_row0=N if gated else 0, TILES=-(-N // cfg["BLOCK_N"]),
                stride_xm=K, stride_xk=1, stride_wn=K, stride_wk=1, stride_un=K, stride_uk=1, stride_ym=N, stride_yn=1)
    consts = dict(GATED=gated, W_FP8=fp8, HAS_BIAS=False, ACT="silu" if gated else "none", SPLIT_K=split,
                  BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], DOT="native",
                  CVT=cfg.get("CVT", "magic"), JOINT=cfg.get("JOINT", False), PREFETCH=cfg.get("PREFETCH", False),
                  PERSISTENT=cfg.get("PERSISTENT", 0) > 0, STAGES=cfg.get("STAGES", 1))
    r = compile_sm90(g._w8a16_gemv_kernel, pointers, ints, consts, cfg["num_warps"])
    loads = collections.Counter(re.findall(r"\bld\.global(?:\.[\w]+)*", r["ptx"]))
    print(f"{label:40s}", dict(loads))

b1 = dict(BLOCK_M=1, BLOCK_N=32, BLOCK_K=512, SPLIT_K=1, num_warps=4, CVT="magic")
b16 = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=256, SPLIT_K=1, num_warps=4, CVT="native")
for name, cfg in (("bm1 plain", b1), ("bm1 joint", dict(b1, JOINT=True)), ("bm1 prefetch", dict(b1, PREFETCH=True)),
                  ("bm1 persistent", dict(b1, PERSISTENT=2)), ("bm16 plain", b16), ("bm16 joint", dict(b16, JOINT=True)),
                  ("bm16 persistent", dict(b16, PERSISTENT=2))):
    run("gate_up " + name, True, 1 if cfg["BLOCK_M"] == 1 else 16, 14336, 4096, cfg)
d1 = dict(BLOCK_M=1, BLOCK_N=64, BLOCK_K=512, SPLIT_K=8, num_warps=4, CVT="magic")
run("down bm1 split8", False, 1, 4096, 14336, d1)
run("down bm1 split8 prefetch", False, 1, 4096, 14336, dict(d1, PREFETCH=True))
run("down bm1 split8 persistent", False, 1, 4096, 14336, dict(d1, PERSISTENT=2))
