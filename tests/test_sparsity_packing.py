"""2:4 packing: layout, exact round trip, alignment and bad-input errors, bytes per weight."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lowbit import quantize_weight
from sparsity import bytes_per_weight, expand_24, is_24_sparse, magnitude_mask_24, pack_24, packed_bytes, unpack_24
from sparsity.packing import meta_columns, tile_meta

DTYPES = [torch.int8, torch.float8_e4m3fn, torch.bfloat16]


def random_24(n, k, dtype, generator=None, drop=0.0):
    """A random 2:4 weight of ``dtype`` with the awkward cases in it: an all-zero row, a group with one
    non-zero, a group whose only non-zero is in the last position; ``drop``: extra zeros."""
    w = torch.randn(n, k, generator=generator)
    w = w * magnitude_mask_24(w.abs())
    w = w.masked_fill(torch.rand(w.shape, generator=generator) < drop, 0)
    w[0] = 0
    if n > 1:
        w[1, :4] = torch.tensor([0.0, 0.0, 0.0, 1.5])
        w[1, 4:8] = torch.tensor([0.0, -2.0, 0.0, 0.0]) if k >= 8 else w[1, 4:8]
    if dtype == torch.int8:
        return quantize_weight(w, "int8")[0]
    if dtype == torch.float8_e4m3fn:
        return quantize_weight(w, "float8_e4m3")[0]
    return w.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [4, 20, 24, 36, 40, 132])  # K % 8 == 4 and == 0; none a multiple of 16
def test_round_trip_exact(dtype, k):
    w = random_24(7, k, dtype)
    values, meta = pack_24(w)
    assert values.dtype == dtype and values.shape == (7, k // 2)
    assert meta.dtype == torch.uint8 and meta.shape == (7, (k + 7) // 8)
    back = unpack_24(values, meta)
    assert back.dtype == dtype and back.shape == w.shape
    assert torch.equal(back.float(), w.float())
    # kept entries are bit-exact (the bits the kernel reads)
    nz = w.float() != 0
    assert torch.equal(back.view(torch.uint8 if dtype.itemsize == 1 else torch.int16)[nz],
                       w.view(torch.uint8 if dtype.itemsize == 1 else torch.int16)[nz])


def test_zero_weight_round_trips():
    w = torch.zeros(3, 12, dtype=torch.int8)
    values, meta = pack_24(w)
    assert torch.equal(unpack_24(values, meta), w)
    # two distinct positions even when nothing is kept: (0, 1) -> nibble 0b0100
    assert meta[0, 0].item() == 0b0100_0100


def test_layout_is_documented_one():
    # row: group 0 keeps positions 1, 3; group 1 keeps position 0 (one non-zero) plus the lowest zero, 1
    w = torch.tensor([[0, 5, 0, 7, 3, 0, 0, 0]], dtype=torch.int8)
    values, meta = pack_24(w)
    assert values.tolist() == [[5, 7, 3, 0]]
    nib0, nib1 = 1 | (3 << 2), 0 | (1 << 2)
    assert meta.tolist() == [[nib0 | (nib1 << 4)]]


def test_not_24_is_a_clear_error():
    w = torch.zeros(5, 16)
    w[3, 8:11] = 1.0  # three non-zeros in one group
    with pytest.raises(ValueError, match=r"not 2:4 sparse: 1 of 20 groups.*row 3, columns 8\.\.11.*prune"):
        pack_24(w)


def test_k_alignment_and_rank_errors():
    with pytest.raises(ValueError, match="multiple of 4; got K=18"):
        pack_24(torch.zeros(4, 18))
    with pytest.raises(ValueError, match="2-D"):
        pack_24(torch.zeros(4, 4, 4))


def test_unpack_rejects_bad_meta():
    values, meta = pack_24(random_24(3, 16, torch.int8))
    with pytest.raises(ValueError, match="meta must be uint8 of shape"):
        unpack_24(values, meta[:, :1])
    with pytest.raises(ValueError, match="meta must be uint8"):
        unpack_24(values, meta.to(torch.int8))
    bad = meta.clone()
    bad[0, 0] = 0  # group 0 names position 0 twice
    with pytest.raises(ValueError, match="corrupt metadata"):
        unpack_24(values, bad)


def _bits(t):
    return t.view(torch.uint8 if t.element_size() == 1 else torch.int16)


@pytest.mark.parametrize("dtype", DTYPES + [torch.float16])
@pytest.mark.parametrize("k", [4, 12, 20, 36, 132])  # K % 8 == 4 and == 0
def test_expand_is_unpack_bit_for_bit(dtype, k):
    # the CPU path's fast expansion (integer shifts) against the scatter-based unpack, every bit: random
    # values with every sign and byte pattern, every position pair, groups with 0/1 non-zeros
    g = torch.Generator().manual_seed(k)
    w = random_24(11, k, torch.float32 if dtype == torch.float16 else dtype, g, drop=0.3).to(dtype)
    values, meta = pack_24(w)
    if dtype.itemsize == 1:  # every byte value, kept positions as packed
        values = torch.randint(-128, 128, values.shape, generator=g, dtype=torch.int8).view(dtype)
    got = expand_24(values, meta)
    assert got.dtype == dtype and got.shape == (11, k)
    assert torch.equal(_bits(got), _bits(unpack_24(values, meta)))
    # row slices (the CPU path's tiles) and tiled meta
    assert torch.equal(_bits(expand_24(values[3:8], meta[3:8])), _bits(unpack_24(values, meta)[3:8]))
    w64 = random_24(64, 64, torch.int8, g)
    v64, m64 = pack_24(w64)
    assert torch.equal(expand_24(v64, tile_meta(m64)), w64)


def test_expand_errors_and_empty():
    values, meta = pack_24(random_24(3, 16, torch.int8))
    bad = meta.clone()
    bad[2, 1] = 0b0101_0100  # group 3 of row 2 names position 1 twice
    with pytest.raises(ValueError, match="corrupt metadata"):
        expand_24(values, bad)
    with pytest.raises(ValueError, match="meta must be uint8 of shape"):
        expand_24(values, meta[:, :1])
    assert expand_24(values[:0], meta[:0]).shape == (0, 16)
    # 4-byte values take unpack_24 (same result)
    v32, m32 = pack_24(random_24(2, 8, torch.float32))
    assert torch.equal(expand_24(v32, m32), unpack_24(v32, m32))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 9), groups=st.integers(1, 20), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**31 - 1))
def test_round_trip_property(n, groups, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    w = random_24(n, 4 * groups, dtype, g, drop=0.3)  # extra zeros: groups with 0 or 1 non-zero
    assert is_24_sparse(w)
    assert torch.equal(unpack_24(*pack_24(w)).float(), w.float())


@pytest.mark.parametrize("dtype, expected", [(torch.int8, 0.625), (torch.float8_e4m3fn, 0.625), (torch.bfloat16, 1.125)])
def test_bytes_per_weight(dtype, expected):
    # the bound: <= 0.65 bytes per original weight for 8-bit values, fp32 row scales included
    scale = dtype != torch.bfloat16
    for n, k in [(14336, 4096), (4096, 14336), (4096, 4096)]:
        bpw = bytes_per_weight(n, k, dtype, scale=scale)
        assert bpw == pytest.approx(expected + (4 / k if scale else 0))
        if scale:
            assert bpw <= 0.65
    # the formula is the real size of packed tensors
    w = random_24(64, 4096, dtype)
    values, meta = pack_24(w)
    real = values.numel() * values.element_size() + meta.numel() + (64 * 4 if scale else 0)
    assert real == packed_bytes(64, 4096, dtype, scale=scale)
    assert meta_columns(4096) == 512
