"""Decode (M <= 16) MLP block in one launch as a chain of GEMV items: y = down(h), h = the gated (or fc1-act)
first layer, weight-only 8-bit weights, exactly the arithmetic of the two-launch path (w8a16_gemv twice).

gated:  h = act(x·W_gᵀ·s_g + b_g) ⊙ (x·W_uᵀ·s_u + b_u)   W_g/W_u stacked in w1 [2H, K]
plain:  h = act(x·W_1ᵀ·s_1 + b_1)                        w1 [H, K]
then    y = h·W_2ᵀ·s_2 + b_2                              w2 [D, H]
Reference: fused.reference.mlp_block_ref (weight-only); bit-identical to w8a16_gemv(gated) then
w8a16_gemv(down) with the same tiles (tested).

Why a chain and not slices of H (fused.kernels.decode_block): that kernel reads W_2 in [D, BLOCK_H] column
slices (32-64-byte runs, a DRAM row per run) and sums P·M·D fp32 partials with atomics. Here both layers are
read as the GEMV reads them (K-contiguous tiles, split-K with the fixed-order finish of fused.kernels.splitk),
and the launch saved is the second kernel's ramp and the first one's tail:

* Work items: ITEMS1 first-layer items (h tile, K split), then ITEMS2 down items (y tile, H chunk c). A
  program takes items from a ticket counter (one atomic per item, fetched one item ahead), so items start in
  ticket order whatever the grid size.
* A down item of chunk c reads h[:, c·KPS2 : (c+1)·KPS2], written by the first-layer tiles of that chunk
  (KPS2 is a multiple of BN1): the program that finishes such a tile stores it, then bumps ready[c]
  (release); the down item waits for ready[c] to reach the chunk's tile count (acquire). Down items are
  ticketed chunk by chunk, so while the last first-layer tiles run, the first chunks' down items already
  stream W_2: the tail of the first layer overlaps the second.
* No deadlock, whatever the number of programs resident: an item only waits for first-layer items, which
  have smaller tickets, so each was taken by a program that is running it (or will run it next, after an
  item that waits for nothing).
* The last program to leave resets the ticket counter and the ready flags (and the split-K counters are
  reset by their finishers), so no memset is needed between calls. Workspaces are per device and assume
  calls on one device are stream-ordered, as the GEMV's split-K counters do.
Deterministic: every sum has a fixed order (no atomics on data), so runs are bit-identical.

Measured (H200, eleventh session, Llama-3-8B block, CUDA-graph µs): slower than the two launches, so the block
route (fused.dispatch.DECODE_BLOCK_MAX_M, off by default) keeps two launches. Two launches / chain in one run:
int8 M=1 66.9 / 73.1, fp8 M=16 66.2 / 78.3 (bench, route off / on); int8 M=1 66.1 / 77.0, fp8 M=1 61.7 / 77.1
(.ci/diag.py chainreg). The best candidates (fp8 M=1 63.6, int8 / fp8 M=16 77.2 / 76.4) stayed above the tuned
two launches of the same day (61.5, 66.7, 66.2). The kernel takes
128-146 registers (both layers' code), so 3 programs of 4 warps fit per SM: at 3 per SM the 448 first-layer items
run in two waves (alone: 70.9 µs against 46.1 for the same tiles as one GEMV launch, whose 448 CTAs fit in one);
with more programs (4 per SM, or one per item) some of them hold down items that wait, and a register cap of
128 / 96 gave 78-85 µs (.ci/diag.py chainparts / chainreg, examples/results/h200/eleventh_chainparts.txt).
Twenty-fifth session (test_chain_timing_cuda): one program per item (80-94 registers), best candidates int8 / fp8
M=1 66.0 / 61.4, M=16 77.2 / 75.7, against 58.8 / 57.8 / 66.2 / 65.8 for the tuned two launches; the last M=1
candidates carry the retuned GEMV tiles (64x256, 4 and 8 warps), not yet timed.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fused.kernels import cdiv, check_out, dot_mode, next_pow2, sm_count
from fused.kernels.launch import empty, launch_kernel, persistent
from fused.kernels.splitk import buffers as splitk_buffers, wait_count
from fused.kernels.w8a16_gemv import _gemv_item

# ticket counter, exit counter, then one ready counter per H chunk: int32, kept at zero between calls
_SYNC_HEAD = 2
_sync: dict = {}


def block_operands(w1, s1, b1, w2, s2, b2):
    """The decode kernels' view of a block's operands: fp8 weights as uint8 (bitcast in registers) with a flag
    each, per-row vectors contiguous (no-ops for module buffers). -> (w1, w1_fp8, s1, b1, w2, w2_fp8, s2, b2)"""
    w1_fp8, w2_fp8 = w1.dtype == torch.float8_e4m3fn, w2.dtype == torch.float8_e4m3fn
    return (w1.view(torch.uint8) if w1_fp8 else w1, w1_fp8, s1.contiguous(), b1.contiguous() if b1 is not None else None,
            w2.view(torch.uint8) if w2_fp8 else w2, w2_fp8, s2.contiguous(), b2.contiguous() if b2 is not None else None)


def _sync_buffer(device, chunks: int) -> torch.Tensor:
    buf = _sync.get(device)
    if buf is None or buf.numel() < _SYNC_HEAD + chunks:
        new = torch.zeros(max(_SYNC_HEAD + chunks, 256), device=device, dtype=torch.int32)
        persistent((new,), old=(buf,) if buf is not None else None)
        buf = _sync[device] = new
    return buf


@triton.jit
def _chain_item(
    t, items1, tiles1, tiles2, per_chunk, ready_ptr,
    x_ptr, w1_ptr, s1_ptr, b1_ptr, w2_ptr, s2_ptr, b2_ptr, h_ptr, y_ptr, part_ptr, count_ptr,
    M, K, H, D, KPS1, KPS2, PART2,
    stride_xm, stride_xk, stride_w1r, stride_w1k, stride_w2d, stride_w2h, stride_ym, stride_yd,
    GATED: tl.constexpr, ACT: tl.constexpr, HAS_B1: tl.constexpr, HAS_B2: tl.constexpr,
    W1_FP8: tl.constexpr, W2_FP8: tl.constexpr, DOT: tl.constexpr, CVT: tl.constexpr,
    BM1: tl.constexpr, BN1: tl.constexpr, BK1: tl.constexpr, SPLIT1: tl.constexpr, JOINT: tl.constexpr,
    BM2: tl.constexpr, BN2: tl.constexpr, BK2: tl.constexpr, SPLIT2: tl.constexpr, PHASES: tl.constexpr,
):
    """Work item t: a first-layer GEMV tile (published to its H chunk's down items) or a down item (waiting for
    its chunk)."""
    if t < items1:
        tile = t // SPLIT1
        live = _gemv_item(tile, t % SPLIT1, x_ptr, w1_ptr, s1_ptr, b1_ptr, w1_ptr, s1_ptr, b1_ptr, h_ptr,
                          part_ptr, count_ptr, M, H, K, KPS1, H,
                          stride_xm, stride_xk, stride_w1r, stride_w1k, stride_w1r, stride_w1k, H, 1,
                          GATED, W1_FP8, HAS_B1, ACT, SPLIT1, BM1, BN1, BK1, DOT, CVT, JOINT, False)
        if live > 0:  # this program stored the h tile: publish it to its chunk's down items
            tl.debug_barrier()
            tl.atomic_add(ready_ptr + (tile * BN1) // KPS2, 1, sem="release")
    else:
        j = t - items1
        c = j // tiles2
        need = tl.minimum(per_chunk, tiles1 - c * per_chunk)
        if PHASES == 3:
            wait_count(ready_ptr + c, need)
        _gemv_item(j % tiles2, c, h_ptr, w2_ptr, s2_ptr, b2_ptr, w2_ptr, s2_ptr, b2_ptr, y_ptr,
                   part_ptr + PART2, count_ptr + tiles1, M, D, H, KPS2, 0,
                   H, 1, stride_w2d, stride_w2h, stride_w2d, stride_w2h, stride_ym, stride_yd,
                   False, W2_FP8, HAS_B2, "none", SPLIT2, BM2, BN2, BK2, DOT, CVT, False, False)


@triton.jit
def _decode_chain_kernel(
    x_ptr, w1_ptr, s1_ptr, b1_ptr, w2_ptr, s2_ptr, b2_ptr, h_ptr, y_ptr, part_ptr, count_ptr, sync_ptr,
    M, K, H, D, KPS1, KPS2, PART2,
    stride_xm, stride_xk, stride_w1r, stride_w1k, stride_w2d, stride_w2h, stride_ym, stride_yd,
    GATED: tl.constexpr, ACT: tl.constexpr, HAS_B1: tl.constexpr, HAS_B2: tl.constexpr,
    W1_FP8: tl.constexpr, W2_FP8: tl.constexpr, DOT: tl.constexpr, CVT: tl.constexpr,
    BM1: tl.constexpr, BN1: tl.constexpr, BK1: tl.constexpr, SPLIT1: tl.constexpr, JOINT: tl.constexpr,
    BM2: tl.constexpr, BN2: tl.constexpr, BK2: tl.constexpr, SPLIT2: tl.constexpr, CHUNKS_P2: tl.constexpr,
    PHASES: tl.constexpr = 3, LOOP: tl.constexpr = True,
):
    # PHASES (diagnostics only, .ci/diag.py chainparts): 1 runs the first layer's items alone, 2 the down items
    # alone without waiting (on whatever h holds), 3 the block.
    # LOOP: a fixed grid whose programs take tickets until none is left; else one program per item, numbered by
    # its ticket in the order programs start (an item only waits on lower tickets, held by programs already
    # running). The loop costs registers (sm_90, M=1 int8: 142 with it, 80 without; M=16 fp8: 181 / 94)
    tiles1 = tl.cdiv(H, BN1)
    items1 = tiles1 * SPLIT1 if PHASES != 2 else 0
    tiles2 = tl.cdiv(D, BN2)
    total = items1 + (tiles2 * SPLIT2 if PHASES != 1 else 0)
    per_chunk = KPS2 // BN1  # first-layer tiles per H chunk
    ready_ptr = sync_ptr + 2
    t = tl.atomic_add(sync_ptr, 1, sem="relaxed")
    if LOOP:
        while t < total:
            t_next = tl.atomic_add(sync_ptr, 1, sem="relaxed")  # in flight during this item
            _chain_item(t, items1, tiles1, tiles2, per_chunk, ready_ptr,
                        x_ptr, w1_ptr, s1_ptr, b1_ptr, w2_ptr, s2_ptr, b2_ptr, h_ptr, y_ptr, part_ptr, count_ptr,
                        M, K, H, D, KPS1, KPS2, PART2,
                        stride_xm, stride_xk, stride_w1r, stride_w1k, stride_w2d, stride_w2h, stride_ym, stride_yd,
                        GATED, ACT, HAS_B1, HAS_B2, W1_FP8, W2_FP8, DOT, CVT, BM1, BN1, BK1, SPLIT1, JOINT,
                        BM2, BN2, BK2, SPLIT2, PHASES)
            t = t_next
    elif t < total:
        _chain_item(t, items1, tiles1, tiles2, per_chunk, ready_ptr,
                    x_ptr, w1_ptr, s1_ptr, b1_ptr, w2_ptr, s2_ptr, b2_ptr, h_ptr, y_ptr, part_ptr, count_ptr,
                    M, K, H, D, KPS1, KPS2, PART2,
                    stride_xm, stride_xk, stride_w1r, stride_w1k, stride_w2d, stride_w2h, stride_ym, stride_yd,
                    GATED, ACT, HAS_B1, HAS_B2, W1_FP8, W2_FP8, DOT, CVT, BM1, BN1, BK1, SPLIT1, JOINT,
                    BM2, BN2, BK2, SPLIT2, PHASES)
    # leave; the last program out resets the counters for the next call (every other program has taken its
    # last ticket, and every ready flag has been read, before it counted itself out)
    tl.debug_barrier()
    out = tl.atomic_add(sync_ptr + 1, 1, sem="acq_rel")
    if out == tl.num_programs(0) - 1:
        offs = tl.arange(0, CHUNKS_P2)
        tl.store(ready_ptr + offs, tl.zeros((CHUNKS_P2,), dtype=tl.int32), mask=offs < SPLIT2)
        tl.atomic_xchg(sync_ptr, 0)
        tl.atomic_xchg(sync_ptr + 1, 0)


def candidates(M: int, gated: bool) -> list[dict]:
    """Tile pairs from the two GEMVs' H200 picks for the Llama block (fused/data/tuned_h200.json: int8 takes the
    16-row tensor-core tile, fp8 the broadcast GEMV at M=1), times programs per SM (0: one per item)."""
    if M == 1:
        # the last: the twenty-fifth session's retuned GEMV tiles (64x256, gate/up split 2; down split 8)
        pairs = [(16, 32, 256, 1, 16, 32, 256, 4, "native"), (1, 32, 512, 1, 1, 64, 256, 8, "magic"),
                 (16, 32, 256, 1, 16, 64, 128, 8, "native"), (1, 32, 512, 1, 1, 64, 512, 8, "magic"),
                 (1, 64, 256, 2, 1, 64, 256, 8, "magic")]
    else:
        pairs = [(16, 32, 256, 1, 16, 64, 128, 8, "native"), (16, 32, 256, 1, 16, 32, 256, 4, "native"),
                 (16, 32, 256, 1, 16, 32, 256, 4, "magic")]
    out = [dict(CHAIN=True, BM1=a, BN1=b, BK1=c, SPLIT1=d, BM2=e, BN2=f, BK2=g, SPLIT2=h, CVT=cvt, num_warps=4,
                programs_per_sm=p) for a, b, c, d, e, f, g, h, cvt in pairs for p in (3, 4, 0)]
    if M == 1:  # the retuned int8 gate/up pick runs 8 warps: the last pair so, one program per item
        out.append(dict(out[-1], num_warps=8))
    return out


def split_sizes(c: dict, K: int, H: int) -> tuple[int, int, int, int]:
    """(K per first-layer split, first-layer splits, H per chunk, chunks) for config ``c``: a chunk holds whole
    first-layer tiles and whole down K steps (powers of two), and no split is empty."""
    kps1 = cdiv(cdiv(K, c["SPLIT1"]), c["BK1"]) * c["BK1"]
    step = max(c["BN1"], c["BK2"])
    kps2 = cdiv(cdiv(H, c["SPLIT2"]), step) * step
    return kps1, cdiv(K, kps1), kps2, cdiv(H, kps2)


def gemv_configs(c: dict, K: int, H: int) -> tuple[dict, dict]:
    """The w8a16_gemv configs of the two-launch path with the same tiles and splits as chain config ``c``."""
    _, split1, _, split2 = split_sizes(c, K, H)
    w = c["num_warps"]
    return (dict(BLOCK_M=c["BM1"], BLOCK_N=c["BN1"], BLOCK_K=c["BK1"], SPLIT_K=split1, num_warps=w, CVT=c["CVT"]),
            dict(BLOCK_M=c["BM2"], BLOCK_N=c["BN2"], BLOCK_K=c["BK2"], SPLIT_K=split2, num_warps=w, CVT=c["CVT"]))


def interpret_config(M: int) -> dict:
    bm = 1 if M == 1 else 16
    return dict(CHAIN=True, BM1=bm, BN1=16, BK1=32, SPLIT1=2, BM2=bm, BN2=16, BK2=32, SPLIT2=2, CVT="magic",
                num_warps=4, programs=3)


def decode_chain(x: torch.Tensor, w1: torch.Tensor, s1: torch.Tensor, b1: torch.Tensor | None,
                 w2: torch.Tensor, s2: torch.Tensor, b2: torch.Tensor | None, act: str, gated: bool,
                 config: dict, out: torch.Tensor | None = None) -> torch.Tensor:
    """Launch on a 2-D x [M <= 16, K] with ``config`` (see candidates; ``programs``: an absolute grid size,
    for tests). gated: w1 [2H, K] (gate rows, then up rows), else [H, K]; w2 [D, H]; fp32 scales per row;
    biases or None. Returns y [M, D] in x's dtype (h [M, H] is rounded to it in between, as the two-launch
    path stores it)."""
    M, K = x.shape
    R, H, D = w1.shape[0], w2.shape[1], w2.shape[0]
    if not (M <= 16 and w1.shape[1] == K and R == (2 * H if gated else H)):
        raise ValueError(f"decode_chain: x {tuple(x.shape)}, w1 {tuple(w1.shape)}, w2 {tuple(w2.shape)}, gated={gated}")
    if M > min(config["BM1"], config["BM2"]):
        raise ValueError(f"decode_chain: config tiles of {config['BM1']}/{config['BM2']} rows < M={M}")
    w1, w1_fp8, s1, b1, w2, w2_fp8, s2, b2 = block_operands(w1, s1, b1, w2, s2, b2)
    y = check_out(out, (M, D), x.dtype, x.device) if out is not None else empty((M, D), device=x.device, dtype=x.dtype)
    if M == 0 or D == 0:
        return y
    h = empty((M, H), device=x.device, dtype=x.dtype)
    c = config
    bm1, bn1, bk1, bm2, bn2, bk2 = c["BM1"], c["BN1"], c["BK1"], c["BM2"], c["BN2"], c["BK2"]
    kps1, split1, kps2, split2 = split_sizes(c, K, H)
    tiles1, tiles2 = cdiv(H, bn1), cdiv(D, bn2)
    npart1 = 2 if gated else 1
    part1 = tiles1 * split1 * npart1 * bm1 * bn1 if split1 > 1 else 0
    part2 = tiles2 * split2 * bm2 * bn2 if split2 > 1 else 0
    part, count = splitk_buffers(x.device, max(part1 + part2, 1), tiles1 + tiles2)
    sync = _sync_buffer(x.device, split2)
    items = tiles1 * split1 + tiles2 * split2
    if c.get("programs"):
        grid = min(items, c["programs"])
    elif c.get("programs_per_sm", 0) > 0 and x.is_cuda:
        grid = min(items, c["programs_per_sm"] * sm_count(x.device))
    else:
        grid = items
    launch_kernel(_decode_chain_kernel, (grid,),
        x, w1, s1, b1 if b1 is not None else s1, w2, s2, b2 if b2 is not None else s2, h, y, part, count, sync,
        M, K, H, D, kps1, kps2, part1,
        x.stride(0), x.stride(1), w1.stride(0), w1.stride(1), w2.stride(0), w2.stride(1), y.stride(0), y.stride(1),
        GATED=gated, ACT=act, HAS_B1=b1 is not None, HAS_B2=b2 is not None, W1_FP8=w1_fp8, W2_FP8=w2_fp8,
        DOT=dot_mode(x.dtype), CVT=c.get("CVT", "magic"), BM1=bm1, BN1=bn1, BK1=bk1, SPLIT1=split1,
        JOINT=gated and c.get("JOINT", False), BM2=bm2, BN2=bn2, BK2=bk2, SPLIT2=split2,
        CHUNKS_P2=max(next_pow2(split2), 2), PHASES=c.get("PHASES", 3), LOOP=grid < items, num_warps=c["num_warps"],
        **({"maxnreg": c["maxnreg"]} if c.get("maxnreg") else {}),
    )
    return y
