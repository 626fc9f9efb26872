"""2:4 decode on the sparse tensor cores (M <= 16, 8-bit values, cuSPARSELt-tiled meta): y = epilogue(x · Wᵀ).

x arrives as 8-bit planes: act_split's two (int8 values: x ≈ s·(256·hi + lo); e4m3 values: x ≈ s·(hi + lo/16):
the W8A16 numerics of the split-activation GEMMs) or one act_quant plane (W8A8, x ≈ s·q); or (sparse24_mma_x,
SPLIT_X) the 16-bit x itself, each program splitting its own K range first (act_split's planes with a scale per
token and range) into a scratch it then reads, so no act_split launch precedes it. The products run on `mma.sp`
(m16n8k64: 16 weight rows x 64 columns of K, the 2:4 selection done by the hardware): the K loop has no per-weight
work. A warp's step is 16 rows x 128 columns (two mma.sp per x plane and 8 tokens); within the step the K order is
permuted (the same for A and B, whole 2:4 groups) so that a lane's A words are ONE 16-byte run per row: per step a
lane loads its values as two 16-byte vectors (rows g and g+8, packed bytes 16t .. 16t+15), the metadata as two
8-byte vectors and x as four 16-byte vectors per plane (the words it needs picked by t % 2). The first version
(4-byte loads of strided rows, 64-column steps) was L1-bound at 2.2x the quad GEMV's time (H200 ncu, twenty-second
session); then a loop that prefetched the next step's weights in loop-carried registers stayed latency-bound (the
back-edge copies waited on the loads). Now a warp loads U steps of weights per iteration, none carried, optionally
fenced (FENCE) so ptxas issues them all before the first mma, and reads them L1::no_allocate (x stays in L1).
Twenty-third session (H200): PAIRS, at M <= 4 with two planes, puts both planes in one mma's columns (column
2·token + plane: half the mma.sp and x loads); PDL makes the kernel a programmatic dependent of the act_split /
act_quant launch before it (weights loaded before griddepcontrol.wait); XF loads the x fragments with the weights;
L2P sets the weights' L2 prefetch size (128 B won); PFD prefetches the weights 1-2 iterations ahead into L2
(prepared, not yet timed). ncu of the M=1 gate/up pick: DRAM 56%, occupancy 25% (the weights in flight sit in
registers), load stalls dominate.

Logical -> physical groups within a step, mma m (0, 1), lane t' = 0..3 of a quad: a0's groups 2t', 2t'+1 are the
physical groups 8t' + 2m + {0, 1} (bytes 16t' + 4m .. +3: word m of the row's 16-byte run), a2's groups 8 + 2t',
9 + 2t' are 8t' + 4 + 2m + {0, 1} (word 2 + m). So the metadata word of lane (g, t) for mma m is meta bytes 4c + 2h + m
(c = 0..3, h = t // 2) of row g + 8(t % 2): in cuSPARSELt's tiles, byte n3 and 2 + n3 (n3 = t % 2) of word 2h + m of
the quad's run in each of the step's two tiles: one prmt. B word j of mma m is x word 8h + n3 + 2m + {0, 16, 4, 20}[j].

Fragments (PTX ISA, sparse mma.m16n8k64 with 8-bit types), lane L = 4g + t:
  A (packed values, 4 words)  a0: row g, packed columns 4t..4t+3 of the step's 32;  a1: row g+8, the same columns;
                              a2 / a3: rows g / g+8, packed columns 16+4t..16+4t+3
  e (metadata, 1 word)        32 consecutive K columns of one row (not the lane's own A bytes): row g + 8·(t % 2),
                              groups 8·(t // 2) .. +7, nibble j for group j (low 2 bits the first kept value), i.e.
                              meta bytes (row g + 8·(t % 2), bytes 4·(t // 2) .. +3); the H200 probe (diag mmaprobe)
                              showed it
  B (one x plane, 4 words)    token g, K columns 16j + 4t .. +3 for word j
  D (4 accumulators)          d0 / d1: row g, tokens 2t / 2t+1;  d2 / d3: row g+8, tokens 2t / 2t+1
cuSPARSELt's 512-byte meta tile (sparsity.packing.tile_meta) holds, for the warp whose 16 rows are sub-tile s of a
64-row tile, words 32·s + 4g + b with bytes (g, b), (g+8, b), (g, b+4), (g+8, b+4) (row, byte of the row's 8): the
one buffer that serves cuSPARSELt serves this kernel.

Lanes are the physical ones (%tid.x, read by inline asm), so the fragments do not depend on how Triton lays out the
[32·W] tensors. The interpreter has neither tensor cores nor %tid.x: there the lanes are the tensor positions and
_mma_emu forms the warp product from the same lane registers by the fragment rules above (the test oracle of the
addressing; the tensor core is the GPU test's).
Each warp owns 16 rows and one K range; split-K as in splitk: each program stores its lanes' sums (planes combined,
fp32, existing tokens only), the last program of a row tile sums the partials in a fixed order (deterministic) and
runs the epilogue (token and channel scales, bias, activation, gate). Reference: fused.reference.linear_ref /
gated_ref on the unpacked weight and the planes' values.
e4m3 on sm_90: ptxas lowers the fp8 mma.sp to two f16 HMMA.SP with conversions and lane shuffles (~2.5x the int8
loop's instructions; 182 registers at 16 tokens, two planes, gated), int8 is one IMMA.SP.16864.
"""
from __future__ import annotations


import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from fused.kernels import INTERPRET, W_EVICT, cdiv, check_out
from fused.kernels.epilogue import activation
from fused.kernels.launch import empty, launch_kernel
from fused.kernels.splitk import buffers
from fused.kernels.tuning import m_bucket, pick
from fused.kernels.w8a16_gemv import _split_for, prefetch_l2
from fused.kernels.act_quant import reciprocal
from fused.kernels.act_split import split_planes, split_planes_fp8
from lowbit.quant import FP8_SPLIT_LO, FP8_SPLIT_QMAX, MIN_SCALE, SPLIT_QMAX

# the dispatch's "mma" route (int8 2:4 at M <= 16), timed per shape against the others; sparse24_mma.MMA = False leaves it out.
# On since the twenty-third session (cuda tests green on the H200; it took int8 gate/up at M=1 from the quad GEMV)
MMA = True
# programmatic dependent launch after act_split / act_quant (the route's chain): the programs start and issue their
# first weight loads while the small kernel before them runs, and wait (griddepcontrol.wait) before reading its planes
PDL = not INTERPRET
_pdl_devices: dict = {}


def pdl_ok(device) -> bool:
    """Whether launches on ``device`` use PDL: on (PDL) and sm_90 or later (griddepcontrol); asked once per device."""
    if not PDL or device.type != "cuda":
        return False
    idx = device.index if device.index is not None else torch.cuda.current_device()
    ok = _pdl_devices.get(idx)
    if ok is None:
        ok = _pdl_devices[idx] = torch.cuda.get_device_capability(idx)[0] >= 9
    return ok
# two planes at M <= 4: both planes in one mma's columns (PAIRS in the kernel)
PAIRS = True
# the STAGES and PFD candidates (see _candidates): opt-in. Twenty-fourth session (H200, int8 M=1, act_split +
# mma in a graph): both right (every candidate's cuda test passed) and slower, none of them in the 10 fastest
# (gate/up 32.0 µs, down 21.3 for the shipped XF + L2P=128 picks)
STAGES_CANDIDATES = False
PFD_CANDIDATES = False

