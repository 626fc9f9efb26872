"""fused.kernels.w8a16_swap compiled for sm_90 without a GPU (run without TRITON_INTERPRET; with the H200's triton:
PYTHONPATH=/tmp/fused_triton36 python .ci/swap_sass.py [M]): per candidate, the wgmma form, whether its A operand (the
widened weight) comes from registers, the wgmma waits in the PTX, registers (cuobjdump), shared memory."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, ".ci")]
import triton  # noqa: E402

from sm90_compile import compile_sm90  # noqa: E402
from fused.kernels import w8a16_swap as ws  # noqa: E402
from w8_gemm_sass import regs  # noqa: E402  (registers, from cuobjdump)


print(f"triton {triton.__version__}")
M = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
for fp8 in (False, True):
    for gated, N, K in ((True, 14336, 4096), (False, 4096, 14336)):
        for cfg in ws._candidates(M, N, K, gated):
            w = "*fp8e4nv" if fp8 else "*i8"
            pointers = dict(x_ptr="*bf16", w_ptr=w, ws_ptr="*fp32", b_ptr="*fp32", wu_ptr=w, su_ptr="*fp32",
                            bu_ptr="*fp32", y_ptr="*bf16", part_ptr="*fp32", count_ptr="*i32")
            ints = dict(M=M, N=N, K=K, K_PER_SPLIT=-(-K // cfg["SPLIT_K"]), u_row0=N if gated else 0, stride_xm=K,
                        stride_xk=1, stride_wn=K, stride_wk=1, stride_un=K, stride_uk=1, stride_ym=N, stride_yn=1)
            consts = dict(GATED=gated, HAS_BIAS=False, ACT="silu" if gated else "none", DOT="native",
                          FP8_AS_U8=False, EVEN_K=True, SPLIT_K=cfg["SPLIT_K"], BLOCK_N=cfg["BLOCK_N"],
                          BLOCK_M=cfg["BLOCK_M"], BLOCK_K=cfg["BLOCK_K"], GROUP_N=cfg["GROUP_N"], IL=cfg["IL"],
                          NUM_PROGS=132 if cfg.get("PERSIST") else 0)
            label = (f"{'fp8 ' if fp8 else 'int8'} {'gated' if gated else 'down '} {cfg['BLOCK_N']}x{cfg['BLOCK_M']}"
                     f"x{cfg['BLOCK_K']} s{cfg['num_stages']} w{cfg['num_warps']} split {cfg['SPLIT_K']}"
                     f"{' IL' * cfg['IL']}{' PERSIST' * cfg.get('PERSIST', False)}")
            try:
                r = compile_sm90(ws._w8a16_swap_kernel, pointers, ints, consts, cfg["num_warps"], cfg["num_stages"])
            except Exception as e:  # noqa: BLE001
                print(f"{label}: does not compile: {str(e).strip().splitlines()[-1][:150]}", flush=True)
                continue
            ptx, k = r["ptx"], r["kernel"]
            forms = sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx)))
            a_regs = len(re.findall(r"wgmma\.mma_async[^;]*\}, \{%r", ptx))
            waits = sorted(set(re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", ptx)))
            sts = len(re.findall(r"st\.shared", ptx))
            print(f"{label}: wgmma {forms} A-in-registers {a_regs}, waits {waits}, st.shared {sts}, "
                  f"{regs(k)}, shared {k.metadata.shared // 1024} KB", flush=True)
