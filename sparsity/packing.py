"""Compact 2:4 packing: the kept values plus a 2-bit position for each, laid out for a GPU decode kernel.

A weight W [N, K] that is 2:4 along K (every group of 4 consecutive entries in a row has <= 2 non-zeros)
packs into

    values [N, K/2]        the 2 kept entries of each group, in ascending position, any dtype
                           (int8 / float8_e4m3fn / bfloat16 here); row n, group g -> values[n, 2g : 2g+2]
    meta   [N, ceil(K/8)]  uint8; byte b of a row holds the 4 positions of groups 2b and 2b+1:
                           bits 0-1: position (0..3) of group 2b's first kept value, bits 2-3: its second,
                           bits 4-5 / 6-7: the same for group 2b+1

so kept value j of a row (j = 0..K/2-1) has its position in bits 2·(j%4)..2·(j%4)+1 of meta byte j//4 and
sits at column 4·(j//2) + position. The nibble per group (idx0 | idx1 << 2, idx0 < idx1) is the encoding
NVIDIA's sparse tensor cores use, but rows are plain row-major along K, not CUTLASS's interleaved tiles
(a cuSPARSELt / CUTLASS path repacks from the dense weight).

Why this layout:
  * A kernel tile of BLOCK_K weights of one row (BLOCK_K a multiple of 8) reads BLOCK_K/2 contiguous values
    and BLOCK_K/8 contiguous meta bytes: two wide, aligned, coalesced loads; nothing is interleaved, so
    the same layout serves int8, fp8 and bf16 values and the values tensor is an ordinary matrix.
  * One meta byte = 4 positions = the 4 values at ``values[n, 4b : 4b+4]``: decoding is a broadcast shift
    ``(byte >> 2·s) & 3`` and a reshape, no cross-lane shuffles.
  * 2 bits per kept value is the minimum for this encoding: 8-bit values cost 0.5 + 0.125 = 0.625 bytes per
    original weight, + 4/K for an fp32 per-row scale (0.626 at K=4096). bf16 values cost 1.125.

Alignment: K % 4 == 0 (the 2:4 groups) is the only requirement. When K % 8 == 4 the last meta byte of each
row holds one group; its high nibble is padding (0) and is never read.

Groups with fewer than 2 non-zeros (zero rows included) still keep 2 positions: the non-zeros plus the
lowest zero positions, so positions are always distinct and the values hold the exact zeros. The round trip
is exact in value and, for kept entries, in bits; a -0.0 at a dropped position comes back as +0.0.
"""
from __future__ import annotations

import sys

import torch


def _check_2d(name: str, t: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor) or t.dim() != 2:
        shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{name}: expected a 2-D [out_features, in_features] tensor, got {shape}")


def check_packable_k(k: int, where: str = "pack_24") -> None:
    """Raise the ValueError a 2:4 weight with in_features ``k`` gets when k is not a multiple of 4."""
    if k % 4:
        raise ValueError(f"{where}: 2:4 sparsity groups the input dim by 4, so in_features (K) must be a "
                         f"multiple of 4; got K={k}")