# operands: $0-$3 D; inputs in _mma's order: $4-$7 A, $8 the metadata word, $9-$12 B, $13-$16 C; sparsity selector 0
_MMA_OPS: tl.constexpr = tl.constexpr("{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$9, $10, $11, $12}, {$13, $14, $15, $16}, "
                                      "$8, 0x0;")
_ASM_I8: tl.constexpr = tl.constexpr("mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.s32.s8.s8.s32 "
                                     + _MMA_OPS.value)
_ASM_F8: tl.constexpr = tl.constexpr("mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.f32.e4m3.e4m3.f32 "
                                     + _MMA_OPS.value)
_CONS: tl.constexpr = tl.constexpr("=r,=r,=r,=r," + ",".join(["r"] * 13))
FP8_LO: tl.constexpr = tl.constexpr(FP8_SPLIT_LO)


@triton.jit
def _thread_ids(W: tl.constexpr, ASM: tl.constexpr):
    """[32·W]: each element's thread index. On the GPU read from %tid.x, so every fragment address below names the
    lane that really holds it whatever layout Triton picks (one element per thread here); the interpreter's positions
    stand in for lanes."""
    i = tl.arange(0, 32 * W)
    if ASM:
        i = tl.inline_asm_elementwise("mov.u32 $0, %tid.x;", "=r,r", [i], dtype=tl.int32, is_pure=True, pack=1)
    return i


@triton.jit
def warp_setup(K, K_PER_SPLIT, W: tl.constexpr, ASM: tl.constexpr):
    """The mma kernels' program: (pid_n, pid_k, thread index, g, t, the warp's first row, k_lo, k_hi) for [32·W]
    lane tensors, lane = 4g + t; each warp owns 16 rows of program pid_n's 16·W and the K range [k_lo, k_hi)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    tid = _thread_ids(W, ASM)
    lane = tid & 31
    k_lo = pid_k * K_PER_SPLIT
    return (pid_n, pid_k, tid, lane >> 2, lane & 3, pid_n * (16 * W) + 16 * (tid >> 5), k_lo,
            tl.minimum(k_lo + K_PER_SPLIT, K))


@triton.jit
def _bytes16(r0, r1, r2, r3, W: tl.constexpr):
    """[W, 32, 16]: byte p of each lane's 4 words (word p // 4, byte p % 4), 0..255."""
    p = tl.arange(0, 16)[None, None, :]
    reg = p >> 2
    w = tl.where(reg == 0, tl.reshape(r0, (W, 32))[:, :, None],
                 tl.where(reg == 1, tl.reshape(r1, (W, 32))[:, :, None],
                          tl.where(reg == 2, tl.reshape(r2, (W, 32))[:, :, None], tl.reshape(r3, (W, 32))[:, :, None])))
    return (w >> (8 * (p & 3))) & 0xFF


@triton.jit
def _byte_value(u, VALUE: tl.constexpr):
    if VALUE == "int8":
        r = (u << 24) >> 24
    else:
        r = u.to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)
    return r


@triton.jit
def _mma_emu(c, a0, a1, a2, a3, e, b, VALUE: tl.constexpr, W: tl.constexpr):
    """The warp product of one mma.sp m16n8k64 from the lanes' registers, by the fragment rules of the module
    docstring, for the interpreter (one-hot contractions: slow, small shapes only)."""
    L = tl.arange(0, 32)[None, :, None]
    p = tl.arange(0, 16)[None, None, :]
    kk = tl.arange(0, 64)[None, None, None, :, None]
    av = _byte_value(_bytes16(a0, a1, a2, a3, W), VALUE)                           # [W, 32, 16]
    # the metadata of A byte p of lane (g, t): row g + 8·((p >> 2) & 1), group q = 2t + ((p >> 1) & 1) + 8·(p >> 3)
    # sits in lane 4g + ((p >> 2) & 1) + 2·(p >> 3), nibble q % 8
    src = 4 * (L >> 2) + ((p >> 2) & 1) + 2 * (p >> 3)                              # [1, 32, 16]
    lanes = tl.arange(0, 32)[None, None, None, :]
    es = tl.sum(tl.where(src[:, :, :, None] == lanes, tl.reshape(e, (W, 32))[:, None, None, :], 0), axis=3)
    nib = (es >> (4 * (2 * (L & 3) + ((p >> 1) & 1)))) & 0xF
    ka = 4 * (2 * (L & 3) + ((p >> 1) & 1) + 8 * ((p >> 3) & 1)) + ((nib >> (2 * (p & 1))) & 3)  # A's K column
    row = (L >> 2) + 8 * ((p >> 2) & 1)                                             # A's row
    bv = _byte_value(_bytes16(b[0], b[1], b[2], b[3], W), VALUE)                     # [W, 32, 16]
    kb = (16 * (p >> 2) + 4 * (L & 3) + (p & 3))[:, :, :, None, None]               # B's K column
    nb = (L >> 2)[:, :, :, None, None]                                              # B's token
    nn = tl.arange(0, 8)[None, None, None, None, :]
    bd = tl.where((kb == kk) & (nb == nn), bv[:, :, :, None, None], 0)
    bd = tl.sum(tl.reshape(bd, (W, 512, 64, 8)), axis=1)                            # dense B [W, 64, 8]
    gb = tl.sum(tl.where(ka[:, :, :, None, None] == kk, bd[:, None, None, :, :], 0), axis=3)  # [W, 32, 16, 8]
    prod = av[:, :, :, None] * gb
    mm = tl.arange(0, 16)[None, None, None, :, None]
    d = tl.where(row[:, :, :, None, None] == mm, prod[:, :, :, None, :], 0)         # [W, 32, 16, 16, 8]
    d = tl.sum(tl.reshape(d, (W, 512, 16, 8)), axis=1)                             # D [W, 16, 8]
    return add_d_frags(c, d, W)


@triton.jit
def add_d_frags(c, d, W: tl.constexpr):
    """c (4 accumulators per lane) + the warps' dense D [W, 16, 8] in the m16n8 D fragment: lane (g, t) holds rows
    g / g+8, columns 2t / 2t+1 (interpreter emulation of the mma instructions)."""
    Lo = tl.arange(0, 32)[None, :, None, None]
    mo = tl.arange(0, 16)[None, None, :, None]
    no = tl.arange(0, 8)[None, None, None, :]
    out0 = tl.sum(tl.sum(tl.where((mo == (Lo >> 2)) & (no == 2 * (Lo & 3)), d[:, None, :, :], 0), axis=3), axis=2)
    out1 = tl.sum(tl.sum(tl.where((mo == (Lo >> 2)) & (no == 2 * (Lo & 3) + 1), d[:, None, :, :], 0), axis=3), axis=2)
    out2 = tl.sum(tl.sum(tl.where((mo == (Lo >> 2) + 8) & (no == 2 * (Lo & 3)), d[:, None, :, :], 0), axis=3), axis=2)
    out3 = tl.sum(tl.sum(tl.where((mo == (Lo >> 2) + 8) & (no == 2 * (Lo & 3) + 1), d[:, None, :, :], 0), axis=3),
                  axis=2)
    return (c[0] + tl.reshape(out0, (32 * W,)), c[1] + tl.reshape(out1, (32 * W,)),
            c[2] + tl.reshape(out2, (32 * W,)), c[3] + tl.reshape(out3, (32 * W,)))


