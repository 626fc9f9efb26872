"""sparsity: 2:4 semi-structured sparsity in pure torch (never imports `fused`).

masks    magnitude_mask_24, is_24_sparse
pruning  prune_24_(model, "magnitude" | "wanda" | "sparsegpt", calibration), activation_norms, kept_energy
sparsegpt sparsegpt_24(weight, XᵀX): mask and error-compensated kept values
packing  pack_24 / unpack_24: kept values [N, K/2] + 2-bit positions [N, ceil(K/8)] uint8; expand_24: unpack_24
         by integer shifts (fast, small temporaries), what the CPU path uses
"""
from sparsity.masks import is_24_sparse, magnitude_mask_24
from sparsity.packing import bytes_per_weight, expand_24, pack_24, packed_bytes, unpack_24
from sparsity.pruning import activation_norms, kept_energy, prune_24_
from sparsity.sparsegpt import sparsegpt_24

__all__ = [
    "activation_norms",
    "bytes_per_weight",
    "expand_24",
    "is_24_sparse",
    "kept_energy",
    "magnitude_mask_24",
    "pack_24",
    "packed_bytes",
    "prune_24_",
    "sparsegpt_24",
    "unpack_24",
]
