"""sparsity.masks: the 2:4 magnitude mask and the 2:4 check."""
import pytest
import torch

from sparsity import is_24_sparse, magnitude_mask_24


def test_mask_keeps_two_largest_of_each_four():
    score = torch.tensor([[1.0, 4.0, 3.0, 2.0, -9.0, 0.5, 8.0, 7.0]]).abs()
    mask = magnitude_mask_24(score)
    assert mask.tolist() == [[False, True, True, False, True, False, True, False]]


def test_masked_weight_is_24_and_nd():
    w = torch.randn(3, 5, 16)
    mask = magnitude_mask_24(w.abs())
    assert mask.shape == w.shape and mask.dtype == torch.bool
    assert (mask.reshape(3, 5, 4, 4).sum(-1) == 2).all()
    assert is_24_sparse(w * mask)
    assert not is_24_sparse(w)
    # the kept entries are the largest: every kept |w| >= every dropped |w| within its group
    g, m = w.abs().reshape(-1, 4), mask.reshape(-1, 4)
    assert (g.masked_fill(~m, float("inf")).amin(-1) >= g.masked_fill(m, -1).amax(-1)).all()


def test_alignment():
    with pytest.raises(ValueError, match="multiple of 4, got 6"):
        magnitude_mask_24(torch.randn(2, 6))
    assert not is_24_sparse(torch.zeros(2, 6))
    assert is_24_sparse(torch.zeros(2, 8))