@triton.jit
def _mma(c, a0, a1, a2, a3, e, b, VALUE: tl.constexpr, W: tl.constexpr, ASM: tl.constexpr):
    """c (4 accumulators) + one mma.sp m16n8k64 of the A fragment (a0..a3, e) with the B fragment b (4 words)."""
    if not ASM:
        r = _mma_emu(c, a0, a1, a2, a3, e, b, VALUE, W)
    elif VALUE == "int8":
        r = tl.inline_asm_elementwise(_ASM_I8, _CONS, (a0, a1, a2, a3, e) + b + c,
                                      dtype=(tl.int32, tl.int32, tl.int32, tl.int32), is_pure=True, pack=1)
    else:
        r = tl.inline_asm_elementwise(_ASM_F8, _CONS, (a0, a1, a2, a3, e) + b + c,
                                      dtype=(tl.float32, tl.float32, tl.float32, tl.float32), is_pure=True, pack=1)
    return r


@triton.jit
def _zeros4(W: tl.constexpr, VALUE: tl.constexpr):
    dt: tl.constexpr = tl.int32 if VALUE == "int8" else tl.float32
    z = tl.zeros((32 * W,), dtype=dt)
    return (z, z, z, z)


@triton.jit
def zero_accs(NB: tl.constexpr, W: tl.constexpr, VALUE: tl.constexpr):
    """4·NB zero accumulators (4 per B column set: the mma D fragment)."""
    r = _zeros4(W, VALUE)
    if NB >= 2:
        r = r + _zeros4(W, VALUE)
    if NB == 4:
        r = r + _zeros4(W, VALUE) + _zeros4(W, VALUE)
    return r


@triton.jit
def _ld(p, N: tl.constexpr, ASM: tl.constexpr, STREAM: tl.constexpr = False, PURE: tl.constexpr = True,
        L2P: tl.constexpr = 0):
    """N (2 or 4) consecutive words at the int32 pointers p (4N-byte aligned): one vector load per lane on the GPU.
    STREAM (the weights, read once): ld.global.nc.L1::no_allocate, so the streamed weights do not evict the x planes
    that every step re-reads from L1 (ncu: L1 hit rate 19% without it). The planes: a plain ld.global (coherent:
    with SPLIT_X the program wrote them itself). PURE False: neither LLVM nor ptxas moves the load below a FENCE
    barrier (plain ld.global: ptxas reorders .nc loads across bar.sync). L2P (0, 128 or 256: a streamed load's L2
    prefetch size): L2 fetches that many bytes around each miss, so the next iteration's lines of the same rows are
    on their way without holding registers."""
    L2P_SFX: tl.constexpr = ".L2::256B" if L2P == 256 else ".L2::128B" if L2P == 128 else ""
    # W_EVICT (fused.kernels): the streamed weights' L2 policy, as tl.load gives it (createpolicy + cache_hint)
    EF: tl.constexpr = W_EVICT == "evict_first"
    PRE: tl.constexpr = "{ .reg .b64 %pol; createpolicy.fractional.L2::evict_first.b64 %pol, 1.0; " if EF else ""
    HINT: tl.constexpr = ".L2::cache_hint" if EF else ""
    LD: tl.constexpr = PRE + ("ld.global.nc" if PURE else "ld.global") + ".L1::no_allocate" + HINT + L2P_SFX
    if ASM:
        if N == 4:
            r = tl.inline_asm_elementwise((LD + ".v4.b32 {$0, $1, $2, $3}, [$4]" + (", %pol; }" if EF else ";"))
                                          if STREAM else "ld.global.v4.b32 {$0, $1, $2, $3}, [$4];",
                                          "=r,=r,=r,=r,l", [p],
                                          dtype=(tl.int32, tl.int32, tl.int32, tl.int32), is_pure=PURE, pack=1)
        else:
            r = tl.inline_asm_elementwise((LD + ".v2.b32 {$0, $1}, [$2]" + (", %pol; }" if EF else ";"))
                                          if STREAM else "ld.global.v2.b32 {$0, $1}, [$2];", "=r,=r,l", [p],
                                          dtype=(tl.int32, tl.int32), is_pure=PURE, pack=1)
    elif N == 4:
        r = (tl.load(p), tl.load(p + 1), tl.load(p + 2), tl.load(p + 3))
    else:
        r = (tl.load(p), tl.load(p + 1))
    return r


