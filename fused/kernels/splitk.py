"""Split-K without atomics on the data, shared by the tiled GEMM (and the decode kernels' workspace).

Each of a tile's SPLIT_K programs stores its partial accumulator, then bumps the tile's counter
(acq_rel); the program that arrives last sums the SPLIT_K partials in a fixed order and runs the
epilogue, so results are bit-identical from run to run, in one launch. That program also resets the
counter: the workspace needs no memset between calls (kernels on one stream run one after another).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fused.kernels import cdiv
from fused.kernels.launch import persistent

_workspace: dict = {}
# workspaces replaced by larger ones stay allocated: a CUDA graph captured before (an eager call's GraphedCall, a user's
# capture) keeps their addresses and would otherwise write partials into memory the caching allocator handed on
_retired: list = []


@triton.jit
def wait_count(ptr, need):
    """Spin until the int32 counter at ``ptr`` reaches ``need`` (acquire: what the counting programs stored before
    their release is visible after). The ticketed kernels (decode_chain, first_layer, split_gemm) wait this way, only
    on items held by programs already running."""
    r = tl.atomic_add(ptr, 0, sem="acquire")
    while r < need:
        r = tl.atomic_add(ptr, 0, sem="acquire")


def grown(old, need: int, least: int, make):
    """``old`` if it holds ``need`` values, else a new buffer of at least twice its size (so the retired buffers hold
    less than the current one in all)."""
    if old is not None and old.numel() >= need:
        return old
    return make(max(need, least, 2 * old.numel() if old is not None else 0))


def buffers(device, part_numel: int, tiles: int):
    """Per-device partials (fp32; int32 accumulators are stored bitcast) and counters (int32, kept at
    zero by the kernels)."""
    ws = _workspace.get(device)
    if ws is None or ws[0].numel() < part_numel or ws[1].numel() < tiles:
        old = ws or (None, None)
        part = grown(old[0], part_numel, 1 << 20, lambda n: torch.empty(n, device=device, dtype=torch.float32))
        count = grown(old[1], tiles, 4096, lambda n: torch.zeros(n, device=device, dtype=torch.int32))
        persistent((part, count), old=ws)
        if ws is not None:
            _retired.append(ws)
        ws = _workspace[device] = (part, count)
    return ws


def plan_split(device, K: int, split: int, block_k: int, tiles: int, tile_numel: int, gated: bool, unused):
    """(K per split, splits, partials, counters) of a split-K launch: K cut into ``split`` runs of whole BLOCK_K
    steps (no empty splits), the workspace sized for ``tiles`` tiles of ``tile_numel`` accumulators (two when
    gated); ``unused`` stands in for both buffers when there is one split."""
    k_per = cdiv(cdiv(K, split), block_k) * block_k
    split = cdiv(K, k_per)
    if split == 1:
        return k_per, 1, unused, unused
    part, count = buffers(device, tiles * split * (2 if gated else 1) * tile_numel, tiles)
    return k_per, split, part, count


@triton.jit
def _store_part(ptrs, acc):
    if acc.dtype == tl.int32:  # exact: int32 sums are carried as their bits
        tl.store(ptrs, acc.to(tl.float32, bitcast=True))
    else:
        tl.store(ptrs, acc)


@triton.jit
def _load_part(ptrs, mask, like):
    v = tl.load(ptrs, mask=mask, other=0.0, cache_modifier=".cg")
    if like.dtype == tl.int32:
        v = v.to(tl.int32, bitcast=True)
    return v


@triton.jit
def splitk_reduce(acc, acc_u, part_ptr, count_ptr, tile_id, pid_k,
                  SPLIT_K: tl.constexpr, GATED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """-> (acc, acc_u, live): the tile's full sums for the program that finishes the tile (live =
    BLOCK_M * BLOCK_N), zeros and live = 0 for the others; mask the epilogue's store with `tile < live`."""
    BLOCK: tl.constexpr = BLOCK_M * BLOCK_N
    NPART: tl.constexpr = 2 if GATED else 1
    tile = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    base = part_ptr + tile_id.to(tl.int64) * (SPLIT_K * NPART * BLOCK)
    _store_part(base + (pid_k * NPART) * BLOCK + tile, acc)
    if GATED:
        _store_part(base + (pid_k * NPART + 1) * BLOCK + tile, acc_u)
    tl.debug_barrier()  # every thread's partial is issued before the release below
    count = tl.atomic_add(count_ptr + tile_id, 1, sem="acq_rel")
    live = tl.where(count == SPLIT_K - 1, BLOCK, 0)
    mask = tile < live
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=acc.dtype)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=acc.dtype)
    for s in range(SPLIT_K):  # fixed order: deterministic
        acc += _load_part(base + (s * NPART) * BLOCK + tile, mask, acc)
        if GATED:
            acc_u += _load_part(base + (s * NPART + 1) * BLOCK + tile, mask, acc_u)
    tl.atomic_xchg(count_ptr + tile_id, 0, mask=live > 0)  # ready for the next call
    return acc, acc_u, live
