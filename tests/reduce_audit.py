"""Audit for a Triton 3.6 code-generation bug (fixed upstream, triton-lang/triton#9192 / #9219; 3.9 is right): the
reduce lowering assumes the lanes along the reduced axis are contiguous lane-id bits. On a linear layout whose lanes
along that axis are not (e.g. lane bases [[0,2],[1,0],[2,0],[4,0],[0,8]] for a sum over axis 1: lane bits 0 and 4) it
shuffles with the wrong peers (xor 2, 1 instead of 1, 16) and sums across rows: the twentieth session's wrong 16-row
"quad" tiles. This compiles kernels for sm_90 (no GPU; run WITHOUT TRITON_INTERPRET, with the Triton to audit on
PYTHONPATH, e.g. PYTHONPATH=/tmp/t36 for 3.6) and lists every tt.reduce whose operand layout has the reduced axis on
non-contiguous lane bits.

    PYTHONPATH=/tmp/t36 python tests/reduce_audit.py [sparse24_gemv|w8a16_gemv|blocks|all]
"""
import ast
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]


def _layouts(ttgir: str) -> dict:
    """#name -> lane bases (list of per-dim tuples) for the linear layouts of a TTGIR module."""
    out = {}
    for name, body in re.findall(r"^#(linear\d*) = #ttg\.linear<\{(.*)\}>", ttgir, re.M):
        lane = re.search(r"lane = (\[.*?\]\]|\[\])", body).group(1)
        out[name] = [tuple(b) for b in ast.literal_eval(lane)]
    return out


def bad_reduces(ttgir: str) -> list[str]:
    """The reduces over a linear layout (or a slice of one) whose reduced axis sits on non-contiguous lane bits."""
    layouts = _layouts(ttgir)
    bad = []
    for m in re.finditer(r'"tt\.reduce"\([^)]*\) <\{axis = (\d+) : i32\}>.*?\}\) : \(tensor<([\dx]+)x\w+, (#[^>]*>?)\)',
                         ttgir, re.S):
        axis, enc = int(m.group(1)), m.group(3)
        sl = re.match(r"#ttg\.slice<\{dim = (\d+), parent = #(linear\d*)\}>", enc)
        name = sl.group(2) if sl else enc.lstrip("#").rstrip(">")
        if name not in layouts:
            continue  # blocked / mma layouts: their lanes are contiguous per dim by construction
        lanes = layouts[name]
        if sl:  # a slice drops the sliced dim from every basis
            d = int(sl.group(1))
            lanes = [b[:d] + b[d + 1:] for b in lanes]
        bits = [i for i, b in enumerate(lanes) if b[axis] != 0]
        if bits and bits != list(range(bits[0], bits[0] + len(bits))):
            bad.append(f"axis {axis} of {m.group(2)} on lane bits {bits} (lane bases {lanes})")
    return bad


def _sparse(report):
    from fused.kernels import sparse24_gemv as sg
    from sparse_sass import compile_sparse
    for gated, N, K in ((True, 14336, 4096), (False, 4096, 14336)):
        for value in ("int8", "fp8"):
            for M in (1, 2, 4, 8, 16):
                for cfg in sg._candidates(M, N, K, gated):
                    for tiled in (0, 1):
                        t = sg._tiled_mode(bool(tiled), cfg["MODE"], cfg["BLOCK_N"], N, gated)
                        report(f"sparse24_gemv {'gate/up' if gated else 'down'} {value} M={M} TILED={t} {cfg}",
                               lambda: compile_sparse(cfg, gated, N, K, M, value, t).asm["ttgir"])


def _dense(report):
    from fused.kernels import w8a16_gemv as g
    from gemv_sass import compile_gemv
    for gated, N, K in ((True, 14336, 4096), (False, 4096, 14336)):
        for fp8 in (False, True):
            for M in (1, 2, 4, 8, 16):
                for cfg in g._candidates(M, N, K, gated, int8=not fp8):
                    report(f"w8a16_gemv {'gate/up' if gated else 'down'} {'fp8' if fp8 else 'int8'} M={M} {cfg}",
                           lambda: compile_gemv(cfg, gated, fp8, M, N, K).asm["ttgir"])


def _blocks(report):
    from sm90_compile import compile_sm90, decode_block_configs, decode_chain_configs
    from sparse_sass import compile_narrow
    for label, fn, pointers, ints, consts, warps in decode_block_configs() + decode_chain_configs():
        report(label, lambda: compile_sm90(fn, pointers, ints, consts, warps)["kernel"].asm["ttgir"])
    for bm, w, s, f in ((128, 4, 1, False), (128, 4, 1, True), (256, 8, 1, True)):
        report(f"narrow_mlp {(bm, w, s, f)}", lambda: compile_narrow(bm, w, s, f).asm["ttgir"])


if __name__ == "__main__":
    import triton
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    seen = {"n": 0, "bad": 0}

    def report(label, ttgir_fn):
        seen["n"] += 1
        try:
            bad = bad_reduces(ttgir_fn())
        except Exception as e:  # noqa: BLE001
            print(f"COMPILE FAILED {label}: {str(e)[-200:]}", flush=True)
            return
        for b in bad:
            seen["bad"] += 1
            print(f"BAD {label}: {b}", flush=True)

    print(f"triton {triton.__version__}", flush=True)
    if what in ("sparse24_gemv", "all"):
        _sparse(report)
    if what in ("w8a16_gemv", "all"):
        _dense(report)
    if what in ("blocks", "all"):
        _blocks(report)
    print(f"audited {seen['n']} kernels, {seen['bad']} bad reduces", flush=True)