@triton.jit
def _w_offsets(row0, g, t, k0, K, stride_vw):
    """Word offsets of a lane's step-k0 weights: its 16-byte run of row g (row g+8: + 8 rows) and its 8-byte run of
    the step's first meta tile (the second: + 128 words). Their alignment stated here (a hint set on a call's result
    is lost when Triton inlines the call): with it each lane's words of a Triton-loaded tile stay in one thread
    (Triton 3.9 otherwise split a row over two threads and converted back: 8 layout conversions per step)."""
    ro = (row0 + g).to(tl.int64) * stride_vw + (k0 // 8 + 4 * t)
    mo = ((row0 // 64) * (K // 64) + k0 // 64) * 128 + ((row0 % 64) // 16) * 32 + 4 * g + 2 * (t >> 1)
    return tl.multiple_of(ro, 4), tl.multiple_of(mo, 2)


@triton.jit
def _fetch_w(vw, mw, row0, g, t, k0, K, stride_vw, ASM: tl.constexpr, FENCE: tl.constexpr = False,
             L2P: tl.constexpr = 0):
    """A warp's weights for one 128-column step, 12 words per lane: rows g and g+8, packed bytes 16t .. 16t+15 of
    the step (one 16-byte load each), and words 4g + 2(t // 2), +1 of the step's two meta tiles (8 bytes each)."""
    ro, mo = _w_offsets(row0, g, t, k0, K, stride_vw)
    ra = vw + ro
    mb = mw + mo
    return (_ld(ra, 4, ASM, True, not FENCE, L2P) + _ld(ra + 8 * stride_vw, 4, ASM, True, not FENCE, L2P)
            + _ld(mb, 2, ASM, True, not FENCE, L2P) + _ld(mb + 128, 2, ASM, True, not FENCE, L2P))


@triton.jit
def _words(v, N: tl.constexpr):
    """[32·W, N] (each lane's N words, N = 2 or 4) -> a tuple of N [32·W] tensors."""
    if N == 2:
        a, b = tl.split(v)
        r = (a, b)
    else:
        lo, hi = tl.split(tl.reshape(v, (v.shape[0], 2, 2)))  # words (0, 2), (1, 3)
        a, c = tl.split(lo)
        b, d = tl.split(hi)
        r = (a, b, c, d)
    return r


@triton.jit
def _fetch_w_tl(vw, mw, row0, g, t, k0, K, stride_vw):
    """_fetch_w with Triton loads of [32·W, 4] / [32·W, 2] word tiles (one row per lane), which a tl.range loop with
    num_stages can pipeline through shared memory (cp.async): the weights in flight then hold no registers."""
    ro, mo = _w_offsets(row0, g, t, k0, K, stride_vw)  # aligned runs: one vector per lane, in its own thread
    ra = vw + ro[:, None] + tl.arange(0, 4)[None, :]
    mb = mw + mo[:, None] + tl.arange(0, 2)[None, :]
    return (_words(tl.load(ra), 4) + _words(tl.load(ra + 8 * stride_vw), 4) + _words(tl.load(mb), 2)
            + _words(tl.load(mb + 128), 2))


@triton.jit
def _prefetch_w(vw, mw, row0, g, t, k0, K, stride_vw, ASM: tl.constexpr):
    """prefetch.global.L2 of what _fetch_w(k0) will load (no register is held while the lines come from DRAM)."""
    if ASM:
        ro, mo = _w_offsets(row0, g, t, k0, K, stride_vw)
        prefetch_l2(vw + ro)
        prefetch_l2(vw + ro + 8 * stride_vw)
        prefetch_l2(mw + mo)
        prefetch_l2(mw + mo + 128)


@triton.jit
def _b_frags(xw, base, n3, ASM: tl.constexpr):
    """One x plane's B fragments for the step's two mma (8 words; mma m's are words 4m .. 4m+3): x words 8h + n3 +
    {0, 16, 4, 20} (+2 for mma 1) of the 128-column block, h = t // 2, n3 = t % 2 (base: the lane's word 8h)."""
    x0 = _ld(xw + base, 4, ASM)
    x1 = _ld(xw + base + 4, 4, ASM)
    x2 = _ld(xw + base + 16, 4, ASM)
    x3 = _ld(xw + base + 20, 4, ASM)
    odd = n3 == 1
    return (tl.where(odd, x0[1], x0[0]), tl.where(odd, x2[1], x2[0]), tl.where(odd, x1[1], x1[0]),
            tl.where(odd, x3[1], x3[0]), tl.where(odd, x0[3], x0[2]), tl.where(odd, x2[3], x2[2]),
            tl.where(odd, x1[3], x1[2]), tl.where(odd, x3[3], x3[2]))


@triton.jit
def _x_frags(xw, xrow0, xrow1, xp, kw, n3, NT: tl.constexpr, PLANES: tl.constexpr, ASM: tl.constexpr):
    """The step's B fragment sets (plane-major, then token tile) at word kw of K."""
    b = _b_frags(xw, xrow0 + kw, n3, ASM)
    if NT == 2:
        b = b + _b_frags(xw, xrow1 + kw, n3, ASM)
    if PLANES == 2:
        b = b + _b_frags(xw, xp + xrow0 + kw, n3, ASM)
        if NT == 2:
            b = b + _b_frags(xw, xp + xrow1 + kw, n3, ASM)
    return b


@triton.jit
def _live(w, ok, EVEN: tl.constexpr):
    """Fetched weights w, their values zeroed unless ok (a step past the range)."""
    r = w
    if not EVEN:
        r = (tl.where(ok, w[0], 0), tl.where(ok, w[1], 0), tl.where(ok, w[2], 0), tl.where(ok, w[3], 0),
             tl.where(ok, w[4], 0), tl.where(ok, w[5], 0), tl.where(ok, w[6], 0), tl.where(ok, w[7], 0),
             w[8], w[9], w[10], w[11])
    return r


@triton.jit
def _meta_word(w0, w1, n3, ASM: tl.constexpr):
    """Bytes n3, 2 + n3 of w0 then of w1: the lane's metadata word from its two tiles' words."""
    if ASM:
        r = tl.inline_asm_elementwise("prmt.b32 $0, $1, $2, $3;", "=r,r,r,r", [w0, w1, 0x6420 + 0x1111 * n3],
                                      dtype=tl.int32, is_pure=True, pack=1)
    else:
        sh = 8 * n3
        r = (((w0 >> sh) & 0xFF) | (((w0 >> (sh + 16)) & 0xFF) << 8) | (((w1 >> sh) & 0xFF) << 16)
             | (((w1 >> (sh + 16)) & 0xFF) << 24))
    return r


@triton.jit
def _mma_pair(c, w, e0, e1, b, i: tl.constexpr, VALUE: tl.constexpr, W: tl.constexpr, ASM: tl.constexpr):
    """c + the step's two mma.sp with B fragment set i (b[8i .. 8i+7])."""
    c = _mma(c, w[0], w[4], w[2], w[6], e0, (b[8 * i], b[8 * i + 1], b[8 * i + 2], b[8 * i + 3]), VALUE, W, ASM)
    return _mma(c, w[1], w[5], w[3], w[7], e1, (b[8 * i + 4], b[8 * i + 5], b[8 * i + 6], b[8 * i + 7]), VALUE, W,
                ASM)


@triton.jit
def _step(acc, w, b, n3, VALUE: tl.constexpr, NB: tl.constexpr, W: tl.constexpr, ASM: tl.constexpr):
    """One 16-row x 128-column step of a warp from its fetched weights w (_fetch_w): 2·NB mma.sp (x planes x token
    tiles) into acc (4·NB accumulators, B fragment set i is b[8i .. 8i+7])."""
    e0 = _meta_word(w[8], w[10], n3, ASM)
    e1 = _meta_word(w[9], w[11], n3, ASM)
    r = _mma_pair((acc[0], acc[1], acc[2], acc[3]), w, e0, e1, b, 0, VALUE, W, ASM)
    if NB >= 2:
        r = r + _mma_pair((acc[4], acc[5], acc[6], acc[7]), w, e0, e1, b, 1, VALUE, W, ASM)
    if NB == 4:
        r = r + _mma_pair((acc[8], acc[9], acc[10], acc[11]), w, e0, e1, b, 2, VALUE, W, ASM)
        r = r + _mma_pair((acc[12], acc[13], acc[14], acc[15]), w, e0, e1, b, 3, VALUE, W, ASM)
    return r


@triton.jit
def _token(nt: tl.constexpr, i: tl.constexpr, t, PAIRS: tl.constexpr):
    """The token of accumulator i of token tile nt in lane (g, t): column 2t + (i & 1) of the mma, or with PAIRS
    (columns 2·token + plane) token t."""
    if PAIRS:
        r = t
    else:
        r = nt * 8 + 2 * t + (i & 1)
    return r


@triton.jit
def _planes(acc, NT: tl.constexpr, PLANES: tl.constexpr, VALUE: tl.constexpr, nt: tl.constexpr, i: tl.constexpr,
            PAIRS: tl.constexpr = False):
    """fp32 x·wᵀ (in units of the token scale) of accumulator i of token tile nt, the planes combined (PAIRS: the
    lo plane's product is accumulator i + 1 of the same lane)."""
    r = acc[nt * 4 + i].to(tl.float32)
    if PLANES == 2:
        if PAIRS:
            lo = acc[i + 1].to(tl.float32)
        else:
            lo = acc[(NT + nt) * 4 + i].to(tl.float32)
        if VALUE == "int8":
            r = r * 256.0 + lo
        else:
            r = r + lo * (1.0 / FP8_LO)
    return r


@triton.jit
def _sum_parts(part, slot, tid, mask, NS: tl.constexpr, SPLIT_K: tl.constexpr, W: tl.constexpr):
    """The SPLIT_K partials of accumulator ``slot`` summed in a fixed order (deterministic)."""
    tot = tl.zeros((32 * W,), dtype=tl.float32)
    for s in range(SPLIT_K):
        tot += tl.load(part + (s * NS + slot) * (32 * W) + tid, mask=mask, other=0.0, cache_modifier=".cg")
    return tot


@triton.jit
def mma_epilogue(gacc, uacc, part_ptr, count_ptr, xs_row, ws_ptr, b_ptr, y_ptr, pid_n, pid_k, tid, row0, M, N,
                 stride_ym, stride_yn, NT: tl.constexpr, PLANES: tl.constexpr, VALUE: tl.constexpr,
                 PAIRS: tl.constexpr, GATED: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
                 SPLIT_K: tl.constexpr, W: tl.constexpr, SPLIT_X: tl.constexpr):
    """The mma decode kernels' end (sparse24_mma, w8_mma): a warp's accumulators (4 per token tile and plane set, the
    mma D fragments) -> y, with split-K over programs. SPLIT_X: xs_row holds this program's per-range token scales."""
    NS: tl.constexpr = 4 * NT * (2 if GATED else 1)  # split-K partials per lane (planes combined)
    lane = tid & 31
    g = lane >> 2
    t = lane & 3
    # split-K: each program stores its accumulators with the planes combined (fp32), for the tokens that exist only;
    # the last to arrive sums them in a fixed order and runs the epilogue
    part = part_ptr + (pid_n * SPLIT_K).to(tl.int64) * (NS * 32 * W)
    live = tid >= 0  # per lane (a scalar mask is not taken by the interpreter's loads)
    last = pid_k == 0
    if SPLIT_K > 1:
        mine = part + pid_k * (NS * 32 * W) + tid
        for nt in tl.static_range(NT):
            for i in tl.static_range(4):
                if (not PAIRS) or (i % 2 == 0):  # PAIRS: 1 and 3 are the lo planes of 0 and 2
                    ok = _token(nt, i, t, PAIRS) < M
                    xsl = 1.0
                    if SPLIT_X:  # each range has its own token scales: the partials carry them
                        xsl = tl.load(xs_row + _token(nt, i, t, PAIRS), mask=ok, other=0.0)
                    tl.store(mine + (nt * 4 + i) * (32 * W), _planes(gacc, NT, PLANES, VALUE, nt, i, PAIRS) * xsl,
                             mask=ok)
                    if GATED:
                        tl.store(mine + (4 * NT + nt * 4 + i) * (32 * W),
                                 _planes(uacc, NT, PLANES, VALUE, nt, i, PAIRS) * xsl, mask=ok)
        tl.debug_barrier()  # every lane's partials are issued before the release below
        count = tl.atomic_add(count_ptr + pid_n, 1, sem="acq_rel")
        last = count == SPLIT_K - 1
        live = (tid * 0 + count) == SPLIT_K - 1

    for nt in tl.static_range(NT):
        for i in tl.static_range(4):
            if (not PAIRS) or (i % 2 == 0):
                tok = _token(nt, i, t, PAIRS)
                row = row0 + g + 8 * (i >> 1)
                ok = (tok < M) & live
                if SPLIT_X and SPLIT_K > 1:
                    xs = 1.0
                else:
                    xs = tl.load(xs_row + tok, mask=tok < M, other=0.0)
                if SPLIT_K > 1:
                    y = _sum_parts(part, nt * 4 + i, tid, ok, NS, SPLIT_K, W)
                else:
                    y = _planes(gacc, NT, PLANES, VALUE, nt, i, PAIRS)
                y = y * xs * tl.load(ws_ptr + row)
                if HAS_BIAS:
                    y += tl.load(b_ptr + row).to(tl.float32)
                y = activation(y, ACT)
                if GATED:
                    if SPLIT_K > 1:
                        u = _sum_parts(part, 4 * NT + nt * 4 + i, tid, ok, NS, SPLIT_K, W)
                    else:
                        u = _planes(uacc, NT, PLANES, VALUE, nt, i, PAIRS)
                    u = u * xs * tl.load(ws_ptr + N + row)
                    if HAS_BIAS:
                        u += tl.load(b_ptr + N + row).to(tl.float32)
                    y = y * u
                tl.store(y_ptr + tok * stride_ym + row * stride_yn, y.to(y_ptr.dtype.element_ty), mask=ok)
    if SPLIT_K > 1:
        tl.atomic_xchg(count_ptr + pid_n, 0, mask=last)  # ready for the next call


@triton.jit
def _split_x(x_ptr, stride_x0, stride_x1, q_ptr, s_ptr, M, k_lo, k_hi, KP, TOK: tl.constexpr,
             VALUE: tl.constexpr, QMAX: tl.constexpr, MIN_S: tl.constexpr, HAND_ROUND: tl.constexpr):
    """SPLIT_X: the program's own planes of its K range [k_lo, k_hi) of the 16-bit x (act_split's two, with a scale
    per token and K range: finer than per token) to q_ptr [2, M, KP] (columns from k_lo) and the scales to s_ptr [M]
    (NaN for a range holding NaN/Inf). All threads of the program; the caller's barrier publishes them."""
    tok = tl.arange(0, TOK)[:, None]
    cols = tl.arange(0, 128)[None, :]
    amax = tl.zeros((TOK,), dtype=tl.float32)
    nans = tl.zeros((TOK,), dtype=tl.float32)
    for kc in range(k_lo, k_hi, 128):
        xt = tl.load(x_ptr + tok * stride_x0 + (kc + cols) * stride_x1, mask=tok < M, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.max(tl.abs(xt), axis=1))
        nans += tl.sum(tl.where(tl.abs(xt) < float("inf"), 0.0, 1.0), axis=1)
    bad = nans > 0
    scale = tl.maximum(amax / QMAX, MIN_S)
    inv = reciprocal(scale)[:, None]
    for kc in range(k_lo, k_hi, 128):
        xt = tl.load(x_ptr + tok * stride_x0 + (kc + cols) * stride_x1, mask=tok < M, other=0.0).to(tl.float32)
        xt = tl.where(bad[:, None], 0.0, xt)
        if VALUE == "int8":
            hi, lo = split_planes(xt, inv, QMAX)
        else:
            hi, lo = split_planes_fp8(xt, inv, QMAX, FP8_LO, HAND_ROUND)
        dst = q_ptr + tok * KP + (kc - k_lo + cols)
        tl.store(dst, hi.to(q_ptr.dtype.element_ty, bitcast=True), mask=tok < M)
        tl.store(dst + M * KP, lo.to(q_ptr.dtype.element_ty, bitcast=True), mask=tok < M)
    tl.store(s_ptr + tl.arange(0, TOK), tl.where(bad, float("nan"), scale), mask=tl.arange(0, TOK) < M)


@triton.jit
def _sparse24_mma_kernel(
    xq_ptr, xs_ptr, v_ptr, m_ptr, ws_ptr, b_ptr, y_ptr, part_ptr, count_ptr, x_ptr,
    M, N, K, K_PER_SPLIT, stride_xp, stride_xm, stride_vn, stride_ym, stride_yn, stride_x0, stride_x1,
    VALUE: tl.constexpr, PLANES: tl.constexpr, NT: tl.constexpr, GATED: tl.constexpr, HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr, SPLIT_K: tl.constexpr, W: tl.constexpr, U: tl.constexpr, EVEN: tl.constexpr,
    ASM: tl.constexpr, FENCE: tl.constexpr = False,
    SPLIT_X: tl.constexpr = False, QMAX: tl.constexpr = 1.0, MIN_S: tl.constexpr = 1.0,
    HAND_ROUND: tl.constexpr = False, PDL: tl.constexpr = False, PAIRS: tl.constexpr = False,
    XF: tl.constexpr = False, L2P: tl.constexpr = 0, PFD: tl.constexpr = 0, STAGES: tl.constexpr = 1,
):
    """SPLIT_X: xq_ptr / xs_ptr are this call's scratch (planes [programs, 2, M, K_PER_SPLIT], scales [programs,
    16]) and x_ptr the 16-bit x: each program splits its own K range first (no act_split launch).
    PAIRS (two planes, M <= 4): the mma's 8 columns are (token, plane) pairs, column 2·token + plane, so one mma.sp
    per 64 columns serves both planes (half the mma.sp and x loads of one column set per plane)."""
    NB: tl.constexpr = 1 if PAIRS else PLANES * NT
    pid_n, pid_k, tid, g, t, row0, k_lo, k_hi = warp_setup(K, K_PER_SPLIT, W, ASM)
    vw = v_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    mw = m_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    xw = xq_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    stride_vw = stride_vn // 4
    xs_row = xs_ptr
    if SPLIT_X:  # the program's planes, column 0 = k_lo; the lanes below address them as if they started at 0
        if PDL:
            gdc_wait()
        prog = pid_k * tl.num_programs(0) + pid_n
        q_own = xq_ptr + prog.to(tl.int64) * (2 * M * K_PER_SPLIT)
        xs_row = xs_ptr + prog * 16
        _split_x(x_ptr, stride_x0, stride_x1, q_own, xs_row, M, k_lo, k_hi, K_PER_SPLIT, 8 * NT, VALUE, QMAX, MIN_S,
                 HAND_ROUND)
        tl.debug_barrier()  # every thread's planes are written before any lane reads them
        xw = (q_own + (0 - k_lo)).to(tl.pointer_type(tl.int32), bitcast=True)
    # B fragment set i = plane (i // NT), tokens 8·(i % NT) + g: rows past M read token M - 1 (their outputs are
    # never stored), so the loads need no mask
    n3 = t & 1
    xp = stride_xp // 4
    if PAIRS:  # column g: token g // 2 of plane g % 2
        xrow0 = (g & 1) * xp + tl.minimum(g >> 1, M - 1) * (stride_xm // 4) + 8 * (t >> 1)
    else:
        xrow0 = tl.minimum(g, M - 1) * (stride_xm // 4) + 8 * (t >> 1)
    xrow1 = tl.minimum(8 + g, M - 1) * (stride_xm // 4) + 8 * (t >> 1)
    XNT: tl.constexpr = 1 if PAIRS else NT  # the fragment sets _x_frags loads
    XPL: tl.constexpr = 1 if PAIRS else PLANES
    gacc = zero_accs(NB, W, VALUE)
    uacc = gacc
    # U steps of weights loaded at the top of each iteration, none carried to the next: a loop-carried load result
    # is copied at the back edge and the copy waits for the load (sm_90 SASS of the first form, weights prefetched
    # one step ahead: 16 IMAD.MOV right after the loads, so every step waited a full DRAM latency). Steps past the
    # range (only when K_PER_SPLIT does not divide K: EVEN false) re-read the last one with its values zeroed.
    if STAGES > 1:  # one step per iteration, its weights streamed by Triton's pipeliner (cp.async, STAGES deep)
        for k0 in tl.range(k_lo, k_hi, 128, num_stages=STAGES):
            wa = _fetch_w_tl(vw, mw, row0, g, t, k0, K, stride_vw)
            ua = wa
            if GATED:
                ua = _fetch_w_tl(vw, mw, row0 + N, g, t, k0, K, stride_vw)
            if PDL:
                gdc_wait()
            b = _x_frags(xw, xrow0, xrow1, xp, k0 // 4, n3, XNT, XPL, ASM)
            gacc = _step(gacc, wa, b, n3, VALUE, NB, W, ASM)
            if GATED:
                uacc = _step(uacc, ua, b, n3, VALUE, NB, W, ASM)
    for k0 in range(k_lo, k_hi if STAGES == 1 else k_lo, 128 * U):
        wa = _fetch_w(vw, mw, row0, g, t, k0, K, stride_vw, ASM, FENCE, L2P)
        ua = wa
        if GATED:
            ua = _fetch_w(vw, mw, row0 + N, g, t, k0, K, stride_vw, ASM, FENCE, L2P)
        kb = tl.minimum(k0 + 128, k_hi - 128)  # U >= 2 (the candidates' U is 2 or 4)
        wb = _fetch_w(vw, mw, row0, g, t, kb, K, stride_vw, ASM, FENCE, L2P)
        ub = wb
        if GATED:
            ub = _fetch_w(vw, mw, row0 + N, g, t, kb, K, stride_vw, ASM, FENCE, L2P)
        if U == 4:
            kc = tl.minimum(k0 + 256, k_hi - 128)
            kd = tl.minimum(k0 + 384, k_hi - 128)
            wc = _fetch_w(vw, mw, row0, g, t, kc, K, stride_vw, ASM, FENCE, L2P)
            wd = _fetch_w(vw, mw, row0, g, t, kd, K, stride_vw, ASM, FENCE, L2P)
            uc = wc
            ud = wd
            if GATED:
                uc = _fetch_w(vw, mw, row0 + N, g, t, kc, K, stride_vw, ASM, FENCE, L2P)
                ud = _fetch_w(vw, mw, row0 + N, g, t, kd, K, stride_vw, ASM, FENCE, L2P)
        if PFD > 0:  # the weights PFD iterations ahead into L2: DRAM bytes in flight not bounded by registers
            for j in tl.static_range(U):
                kp = tl.minimum(k0 + (PFD * U + j) * 128, K - 128)  # past the range: the next range's, same weight
                _prefetch_w(vw, mw, row0, g, t, kp, K, stride_vw, ASM)
                if GATED:
                    _prefetch_w(vw, mw, row0 + N, g, t, kp, K, stride_vw, ASM)
        if PDL:  # the planes come from the kernel before: written once it has finished (a no-op after the first)
            gdc_wait()
        if XF:  # the x fragments too before the barrier: their (L1 / L2) latency overlaps the weights' instead of
            # following it (sm_90 SASS without: the x loads issued after the barrier, each step's mma waiting on them)
            b = _x_frags(xw, xrow0, xrow1, xp, k0 // 4, n3, XNT, XPL, ASM)
            bb = _x_frags(xw, xrow0, xrow1, xp, kb // 4, n3, XNT, XPL, ASM)
            if U == 4:
                bc = _x_frags(xw, xrow0, xrow1, xp, kc // 4, n3, XNT, XPL, ASM)
                bd = _x_frags(xw, xrow0, xrow1, xp, kd // 4, n3, XNT, XPL, ASM)
        if FENCE:  # ptxas may not sink the loads below a barrier: all U steps' weights in flight at once
            tl.debug_barrier()
        if not XF:
            b = _x_frags(xw, xrow0, xrow1, xp, k0 // 4, n3, XNT, XPL, ASM)
        gacc = _step(gacc, wa, b, n3, VALUE, NB, W, ASM)
        if GATED:
            uacc = _step(uacc, ua, b, n3, VALUE, NB, W, ASM)
        ok = k0 + 128 < k_hi
        if not XF:
            bb = _x_frags(xw, xrow0, xrow1, xp, kb // 4, n3, XNT, XPL, ASM)
        gacc = _step(gacc, _live(wb, ok, EVEN), bb, n3, VALUE, NB, W, ASM)
        if GATED:
            uacc = _step(uacc, _live(ub, ok, EVEN), bb, n3, VALUE, NB, W, ASM)
        if U == 4:
            ok = k0 + 256 < k_hi
            if not XF:
                bc = _x_frags(xw, xrow0, xrow1, xp, kc // 4, n3, XNT, XPL, ASM)
            gacc = _step(gacc, _live(wc, ok, EVEN), bc, n3, VALUE, NB, W, ASM)
            if GATED:
                uacc = _step(uacc, _live(uc, ok, EVEN), bc, n3, VALUE, NB, W, ASM)
            ok = k0 + 384 < k_hi
            if not XF:
                bd = _x_frags(xw, xrow0, xrow1, xp, kd // 4, n3, XNT, XPL, ASM)
            gacc = _step(gacc, _live(wd, ok, EVEN), bd, n3, VALUE, NB, W, ASM)
            if GATED:
                uacc = _step(uacc, _live(ud, ok, EVEN), bd, n3, VALUE, NB, W, ASM)

    if PDL:  # nothing is written, and no token scale read, before the kernel before has finished (a program with
        gdc_wait()  # an empty range never waited in the loop)
    mma_epilogue(gacc, uacc, part_ptr, count_ptr, xs_row, ws_ptr, b_ptr, y_ptr, pid_n, pid_k, tid, row0, M, N,
                 stride_ym, stride_yn, NT, PLANES, VALUE, PAIRS, GATED, HAS_BIAS, ACT, SPLIT_K, W, SPLIT_X)


def _candidates(M: int, N: int, K: int, gated: bool) -> list[dict]:
    """Warps per program (16 rows each), K split, U (128-column steps whose weights a warp loads per iteration) and
    FENCE (a barrier after those loads, so ptxas issues them all before the first mma instead of next to their use:
    U = 4 gated then holds 10 KB in flight per warp, 184 registers) and XF (the x fragments loaded before that
    barrier too); the first is the heuristic default. The split counts 16-row tiles, a gated one twice (its warp
    reads gate and up rows)."""
    # ~4224 (16-row tile, K range) items: 32 warps per SM on the H200
    s = _split_for(N // 16 * (2 if gated else 1), K, 128, target=4224)
    out = []
    for w, sp, u, fence, xf in ((1, s, 4, True, 0), (4, s, 4, True, 0), (2, s, 4, True, 0), (1, s, 2, True, 0),
                                (4, s, 2, True, 0), (4, s // 2, 4, True, 0), (1, 2 * s, 2, True, 0),
                                (4, s, 4, False, 0), (4, s, 2, False, 0), (1, s, 2, False, 0),
                                (1, s, 2, True, 1), (4, s, 2, True, 1), (4, s // 2, 4, True, 1), (1, s, 4, True, 1),
                                (4, s, 2, True, 3), (1, s, 2, True, 3), (4, s // 2, 4, True, 3),
                                (4, s, 2, True, 4), (4, s, 2, True, 5), (1, s, 2, True, 4), (4, s // 2, 4, True, 4)):
        sp = max(1, min(sp, K // (128 * u)))  # a short K gets fewer ranges (each at least U steps), not no config
        # xf: 1 XF, 3 XF with an L2 prefetch size of 128 bytes on the weights' loads (2: 256 bytes, slower on the
        # H200 and no longer offered), 4 / 5 as 3 with the weights one / two iterations ahead prefetched into L2 (PFD)
        cfg = dict(W=w, SPLIT_K=sp, U=u, FENCE=fence, num_warps=w) | (dict(XF=True) if xf else {}) | (
            dict(L2P={2: 256, 3: 128, 4: 128, 5: 128}[xf]) if xf >= 2 else {}) | (dict(PFD=xf - 3) if xf >= 4 else {})
        if N % (16 * w) == 0 and K >= 128 * u and cfg not in out and (xf < 4 or PFD_CANDIDATES):
            out.append(cfg)
    # STAGES: one step per iteration with the weights streamed through shared memory by Triton's pipeliner (cp.async,
    # STAGES - 1 steps ahead: bytes in flight bounded by shared memory, not registers; sm_90: 72 registers gated,
    # 36 KB per 4-warp program at 4 stages). Prepared in the twenty-third session: offered only with
    # sparse24_mma.STAGES_CANDIDATES = True until its cuda tests have passed on the H200 (the tuner times, it does not check)
    for w, sp, st in ((4, s, 3), (4, s, 4), (1, s, 4), (2, s, 4), (4, s // 2, 4)) if STAGES_CANDIDATES else ():
        sp = max(1, min(sp, K // 128))
        cfg = dict(W=w, SPLIT_K=sp, U=1, STAGES=st, num_warps=w)
        if N % (16 * w) == 0 and cfg not in out:
            out.append(cfg)
    return out or [_interpret_config(N, K)]


def _interpret_config(N: int, K: int) -> dict:
    w = 2 if N % 32 == 0 else 1
    return dict(W=w, SPLIT_K=2 if K >= 256 else 1, U=2, FENCE=False, num_warps=w)


def check_mma_args(xq, xs, values, meta, where="sparse24_mma"):
    """Why (xq, xs, values, meta) cannot run on sparse24_mma, or None."""
    if xq.dim() != 3 or values.dim() != 2 or meta.dim() != 3 or meta.shape[2] != 512:
        return f"{where}: planes [P, M, K], values [R, K/2] and tiled meta [R/64, K/64, 512] expected"
    P, M, K = xq.shape
    R = values.shape[0]
    if P not in (1, 2) or not 1 <= M <= 16:
        return f"{where}: 1 or 2 planes of M <= 16 tokens expected, got {tuple(xq.shape)}"
    if values.dtype not in (torch.int8, torch.float8_e4m3fn) or xq.dtype != values.dtype:
        return f"{where}: int8 or float8_e4m3fn values and planes of the same dtype, got {values.dtype}, {xq.dtype}"
    if K % 128 or R % 64 or values.shape[1] * 2 != K or tuple(meta.shape) != (R // 64, K // 64, 512):
        return (f"{where}: K a multiple of 128 and the rows of 64 with values [R, K/2], meta [R/64, K/64, 512]; got "
                f"planes "
                f"{tuple(xq.shape)}, values {tuple(values.shape)}, meta {tuple(meta.shape)}")
    if meta.dtype != torch.uint8 or not meta.is_contiguous() or meta.data_ptr() % 8:
        return f"{where}: meta must be contiguous, 8-byte aligned uint8"
    return check_runs(where, values, "values", xq, xs, M, 16)  # 16-byte vector loads of values and planes


def mma_output(where: str, wscale, R: int, gated: bool, tile: int, M: int, out, out_dtype, dev):
    """(N, y) for an mma kernel's call on R weight rows (gated: gate and up halves of whole ``tile``-row tiles), after
    checking wscale; y is ``out`` (checked) or a new [M, N] tensor."""
    if wscale is None or wscale.dtype != torch.float32 or wscale.shape != (R,):
        raise ValueError(f"{where}: wscale must be fp32 [{R}]")
    if gated and R % (2 * tile):
        raise ValueError(f"{where}: a gated weight needs the gate and up halves in whole {tile}-row tiles, got {R} "
                         "rows")
    N = R // 2 if gated else R
    return N, check_out(out, (M, N), out_dtype, dev) if out is not None else empty((M, N), device=dev, dtype=out_dtype)


def check_runs(where: str, w, wname: str, xq, xs, M: int, align: int):
    """The mma kernels' common checks (sparse24_mma, w8_mma): weight rows and x planes as ``align``-byte aligned runs
    (each lane's vector loads), fp32 token scales [M]. Why not, or None."""
    if w.stride(1) != 1 or w.stride(0) % align or w.data_ptr() % align:
        return f"{where}: {wname} must be rows of {align}-byte aligned runs"
    if xq.stride(2) != 1 or xq.stride(1) % align or xq.stride(0) % align or xq.data_ptr() % align:
        return f"{where}: planes must be rows of {align}-byte aligned runs"
    if xs.dtype != torch.float32 or xs.shape != (M,):
        return f"{where}: token scales must be fp32 [{M}], got {xs.dtype} {tuple(xs.shape)}"
    return None


def sparse24_mma(xq: torch.Tensor, xs: torch.Tensor, values: torch.Tensor, meta: torch.Tensor,
                 wscale: torch.Tensor, bias: torch.Tensor | None = None, act: str = "none", gated: bool = False,
                 out_dtype: torch.dtype = torch.bfloat16, config: dict | None = None,
                 out: torch.Tensor | None = None, pdl: bool = False) -> torch.Tensor:
    """y [M, N] = epilogue((Σ planes) · Wᵀ) for planes xq [P, M <= 16, K] (int8 or e4m3, the values' dtype) with
    token scales xs [M]: P = 2 act_split's (hi, lo), P = 1 act_quant's. values [R, K/2], tiled meta
    [R/64, K/64, 512], wscale [R] fp32; gated: rows [0, N) gate, [N, 2N) up, y = act(g)·u.
    ``pdl``: launched as a programmatic dependent of the kernel before (which made xq, xs and let it start early,
    e.g. act_split(pdl=True)); its programs load their first weights before waiting for it. Off in the interpreter."""
    why = check_mma_args(xq, xs, values, meta)
    if why:
        raise ValueError(why)
    return _run(xq, xs, values, meta, wscale, bias, act, gated, out_dtype, config, out, False, pdl and not INTERPRET)


def sparse24_mma_x(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor, wscale: torch.Tensor,
                   bias: torch.Tensor | None = None, act: str = "none", gated: bool = False,
                   out_dtype: torch.dtype | None = None, config: dict | None = None,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """W8A16 from the 16-bit x [M <= 16, K] itself (any strides): each program splits its K range into act_split's
    two planes (scale per token and range) before its loop, so there is no act_split launch. Otherwise as
    sparse24_mma."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"sparse24_mma_x: 16-bit x [M, K] expected, got "
                         f"{(x.dtype, tuple(x.shape)) if isinstance(x, torch.Tensor) else type(x).__name__}")
    M, K = x.shape
    planes = torch.empty((2, M, K), dtype=values.dtype, device="meta")
    why = check_mma_args(planes, torch.empty(M, device="meta"), values, meta, where="sparse24_mma_x")
    if why:
        raise ValueError(why)
    return _run(x, None, values, meta, wscale, bias, act, gated, out_dtype or x.dtype, config, out, True, False)


def _run(xq, xs, values, meta, wscale, bias, act, gated, out_dtype, config, out, split_x: bool, pdl: bool):
    M, K = xq.shape[-2:]
    P = 2 if split_x else xq.shape[0]
    R = values.shape[0]
    where = "sparse24_mma_x" if split_x else "sparse24_mma"
    dev = xq.device
    N, y = mma_output(where, wscale, R, gated, 64, M, out, out_dtype, dev)
    value = "int8" if values.dtype == torch.int8 else "fp8"
    v = values.view(torch.uint8) if value == "fp8" else values
    nt = 1 if M <= 8 else 2
    pairs = PAIRS and P == 2 and M <= 4

    def launch(cfg):
        w, split = cfg["W"], cfg["SPLIT_K"]
        assert N % (16 * w) == 0, cfg
        u = cfg.get("U", 2)
        k_per = cdiv(cdiv(K, split), 128 * u) * 128 * u  # whole iterations of U steps, the last program's excepted
        split = cdiv(K, k_per)
        tiles = N // (16 * w)
        n_part = tiles * split * (4 * nt * (2 if gated else 1)) * 32 * w
        if split_x:  # the programs' scratch after the partials: scales [programs, 16], planes [programs, 2, M, k_per]
            n_scr = tiles * split * (16 + 2 * M * k_per // 4)
            part, count = buffers(dev, n_part + n_scr, tiles)
            qs = part[n_part:n_part + tiles * split * 16]
            q = part[n_part + tiles * split * 16:n_part + n_scr].view(torch.uint8 if value == "fp8" else torch.int8)
            xsrc, sxp, sxm, x_args = q, M * k_per, k_per, (xq, xq.stride(0), xq.stride(1))
            fp8 = value == "fp8"
            extra = dict(SPLIT_X=True, QMAX=FP8_SPLIT_QMAX if fp8 else float(SPLIT_QMAX), MIN_S=MIN_SCALE,
                         HAND_ROUND=fp8 and INTERPRET)
        else:
            part, count = buffers(dev, n_part, tiles)
            xsrc = xq.view(torch.uint8) if value == "fp8" else xq
            qs, sxp, sxm, x_args, extra = xs, xsrc.stride(0), xsrc.stride(1), (xsrc, 0, 0), {}
        launch_kernel(_sparse24_mma_kernel, (tiles, split),
                      xsrc, qs, v, meta, wscale, bias if bias is not None else wscale, y, part, count, x_args[0],
                      M, N, K, k_per, sxp, sxm, v.stride(0), y.stride(0), y.stride(1), x_args[1], x_args[2],
                      VALUE=value, PLANES=P, NT=nt, GATED=gated, HAS_BIAS=bias is not None, ACT=act, SPLIT_K=split,
                      W=w, U=u, EVEN=K % k_per == 0, ASM=not INTERPRET, FENCE=cfg.get("FENCE", False), num_warps=w,
                      **extra, **(dict(PDL=True, launch_pdl=True) if pdl else {}),
                      **(dict(PAIRS=True) if pairs else {}), **(dict(XF=True) if cfg.get("XF") else {}),
                      **(dict(L2P=cfg["L2P"]) if cfg.get("L2P") else {}),
                      **(dict(PFD=cfg["PFD"]) if cfg.get("PFD") else {}),
                      **(dict(STAGES=cfg["STAGES"]) if cfg.get("STAGES", 1) > 1 else {}))

    if config is None:
        cands = (lambda: [_interpret_config(N, K)]) if INTERPRET else (lambda: _candidates(M, N, K, gated))
        config = pick(where, (m_bucket(M), N, K, gated, P, values.dtype) + (("pairs",) if pairs else ()), cands,
                      launch)
    launch(config)
    return y
