"""The GPU kernels also compile for sm_90 under Triton 3.6, the version torch 2.11 ships (the H200 runs it; CI's
torch 2.13 has 3.9), and none of them reduces over non-adjacent lanes (Triton 3.6 sums those wrong:
tests/reduce_audit.py). The interpreter cannot see either: in the nineteenth session a str default for a constexpr
argument, which 3.9 accepts, left every M=16 2:4 decode tile failing to compile on the H200, and a 16-row "quad"
tile summed rows into each other. sparse24_mma (2:4 decode on mma.sp) must compile with no layout conversion.

FUSED_TRITON36 names a directory holding triton 3.6 (`pip install --target DIR triton==3.6.0`; .ci/run makes one);
skipped without it. Compiles need no GPU (ptxas comes with the wheel)."""
import os
import pathlib
import subprocess
import sys

import pytest

T36 = os.environ.get("FUSED_TRITON36", "")
pytestmark = pytest.mark.skipif(not (T36 and pathlib.Path(T36, "triton").is_dir()),
                                reason="FUSED_TRITON36 (a directory with triton 3.6) not set")

CODE = """
import sys
sys.path[:0] = ['tests']
import triton
assert triton.__version__.startswith('3.6'), triton.__version__
from reduce_audit import bad_reduces
from sparse_sass import compile_sparse
from gemv_sass import compile_gemv
from sm90_compile import compile_sm90
from fused.kernels import sparse24_gemv as sg, w8a16_gemv as g, sparse24_linear as sl
out = []
def audit(label, ttgir):
    out.extend(f'{label}: {b}' for b in bad_reduces(ttgir))
for M in (1, 16):  # one candidate per 2:4 decode MODE, gated Llama shape, tiled meta as the modules hold it
    seen = set()
    for value in ('int8', 'fp8'):
        for c in sg._candidates(M, 14336, 4096, True):
            if (c['MODE'], value) in seen:
                continue
            seen.add((c['MODE'], value))
            t = sg._tiled_mode(True, c['MODE'], c['BLOCK_N'], 14336, True)
            audit(f'sparse24_gemv M={M} {value} {c}', compile_sparse(c, True, 14336, 4096, M, value, t).asm['ttgir'])
for bn in (16, 32):  # the quad tiles on tiled meta read as contiguous runs (16 rows: opt-in sparse24_gemv.QUAD16_RUNS)
    c = dict(sg._cfg('quad', 1, bn, 512, 4, 4), SPLIT_K=1)
    audit(f'sparse24_gemv quad runs {bn}', compile_sparse(c, True, 14336, 4096, 1, 'int8', 2).asm['ttgir'])
for M in (1, 16):
    c = g._candidates(M, 14336, 4096, True, int8=True)[0]
    audit(f'w8a16_gemv M={M} {c}', compile_gemv(c, True, False, M).asm['ttgir'])
for expand in ('select', 'prmt'):
    k = compile_sm90(sl._sparse24_kernel, dict(x_ptr='*i8', xs_ptr='*fp32', v_ptr='*i8', m_ptr='*u8', ws_ptr='*fp32',
                     b_ptr='*fp32', y_ptr='*bf16'), dict(M=128, N=4096, K=4096, stride_xm=4096, stride_xk=1,
                     stride_vn=2048, stride_mn=512, stride_ym=4096, stride_yn=1), dict(VALUE='int8', DOT='int8',
                     GATED=True, HAS_SCALE=True, HAS_BIAS=False, ACT='silu', BLOCK_M=64, BLOCK_N=64, BLOCK_K=128,
                     GROUP_M=8, TILED=False, EXPAND=expand), 4)
    audit(f'sparse24_linear EXPAND={expand}', k['kernel'].asm['ttgir'])
from sm90_compile import mma_facts, w8_mma_facts
for label, (mmas, converts, loads) in mma_facts().items():  # sparse24_mma: its lanes must stay in their threads
    if mmas < 2 or converts > ('mma_x' in label) or not loads:
        out.append(f'{label}: {mmas} mma.sp, {converts} layout conversions, {loads} 16-byte loads')
for label, (mmas, converts) in w8_mma_facts().items():  # w8_mma: the same rule
    if mmas < 4 or converts:
        out.append(f'{label}: {mmas} mma.sync, {converts} layout conversions')
import re
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon import language as gl
from fused.kernels import w8a16_ws as gws
# the Gluon W8A16 GEMM (GPU-only: Gluon does not run in the interpreter), compiled with the H200's triton: the
# widened weight is wgmma's register operand, ptxas keeps each K step's 4 wgmma in one group (a wait after every
# one is what a group left in flight across the loop got: 607 instead of 663-686 TFLOP/s), the plain form spills
# nothing (the gated one spills in its epilogue only: act(g) and the handed-over u live together)
import os as _os, subprocess as _sp, tempfile as _tf
_bin = _os.path.join(_os.path.dirname(triton.__file__), 'backends', 'nvidia', 'bin')


def sass_and_usage(k):
    # a compiled kernel's SASS (nvdisasm) and resource usage (cuobjdump -res-usage), by ptxas's own tools
    with _tf.NamedTemporaryFile(suffix='.cubin') as f:
        f.write(k.asm['cubin'])
        f.flush()
        return (_sp.run([_os.path.join(_bin, 'nvdisasm'), '-c', f.name], capture_output=True, text=True).stdout,
                _sp.run([_os.path.join(_bin, 'cuobjdump'), '-res-usage', f.name], capture_output=True, text=True).stdout)


# (w8a16_ws_pair launches the gated kernel with the up rows from a second descriptor: the same compiled code)
for gated, act, bias, stages, pad, halves, persist in ((False, 'none', False, 4, 0, False, False),
                                                       (False, 'gelu_tanh', True, 3, 0, True, True),
                                                       (True, 'silu', False, 3, 0, False, False),
                                                       (True, 'gelu', True, 3, 4, True, False),
                                                       (True, 'silu', False, 3, 0, True, True)):
    cfg = gws.default_config()
    bt, bk, wr = cfg['BLOCK_T'], cfg['BLOCK_K'], 64 if gated else 128
    xl = gl.NVMMASharedLayout.get_default_for([bt, bk], gl.bfloat16)
    wl = gl.NVMMASharedLayout.get_default_for([wr, bk], gl.int8)
    sig = {'x_desc': f'tensordesc<bf16[{bt}, {bk}],{xl!r}>', 'w_desc': f'tensordesc<i8[{wr}, {bk}],{wl!r}>',
           'wu_desc': f'tensordesc<i8[{wr}, {bk}],{wl!r}>', 'ws_ptr': '*fp32', 'su_ptr': '*fp32', 'b_ptr': '*bf16',
           'bu_ptr': '*bf16', 'y_ptr': '*bf16', 'M': 'i32', 'N_OUT': 'i32', 'K': 'i32', 'stride_ym': 'i32',
           'up_off': 'i32'}
    consts = dict(GROUP_N=cfg['GROUP_N'], STAGES=stages, CONSUMER_REGS=cfg['CONSUMER_REGS'], GATED=gated, ACT=act,
                  HAS_BIAS=bias, FP8_BITS=False, U_PAD=pad, A_HALVES=halves, PERSIST=persist,
                  num_warps=4)
    sig.update({k: 'constexpr' for k in consts})
    k = triton.compile(GluonASTSource(gws._w8a16_ws_kernel, sig, constexprs=consts), target=GPUTarget('cuda', 90, 32),
                       options=dict(num_warps=4))
    label = f'w8a16_ws gated={gated} {act} bias={bias} s{stages} pad{pad} halves={halves} persist={persist}'
    if not re.search(r'wgmma\.mma_async[^;]*\}, \{%r', k.asm['ptx']):
        out.append(f'{label}: the widened weight is no register operand')
    sass, usage = sass_and_usage(k)
    lines = sass.splitlines()
    # a group's last HGMMA carries the scoreboard its wait reads (gsb0): one per consumer when each K step's 4 run
    # as a group (two with A_HALVES, one per half), one per HGMMA when serialized
    groups = sum(1 for line in lines if 'HGMMA' in line and 'gsb0' in line)
    if sum('HGMMA' in line for line in lines) != 8 or groups != (4 if halves else 2):
        out.append(f'{label}: wgmma serialized ({groups} HGMMA groups of 8 HGMMA)')
    stack = re.search(r'STACK:(\d+)', usage)
    if not stack or (not gated and int(stack.group(1))):
        out.append(f'{label}: spills ({stack and stack.group(0)})')
from fused.kernels import w8a8_ws as w8s
# the Gluon fp8 W8A8 GEMM: per consumer one group of 4 wgmma (both operands in shared memory) per accumulator and K
# step, 16 in all; no spill; COOP (256-row tiles shared by the consumers) alike. The grouped hand-off: QUANT_OUT
# (h quantized per token and 64 outputs in the epilogue) spills loop invariants reloaded once per tile, never inside
# the K loops; X_GROUPS (the down GEMM scaling each K step's product) 4 wgmma, each waited for: 2 groups, no spill;
# with two K groups a stage (xg=2, BLOCK_K 128) two products in flight per consumer: 8 wgmma in 4 groups; with groups
# of 128 (xg=3) one product of 128 K: 8 wgmma in 2 groups. QUANT_OUT in groups of 128 outputs (qo=128; gated COOP
# trades the consumers' absmaxes through shared memory) alike. X_SPLIT (an eighth field: W8A16 on interleaved planes,
# combined per token in the epilogue) alike, no spill; a ninth: SPLIT_K (K parts reduced as fused.kernels.splitk)
for gated, act, bias, int8, coop, xg, qo, *split in (
        (False, 'none', False, False, False, False, False), (True, 'silu', False, False, False, False, False),
        (True, 'gelu_tanh', True, False, False, False, False), (True, 'silu', False, True, False, False, False),
        (False, 'none', False, False, True, False, False), (False, 'gelu', True, True, True, False, False),
        (True, 'silu', False, False, True, False, False), (True, 'gelu_tanh', True, True, True, False, False),
        (True, 'silu', False, False, True, False, True), (True, 'silu', False, True, False, False, True),
        (False, 'relu', True, False, True, False, True), (False, 'none', False, False, False, True, False),
        (False, 'gelu', True, True, False, True, False), (False, 'none', False, False, False, 2, False),
        (False, 'gelu', True, True, False, 2, False), (False, 'none', False, False, False, 3, False),
        (False, 'gelu', True, True, False, 3, False), (True, 'silu', False, False, True, False, 128),
        (True, 'gelu', True, True, True, False, 128), (False, 'relu', True, False, True, False, 128),
        (False, 'none', False, True, False, False, 128), (True, 'silu', False, True, False, False, False, True),
        (True, 'gelu_tanh', True, False, True, False, False, True),
        (False, 'none', False, True, True, False, False, True),
        (False, 'gelu', True, False, False, False, False, True),
        (False, 'none', False, True, False, False, False, True, 2),
        (False, 'none', False, False, True, False, False, False, 4),
        (True, 'silu', False, True, True, False, False, True, 2)):
    cfg = w8s.default_config(gated, coop, bool(xg), 128 if xg == 3 else 64)
    if xg == 2:
        cfg.update(BLOCK_K=128, STAGES=6)
    bt, bk = cfg['BLOCK_T'], cfg['BLOCK_K']
    wr = 128 if xg else (128 if gated else 256) if coop else 64 if gated else 128
    dt, ds = (gl.int8, 'i8') if int8 else (gl.float8e4nv, 'fp8e4nv')
    xl = gl.NVMMASharedLayout.get_default_for([bt, bk], dt)
    wl = gl.NVMMASharedLayout.get_default_for([wr, bk], dt)
    sl = gl.NVMMASharedLayout(0, 32)
    sig = {'x_desc': f'tensordesc<{ds}[{bt}, {bk}],{xl!r}>', 'w_desc': f'tensordesc<{ds}[{wr}, {bk}],{wl!r}>',
           'wu_desc': f'tensordesc<{ds}[{wr}, {bk}],{wl!r}>',
           'xs_desc': f'tensordesc<fp32[{2 if xg == 2 else 1}, {bt}],{sl!r}>',
           'xs_ptr': '*fp32', 'ws_ptr': '*fp32',
           'su_ptr': '*fp32', 'b_ptr': '*bf16', 'bu_ptr': '*bf16', 'y_ptr': f'*{ds}' if qo else '*bf16',
           'hs_ptr': '*fp32', 'M': 'i32', 'N_OUT': 'i32', 'K': 'i32', 'stride_ym': 'i32', 'up_off': 'i32',
           'part_ptr': '*fp32', 'count_ptr': '*i32'}
    consts = dict(GROUP_N=cfg['GROUP_N'], STAGES=cfg['STAGES'], CONSUMER_REGS=cfg['CONSUMER_REGS'], GATED=gated,
                  ACT=act, HAS_BIAS=bias, INT8=int8, COOP=coop, X_GROUPS=bool(xg), QUANT_OUT=bool(qo),
                  OUT_GROUP=128 if qo == 128 else 64, X_SPLIT=bool(split and split[0]),
                  SPLIT_K=split[1] if len(split) > 1 else 1, num_warps=4)
    sig.update({k: 'constexpr' for k in consts})
    k = triton.compile(GluonASTSource(w8s._w8a8_ws_kernel, sig, constexprs=consts), target=GPUTarget('cuda', 90, 32),
                       options=dict(num_warps=4))
    label = f'w8a8_ws gated={gated} {act} bias={bias} int8={int8} coop={coop} x_groups={xg} quant_out={qo} {split}'
    sass, usage = sass_and_usage(k)
    code = sass.splitlines()
    lines = [line for line in code if 'GMMA' in line]
    want = (8, 4) if xg == 2 else (8, 2) if xg == 3 else (4, 2) if xg else (16, 4)
    if (len(lines), sum('gsb0' in line for line in lines)) != want:
        out.append(f'{label}: {len(lines)} GMMA in {sum("gsb0" in line for line in lines)} groups ({want} expected)')
    # each consumer's K loop: its run of GMMA (lines less than 100 apart), the ready wait before, the release after
    gmma = [i for i, line in enumerate(code) if 'GMMA' in line]
    runs = [[gmma[0], gmma[0]]]
    for i in gmma[1:]:
        if i - runs[-1][1] < 100:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    if any('STL' in line or 'LDL' in line for a, b in runs for line in code[max(a - 30, 0):b + 16]):
        out.append(f'{label}: local memory inside the K loop')
    if k.metadata.shared > 232448:  # the H200's shared memory per block (227 KB)
        out.append(f'{label}: {k.metadata.shared} bytes of shared memory')
    stack = re.search(r'STACK:(\d+)', usage)
    # (plain QUANT_OUT in groups of 128: both accumulators' values live together in the epilogue, 312-440 bytes)
    if not stack or int(stack.group(1)) > (512 if qo == 128 and not gated else 256 if qo else 0):
        out.append(f'{label}: spills ({stack and stack.group(0)})')
print(out)
"""


def test_kernels_compile_and_reduce_right_under_triton36():
    root = pathlib.Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([T36, str(root)])
    run = subprocess.run([sys.executable, "-c", CODE], cwd=root, env=env, capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "[]"
