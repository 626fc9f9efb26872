"""SASS per loop iteration of the 2:4 decode GEMV (sparse24_gemv) and of the narrow MLP, compiled for sm_90
without a GPU (run without TRITON_INTERPRET): python tests/sparse_sass.py [sparse|narrow|expand]. The instruction
counts and load widths in examples/results/h200/NOTES.md (vsel, relu as max.NaN, the 2:4 expansion) come from it."""
import collections
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
from gemv_sass import hist  # noqa: E402
from sm90_compile import compile_sm90  # noqa: E402
from fused.kernels import narrow_mlp as nm  # noqa: E402
from fused.kernels import sparse24_gemv as sg  # noqa: E402


def compile_sparse(cfg, gated, N, K, M=1, value="int8", tiled=0):
    split, bk = cfg["SPLIT_K"], cfg["BLOCK_K"]
    kper = -(-(-(-K // split)) // bk) * bk
    pointers = dict(x_ptr="*bf16", v_ptr="*i8" if value == "int8" else "*u8", m_ptr="*u8", ws_ptr="*fp32",
                    b_ptr="*fp32", y_ptr="*bf16", part_ptr="*fp32", count_ptr="*i32")
    ints = dict(M=M, N=N, K=K, K_PER_SPLIT=kper, stride_xm=K, stride_xk=1, stride_vn=K // 2, stride_mn=K // 8,
                stride_ym=N, stride_yn=1)
    consts = dict(VALUE=value, MODE=cfg["MODE"], DOT="native", GATED=gated, HAS_SCALE=True, HAS_BIAS=False,
                  ACT="silu" if gated else "none", SPLIT_K=split, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                  BLOCK_K=bk, EVEN_K=K % bk == 0, TILED=tiled, STAGES=cfg.get("STAGES", 1), X_F16=False,
                  ASM=True)
    return compile_sm90(sg._sparse24_gemv_kernel, pointers, ints, consts, cfg["num_warps"])["kernel"]


def compile_narrow(bm, warps, stages, prefetch, width=64, layers=5):
    D = [width] * (layers + 1) + [16] * (8 - layers)
    A = ["relu"] * (layers - 1) + ["none"] * (9 - layers)
    consts = dict(K_IN=width, N_OUT=width, NUM_LAYERS=layers, D_OUT=width, SCALED=False, DOT="native",
                  BLOCK_M=bm, PREFETCH=prefetch, HOIST=False, **{f"D{i}": D[i] for i in range(9)},
                  **{f"A{i}": A[i] for i in range(8)})
    pointers = dict(x_ptr="*fp16", w_ptr="*fp16", p_ptr="*fp32", y_ptr="*fp16")
    ints = dict(M=1 << 21, stride_xm=width, stride_xk=1, stride_ym=width, stride_yn=1)
    return compile_sm90(nm._narrow_mlp_kernel, pointers, ints, consts, warps, stages)["kernel"]


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "sparse,narrow"
    if "sparse" in what:  # the Llama-3-8B shapes: gate/up stacked [2·14336, 4096], down [4096, 14336]
        for gated, N, K in ((True, 14336, 4096), (False, 4096, 14336)):
            for M in (1, 2, 4, 8, 16):
                for cfg in sg._candidates(M, N, K, gated):
                    if cfg["MODE"] == "dot":
                        continue
                    k = compile_sparse(cfg, gated, N, K, M)
                    loads = collections.Counter(re.findall(r"\bld\.global(?:\.[\w]+)*", k.asm["ptx"]))
                    spills = "ld.local" in k.asm["ptx"] or "st.local" in k.asm["ptx"]
                    print("gate_up" if gated else "down", "M", M, cfg, dict(loads), "SPILLS" if spills else "")
                    hist(k, "   ")
    if "expand" in what:  # the dense-tile expansion: 'dot' decode tiles at M=16 and the tiled kernel's 64x64x128
        from fused.kernels import sparse24_linear as sl
        for value in ("int8", "fp8"):
            for bn in (64, 32):
                cfg = dict(MODE="dot", BLOCK_M=16, BLOCK_N=bn, BLOCK_K=128, num_warps=4, SPLIT_K=1)
                hist(compile_sparse(cfg, True, 14336, 4096, 16, value), f"dot {value} gate_up 16x{bn}x128")
            for gated, N, K in ((True, 14336, 4096), (False, 4096, 14336)):
                pointers = dict(x_ptr="*bf16", xs_ptr="*fp32", v_ptr="*i8" if value == "int8" else "*u8",
                                m_ptr="*u8", ws_ptr="*fp32", b_ptr="*fp32", y_ptr="*bf16")
                ints = dict(M=128, N=N, K=K, stride_xm=K, stride_xk=1, stride_vn=K // 2, stride_mn=K // 8,
                            stride_ym=N, stride_yn=1)
                consts = dict(VALUE=value, DOT="native", GATED=gated, HAS_SCALE=True, HAS_BIAS=False,
                              ACT="silu" if gated else "none", BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, GROUP_M=8)
                k = compile_sm90(sl._sparse24_kernel, pointers, ints, consts, 4)["kernel"]
                hist(k, f"sparse24_linear {value} {'gated' if gated else 'linear'} 64x64x128")
    if "narrow" in what:  # width 64, 5 layers, ReLU, fp16: (BLOCK_M, warps, stages, prefetch)
        for bm, w, s, f in ((128, 4, 1, False), (128, 4, 1, True), (256, 8, 1, True)):
            k = compile_narrow(bm, w, s, f)
            print("narrow", (bm, w, s, f), "smem", k.metadata.shared)
            hist(k, "   ")
