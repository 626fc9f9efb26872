"""sparsity: 2:4 semi-structured masks (pure torch).

Pruning with calibration and compact packing arrive with the 2:4 issue; what is here is complete.
"""
from sparsity.masks import is_24_sparse, magnitude_mask_24

__all__ = ["is_24_sparse", "magnitude_mask_24"]
