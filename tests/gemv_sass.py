"""SASS instruction counts of the decode GEMV's K loop, per variant (triton sm_90 compile, no GPU needed; run
without TRITON_INTERPRET): python tests/gemv_sass.py. Per thread and loop iteration; the table in
examples/results/h200/NOTES.md comes from it."""
import collections
import os
import re
import sys
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
from triton.tools.disasm import get_sass
from fused.kernels import w8a16_gemv as g
from sm90_compile import compile_sm90

def compile_gemv(cfg, gated=True, fp8=False, M=1, N=14336, K=4096, xdt="*bf16", kernel=None, extra=None):
    fn = kernel or g._w8a16_gemv_kernel
    w = "*u8" if fp8 else "*i8"
    pointers = dict(x_ptr=xdt, w_ptr=w, ws_ptr="*fp32", b_ptr="*fp32", wu_ptr=w, su_ptr="*fp32", bu_ptr="*fp32",
                    y_ptr="*bf16", part_ptr="*fp32", count_ptr="*i32")
    split = cfg["SPLIT_K"]; bk = cfg["BLOCK_K"]
    kper = -(-(-(-K // split)) // bk) * bk
    ints = dict(M=M, N=N, K=K, K_PER_SPLIT=kper, u_row0=N if gated else 0, TILES=-(-N // cfg["BLOCK_N"]),
                stride_xm=K, stride_xk=1, stride_wn=K, stride_wk=1, stride_un=K, stride_uk=1, stride_ym=N, stride_yn=1)
    consts = dict(GATED=gated, W_FP8=fp8, HAS_BIAS=False, ACT="silu" if gated else "none", SPLIT_K=split,
                  BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=bk, DOT=cfg.get("DOT", "native"),
                  CVT=cfg.get("CVT", "magic"), JOINT=False, PREFETCH=False, PERSISTENT=False, STAGES=cfg.get("STAGES", 1))
    consts.update(extra or {})
    return compile_sm90(fn, pointers, ints, consts, cfg["num_warps"])["kernel"]

def hist(k, label, show=False):
    sass = get_sass(k.asm["cubin"])
    labels, instrs = {}, []
    for l in sass.splitlines():
        ml = re.match(r"\s*(\.?L\w+):", l)
        if ml:
            labels[ml.group(1)] = len(instrs); continue
        if "\t" in l:
            ins = l.split("\t", 1)[1].strip().rstrip(";")
            if ins: instrs.append(ins)
    best = None
    for idx, ins in enumerate(instrs):
        t = re.search(r"BRA\s+`?\(?(\.?L\w+)", ins)
        if t and t.group(1) in labels and labels[t.group(1)] <= idx:
            body = instrs[labels[t.group(1)]:idx + 1]
            if best is None or len(body) > len(best): best = body
    ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", b).split()[0].split(".")[0] for b in (best or []))
    print(f"{label}: loop body {len(best or [])} instr; {ops.most_common(16)}")
    if show:
        print("\n".join(best or []))
    return best

if __name__ == "__main__":
    b16 = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=256, SPLIT_K=1, num_warps=4, CVT="native")
    b1 = dict(BLOCK_M=1, BLOCK_N=32, BLOCK_K=512, SPLIT_K=1, num_warps=4, CVT="magic")
    hist(compile_gemv(b16), "int8 BM16 native (tuned M=1 pick), per 32x256 tile x2 (gate,up)")
    hist(compile_gemv(b1), "int8 BM1 magic, per 32x512 tile x2")
    hist(compile_gemv(dict(b1, CVT="prmt")), "int8 BM1 prmt (fp16 pairs by PRMT, fifteenth session), per 32x512 tile x2")
    hist(compile_gemv(dict(b1, BLOCK_K=512), fp8=True), "fp8 BM1 32x512 (current gate/up pick)")
    hist(compile_gemv(dict(b16, CVT="native"), fp8=True), "fp8 BM16 32x256, bf16 x")
    hist(compile_gemv(dict(b16, CVT="native"), fp8=True, xdt="*fp16"), "fp8 BM16 32x256, fp16 x")
    hist(compile_gemv(b16, xdt="*fp16"), "int8 BM16 32x256, fp16 x, Triton's cast (I2F)")

