"""SASS instruction count of act_quant (sm_90 compile, no GPU; run without TRITON_INTERPRET): python .ci/act_quant_sass.py.
The eighth session's 1704 -> 816 per thread (fp8, K=14336, 8 warps) come from it."""
import collections, re, sys, os
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))); sys.path.insert(0, ROOT); sys.path.insert(0, os.path.join(ROOT, "tests"))
from triton.tools.disasm import get_sass
from sm90_compile import compile_sm90
from fused.kernels import act_quant as aq
def count(fp8, K=14336, warps=8, block=16384, fn=None, consts=None):
    c = dict(QMAX=448.0 if fp8 else 127.0, MIN_S=1e-12, FP8=fp8, BLOCK_K=block, ONE_PASS=K <= block, HAND_ROUND=False)
    c.update(consts or {})
    k = compile_sm90(fn or aq._act_quant_kernel, dict(x_ptr="*bf16", q_ptr="*u8" if fp8 else "*i8", s_ptr="*fp32"),
                     dict(M=8192, K=K, stride_xm=K, stride_xk=1, stride_qm=K), c, warps)["kernel"]
    sass = get_sass(k.asm["cubin"])
    ins = [l.split("\t",1)[1].strip() for l in sass.splitlines() if "\t" in l]
    # the real-row branch only: from after 'BRA LBB0' ... approximate: whole kernel
    ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", b).split()[0].split(".")[0] for b in ins)
    per = min(block, 1 << (K - 1).bit_length()) // (warps * 32)
    print(f"fp8={fp8} K={K} warps={warps} block={block}: {len(ins)} instr, {len(ins)/per:.1f} per element-ish, x; {ops.most_common(16)}")
if __name__ == "__main__":
    count(True); count(False); count(True, K=4096, block=4096)
