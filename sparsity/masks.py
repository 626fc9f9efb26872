import torch


def magnitude_mask_24(score: torch.Tensor) -> torch.Tensor:
    """Boolean mask keeping the 2 largest of every 4 consecutive entries along the last dim.

    ``score`` is [..., K] with K % 4 == 0 (|W| for magnitude pruning, |W|·‖X_j‖ for Wanda)."""
    if score.shape[-1] % 4:
        raise ValueError(f"2:4 needs the last dim to be a multiple of 4, got {score.shape[-1]}")
    groups = score.reshape(*score.shape[:-1], -1, 4)
    keep = groups.topk(2, dim=-1).indices
    mask = torch.zeros_like(groups, dtype=torch.bool).scatter_(-1, keep, True)
    return mask.reshape(score.shape)


def is_24_sparse(w: torch.Tensor) -> bool:
    """True when every group of 4 consecutive entries along the last dim has at most 2 non-zeros."""
    if w.shape[-1] % 4:
        return False
    nz = (w.reshape(*w.shape[:-1], -1, 4) != 0).sum(-1)
    return bool((nz <= 2).all())
