"""SASS size and registers of w8_gemm variants (and of kernels built on its tile), compiled for sm_90 without a GPU
(run without TRITON_INTERPRET): python tests/w8_gemm_sass.py. A refactor of the tile must leave these unchanged."""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
import triton  # noqa: E402
from triton.tools.disasm import get_sass  # noqa: E402

from sm90_compile import compile_sm90  # noqa: E402
from fused.kernels import w8_gemm as wg  # noqa: E402

# (label, fp8, A8, X_LO, STACK, QX, SPLIT_K, BM, BN, BK, stages, warps, gated, N, K)
VARIANTS = [
    ("A8 int8 gate/up M=128", False, True, False, False, False, 1, 128, 64, 128, 3, 8, True, 14336, 4096),
    ("A8 fp8 gate/up M=128", True, True, False, False, False, 1, 128, 64, 128, 3, 8, True, 14336, 4096),
    ("A8 fp8 down split 4", True, True, False, False, False, 4, 64, 64, 128, 4, 4, False, 4096, 14336),
    ("W8A16 int8 mixed", False, False, False, False, False, 1, 64, 128, 64, 3, 4, True, 14336, 4096),
    ("split int8 gate/up", False, True, True, False, False, 1, 64, 128, 128, 4, 8, True, 14336, 4096),
    ("split fp8 gate/up", True, True, True, False, False, 1, 64, 128, 128, 4, 8, True, 14336, 4096),
    ("split STACK int8 down split 2", False, True, True, True, False, 2, 128, 64, 128, 3, 8, False, 4096, 14336),
    ("QX int8 M=16", False, True, False, False, True, 1, 16, 64, 128, 3, 4, True, 14336, 4096),
    ("QX split int8 M=16", False, True, True, False, True, 1, 16, 64, 128, 3, 4, True, 14336, 4096),
]


def ldgsts(kernel) -> int:
    """cp.async / TMA copies in the PTX: a K loop Triton pipelined streams its tiles through shared memory this way."""
    ptx = kernel.asm["ptx"]
    return len(re.findall(r"cp\.async\.(?:ca|cg)|cp\.async\.bulk", ptx))


def regs(kernel) -> str:
    f = tempfile.NamedTemporaryFile(suffix=".cubin", delete=False)
    f.write(kernel.asm["cubin"])
    f.close()
    tool = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    out = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True).stdout
    found = re.findall(r"(?:REG|STACK|LOCAL):\d+", out)
    return " ".join(dict.fromkeys(found)) or "REG:?"  # STACK / LOCAL > 0: spills