def meta_columns(k: int) -> int:
    """Bytes of metadata per row for in_features ``k`` (one byte per 8 weights, rounded up)."""
    return (k // 4 + 1) // 2


def _bits(t: torch.Tensor) -> torch.Tensor:
    # Gather/scatter on an integer view: exact for every dtype (fp8 included, where CPU kernels are
    # missing) and keeps -0.0 / NaN payloads bit for bit.
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def pack_24(w: torch.Tensor, where: str = "pack_24") -> tuple[torch.Tensor, torch.Tensor]:
    """Pack a 2:4-sparse weight [N, K] into (values [N, K/2] of w's dtype, meta [N, ceil(K/8)] uint8).

    Raises ValueError when w is not 2-D, K % 4 != 0, or some group of 4 has more than 2 non-zeros
    (prune first: ``sparsity.prune_24_`` or ``w * magnitude_mask_24(w.abs())``)."""
    _check_2d(where, w)
    n, k = w.shape
    check_packable_k(k, where)
    groups = w.reshape(n, k // 4, 4)
    nz = groups != 0
    dense_groups = nz.sum(-1) > 2
    if dense_groups.any():
        bad = int(dense_groups.sum())
        row, grp = (int(i) for i in dense_groups.nonzero()[0])
        raise ValueError(
            f"{where}: weight is not 2:4 sparse: {bad} of {dense_groups.numel()} groups of 4 have more than 2 "
            f"non-zeros (first: row {row}, columns {4 * grp}..{4 * grp + 3}); prune it first "
            "(sparsity.prune_24_, or a config with prune=True)")
    # non-zeros first, then the lowest positions: 2 distinct ascending positions per group
    pos = torch.arange(4, device=w.device)
    key = (~nz).to(torch.int8) * 4 + pos
    idx = key.topk(2, dim=-1, largest=False).indices.sort(dim=-1).values  # [N, G, 2]
    values = _bits(groups).gather(-1, idx).reshape(n, k // 2).view(w.dtype)

    nib = (idx[..., 0] | (idx[..., 1] << 2)).to(torch.uint8)  # [N, G]
    if nib.shape[1] % 2:
        nib = torch.nn.functional.pad(nib, (0, 1))  # padding nibble, never read
    nib = nib.reshape(n, -1, 2)
    meta = nib[..., 0] | (nib[..., 1] << 4)
    return values.contiguous(), meta.contiguous()


# cuSPARSELt's compressed 8-bit 2:4 matrix (torch._cslt_compress, sm_90, cuSPARSELt 0.8; found by dumping coded
# matrices on the H200, 2026-12-01) is, for N and K multiples of 64, exactly [values [N, K/2] row-major | meta],
# where the meta part holds the same bytes as ours (byte = positions of groups 2b, 2b+1 of row n) reordered in
# tiles of 64 rows x 8 bytes (64 columns of K): tile (n // 64, b // 8) at 512·(n // 64 · K/64 + b // 8), and
# inside a tile byte (n, b) at bit-interleaved offset
#     n3 | b2 << 1 | b0 << 2 | b1 << 3 | (n & 7) << 4 | n4 << 7 | n5 << 8    (nX / bX: bit X of n % 64, b % 8).
# Keeping meta in that order ("tiled meta", shape [N/64, K/64, 512]) lets one buffer serve both cuSPARSELt and
# our kernels (fused.kernels.sparse24_linear.meta_row_off / meta_col_off): 0.625 bytes per weight, not 1.25.
TILE_ROWS, TILE_COLS = 64, 64


def tiled_meta_ok(n: int, k: int) -> bool:
    """Whether an [n, k] 2:4 weight has a tiled-meta form (both dimensions multiples of 64, none empty)."""
    return n > 0 and k > 0 and n % TILE_ROWS == 0 and k % TILE_COLS == 0


def tile_meta(meta: torch.Tensor) -> torch.Tensor:
    """Row-major meta [N, K/8] -> tiled meta [N/64, K/64, 512] (cuSPARSELt's order; see above)."""
    _check_2d("tile_meta meta", meta)
    n, mb = meta.shape
    if meta.dtype != torch.uint8 or not tiled_meta_ok(n, 8 * mb):
        raise ValueError(f"tile_meta: uint8 meta [N, K/8] with N and K multiples of 64 expected, got "
                         f"{meta.dtype} {tuple(meta.shape)}")
    # dims: rt, n5, n4, n3, n2..0, kt, b2, b1, b0 -> rt, kt, n5, n4, n2..0, b1, b0, b2, n3
    v = meta.reshape(n // 64, 2, 2, 2, 8, mb // 8, 2, 2, 2)
    return v.permute(0, 5, 1, 2, 4, 7, 8, 6, 3).reshape(n // 64, mb // 8, 512).contiguous()


def untile_meta(meta: torch.Tensor) -> torch.Tensor:
    """Tiled meta [N/64, K/64, 512] -> row-major meta [N, K/8]; inverse of ``tile_meta``."""
    if not isinstance(meta, torch.Tensor) or meta.dim() != 3 or meta.shape[2] != 512 or meta.dtype != torch.uint8:
        shape = tuple(meta.shape) if isinstance(meta, torch.Tensor) else type(meta).__name__
        raise ValueError(f"untile_meta: uint8 tiled meta [N/64, K/64, 512] expected, got {shape}")
    rt, kt, _ = meta.shape
    v = meta.reshape(rt, kt, 2, 2, 8, 2, 2, 2, 2)  # rt, kt, n5, n4, n2..0, b1, b0, b2, n3
    return v.permute(0, 2, 3, 8, 4, 1, 7, 5, 6).reshape(64 * rt, 8 * kt).contiguous()


def row_meta(meta: torch.Tensor) -> torch.Tensor:
    """Meta in row-major form whichever form it is in (tiled meta is 3-D)."""
    return untile_meta(meta) if isinstance(meta, torch.Tensor) and meta.dim() == 3 else meta


def _checked_meta(values: torch.Tensor, meta: torch.Tensor, where: str) -> torch.Tensor:
    """Row-major meta for ``values`` after checking both shapes and dtypes (tiled meta is untiled)."""
    _check_2d(f"{where} values", values)
    if isinstance(meta, torch.Tensor) and meta.dim() == 3:
        if tuple(meta.shape) != (values.shape[0] // 64, values.shape[1] // 32, 512) or values.shape[0] % 64 \
                or values.shape[1] % 32:
            raise ValueError(f"{where}: tiled meta must be [N/64, K/64, 512] for values {tuple(values.shape)}, "
                             f"got {tuple(meta.shape)}")
        meta = untile_meta(meta)
    _check_2d(f"{where} meta", meta)
    n, half = values.shape
    k = 2 * half
    if k % 4:
        raise ValueError(f"{where}: values must have K/2 columns with K % 4 == 0, got {half} columns")
    if meta.dtype != torch.uint8 or tuple(meta.shape) != (n, meta_columns(k)):
        raise ValueError(f"{where}: meta must be uint8 of shape {(n, meta_columns(k))} for values "
                         f"{tuple(values.shape)}, got {meta.dtype} {tuple(meta.shape)}")
    return meta


def unpack_24(values: torch.Tensor, meta: torch.Tensor, where: str = "unpack_24") -> torch.Tensor:
    """The dense [N, K] weight (K = 2·values.shape[1]) of a packed pair; exact inverse of ``pack_24``.
    ``meta`` row-major [N, ceil(K/8)] or tiled [N/64, K/64, 512] (``tile_meta``)."""
    meta = _checked_meta(values, meta, where)
    n, half = values.shape
    k = 2 * half
    g = k // 4
    nib = torch.stack([meta & 15, meta >> 4], dim=-1).reshape(n, -1)[:, :g].long()
    idx = torch.stack([nib & 3, nib >> 2], dim=-1)  # [N, G, 2]
    if (idx[..., 0] == idx[..., 1]).any():
        raise ValueError(f"{where}: corrupt metadata: a group names the same position twice")
    dense = torch.zeros(n, g, 4, dtype=_bits(values).dtype, device=values.device)
    dense.scatter_(-1, idx, _bits(values).reshape(n, g, 2))
    return dense.reshape(n, k).view(values.dtype)


def expand_24(values: torch.Tensor, meta: torch.Tensor, where: str = "expand_24") -> torch.Tensor:
    """``unpack_24`` by integer shifts, for 1- and 2-byte values: the same dense [N, K] weight, bit for bit,
    5-6x faster on the CPU and with temporaries of ~4 bytes per weight (unpack_24's int64 scatter indices
    take ~10). The CPU path (fused.cpu) expands a tile of rows at a time with it.

    Each group's two kept values, read as one 16- (32-) bit word, are placed into the group's 32- (64-) bit
    dense word by shifting each by 8 (16) x its 2-bit position. Little-endian byte order (x86, Arm)."""
    meta = _checked_meta(values, meta, where)
    if values.element_size() not in (1, 2) or sys.byteorder != "little":
        return unpack_24(values, meta, where)
    n, half = values.shape
    g = half // 2
    if n == 0 or g == 0:
        return values.new_zeros(n, 2 * half)
    wide = values.element_size() == 2
    m = meta.to(torch.int16)
    nib = (m & 15) | ((m & 0xF0) << 4)  # byte 0: nibble of group 2b, byte 1: nibble of group 2b+1
    sh = 4 if wide else 3  # bits per value: 16 / 8
    s0 = ((nib & 0x0303) << sh).view(torch.uint8)[:, :g]  # shift of each group's first kept value
    s1 = ((nib >> 2 & 0x0303) << sh).view(torch.uint8)[:, :g]
    if bool((s0 == s1).view(torch.uint8).amax()):  # (a uint8 max is ~25x faster than .any() here)
        raise ValueError(f"{where}: corrupt metadata: a group names the same position twice")
    word, dense = (torch.int64, torch.int32) if wide else (torch.int32, torch.int16)
    mask = 0xFFFF if wide else 0xFF
    u = values.view(dense).to(word)  # the group's two kept values; sign-extended: hence the masks
    lo = torch.bitwise_and(u, mask).bitwise_left_shift_(s0.to(word))
    d = u.bitwise_right_shift_(8 << wide).bitwise_and_(mask).bitwise_left_shift_(s1.to(word)).bitwise_or_(lo)
    return d.view(values.dtype).view(n, 2 * half)


def packed_bytes(n: int, k: int, value_dtype: torch.dtype, scale: bool = True) -> int:
    """Bytes of a packed [n, k] weight: values + meta (+ one fp32 scale per row)."""
    check_packable_k(k, "packed_bytes")
    itemsize = torch.empty((), dtype=value_dtype).element_size()
    return n * (k // 2) * itemsize + n * meta_columns(k) + (4 * n if scale else 0)


def bytes_per_weight(n: int, k: int, value_dtype: torch.dtype, scale: bool = True) -> float:
    """Packed bytes per original weight (``packed_bytes / (n·k)``): 0.625 + 4/K for 8-bit values + scales."""
    return packed_bytes(n, k, value_dtype, scale) / (n * k)