def compile_variant(v, kernel=None, extra_pointers=None, extra_ints=None, extra_consts=None):
    label, fp8, a8, x_lo, stack, qx, split, bm, bn, bk, stages, warps, gated, N, K = v
    M = 128
    w = "*fp8e4nv" if fp8 else "*i8"
    x = "*bf16" if (qx or not a8) else w
    pointers = dict(x_ptr=x, xs_ptr="*fp32", w_ptr=w, ws_ptr="*fp32", b_ptr="*fp32", wu_ptr=w, su_ptr="*fp32",
                    bu_ptr="*fp32", y_ptr="*bf16", part_ptr="*fp32", count_ptr="*i32", **(extra_pointers or {}))
    kper = -(-(-(-K // split)) // bk) * bk
    ints = dict(M=M, N=N, K=K, K_PER_SPLIT=kper, u_row0=N if gated else 0, stride_xm=K, stride_xk=1, stride_wn=K,
                stride_wk=1, stride_un=K, stride_uk=1, stride_ym=N, stride_yn=1, stride_xlo=M * K, **(extra_ints or {}))
    consts = dict(GATED=gated, A8=a8, FP8=fp8, HAS_BIAS=False, ACT="silu" if gated else "none", DOT="native",
                  FP8_AS_U8=False, SPLIT_K=split, EVEN_K=True, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                  X_LO=x_lo, QX=qx, QMAX=127.0, MIN_S=1e-12, HAND_ROUND=False, STACK=stack,
                  OUT_M=bm // 2 if stack else bm, **(extra_consts or {}))
    return compile_sm90(kernel or wg._w8_gemm_kernel, pointers, ints, consts, warps, stages)["kernel"]


def size(kernel) -> tuple[int, str]:
    """(instruction count, a hash of the instruction text without addresses and labels)."""
    import hashlib
    ins = [line.split("\t", 1)[1].strip() for line in get_sass(kernel.asm["cubin"]).splitlines() if "\t" in line]
    text = "\n".join(re.sub(r"0x[0-9a-f]+|\.L_x_\d+", "_", i) for i in ins)
    return len(ins), hashlib.sha1(text.encode()).hexdigest()[:10]


def compile_split_gemm(v):
    """fused.kernels.split_gemm's kernel with a split variant's tile (M=128)."""
    from fused.kernels import split_gemm as sgm
    label, fp8, a8, x_lo, stack, qx, split, bm, bn, bk, stages, warps, gated, N, K = v
    M, w = 128, "*fp8e4nv" if fp8 else "*i8"
    pointers = dict(x_ptr="*bf16", qb_ptr="*u8" if fp8 else "*i8", q_ptr=w, xs_ptr="*fp32", sync_ptr="*i32", w_ptr=w,
                    ws_ptr="*fp32", b_ptr="*fp32", wu_ptr=w, su_ptr="*fp32", bu_ptr="*fp32", y_ptr="*bf16",
                    part_ptr="*fp32", count_ptr="*i32")
    out_m = bm // 2 if stack else bm
    kper = -(-(-(-K // split)) // bk) * bk
    ints = dict(M=M, N=N, K=K, K_PER_SPLIT=kper, u_row0=N if gated else 0, TILES=-(-M // out_m) * -(-N // bn),
                stride_xm=K, stride_xk=1, stride_wn=K, stride_wk=1, stride_un=K, stride_uk=1, stride_ym=N, stride_yn=1)
    consts = dict(GATED=gated, FP8=fp8, HAS_BIAS=False, ACT="silu" if gated else "none", FP8_AS_U8=False,
                  SPLIT_K=split, EVEN_K=True, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, STACK=stack, OUT_M=out_m,
                  QMAX=448.0 if fp8 else 32639.0, MIN_S=1e-12, HAND_ROUND=False, BLOCK_XK=sgm.ROW_BLOCK,
                  XK_ONE_PASS=K <= sgm.ROW_BLOCK, SPLIT=x_lo, ROW_STAGES=sgm.ROW_STAGES if x_lo else 1)
    return compile_sm90(sgm._split_gemm_kernel, pointers, ints, consts, warps, stages)["kernel"]


def compile_first_layer(fp8: bool, bm: int, bn: int, bk: int, stages: int, warps: int, M: int = 128):
    """fused.kernels.first_layer's kernel (gated Llama gate/up) with a tile."""
    from fused.kernels import first_layer as fl
    N, K, w = 14336, 4096, "*fp8e4nv" if fp8 else "*i8"
    qb = "*u8" if fp8 else "*i8"
    pointers = dict(x_ptr="*bf16", xqb_ptr=qb, xq_ptr=w, xs_ptr="*fp32", w_ptr=w, ws_ptr="*fp32", b_ptr="*fp32",
                    wu_ptr=w, su_ptr="*fp32", bu_ptr="*fp32", h_ptr="*bf16", hq_ptr=qb, hs_ptr="*fp32", sync_ptr="*i32")
    ints = dict(M=M, N=N, K=K, ROWS=M, u_row0=N, stride_xm=K, stride_xk=1, stride_wn=K, stride_wk=1, stride_un=K,
                stride_uk=1)
    consts = dict(GATED=True, FP8=fp8, HAS_BIAS=False, ACT="silu", QMAX=448.0 if fp8 else 127.0, MIN_S=1e-12,
                  HAND_ROUND=False, FP8_AS_U8=False, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, BLOCK_XK=4096,
                  XK_ONE_PASS=True, BLOCK_HN=4096)
    return compile_sm90(fl._first_layer_kernel, pointers, ints, consts, warps, stages)["kernel"]


if __name__ == "__main__":
    print("triton", triton.__version__)
    if "split_gemm" in sys.argv[1:]:  # the one-launch kernels (split_gemm, quant_gemm) against w8_gemm, same tile
        stack_fp8 = ("split fp8 STACK down split 2", True) + VARIANTS[6][2:]
        for v in [v for v in VARIANTS if v[2] and not v[5]] + [stack_fp8]:  # A8 (planes or quantized x), x prepared
            k, k0 = compile_split_gemm(v), compile_variant(v)
            print(f"one_launch {v[0]}: {size(k)[0]} SASS instructions, {regs(k)} vs w8_gemm {regs(k0)}; shared "
                  f"{k.metadata.shared} vs {k0.metadata.shared}; LDGSTS {ldgsts(k)} vs {ldgsts(k0)}")
        for v in VARIANTS[:2]:  # first_layer with the M=128 (and M=1024) gate/up tiles of the W8A8 GEMM
            for tile in ((128, 64, 128, 3, 8), (128, 128, 128, 4, 8)):
                k = compile_first_layer(v[1], *tile)
                k0 = compile_variant(v[:7] + tile[:3] + tile[3:] + v[12:])
                print(f"first_layer {v[0]} tile {tile}: {size(k)[0]} SASS instructions, {regs(k)} vs w8_gemm "
                      f"{regs(k0)}; shared {k.metadata.shared} vs {k0.metadata.shared}; LDGSTS {ldgsts(k)} vs {ldgsts(k0)}")
        sys.exit()
    for v in VARIANTS:
        k = compile_variant(v)
        n, h = size(k)
        print(f"{v[0]}: {n} SASS instructions ({h}), {regs(k)}")
