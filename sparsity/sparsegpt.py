"""SparseGPT 2:4 pruning (Frantar & Alistarh 2023, "SparseGPT"): choose the mask and update the kept weights
so that the layer's output on calibration inputs X changes least, ‖X·Wᵀ − X·Ŵᵀ‖², with H = XᵀX.

Magnitude and Wanda only choose which 2 of every 4 weights to keep. SparseGPT goes through the input columns
in order: for each group of 4 it drops the 2 with the smallest w²/[H⁻¹]ᵢᵢ² (the output error their removal
causes), and moves each column's removal error onto the columns not processed yet through the Cholesky
factor of H⁻¹, as GPTQ does for rounding (lowbit.gptq). The result is exactly 2:4 and its kept values
differ from the dense weight's. Reference: the paper's algorithm with lazy blocks of 128 columns, dampening
λ = damp · mean(diag H).
"""
from __future__ import annotations

import torch

from lowbit.gptq import inverse_factor


def sparsegpt_24(weight: torch.Tensor, hessian: torch.Tensor, damp: float = 0.01, block: int = 128) -> torch.Tensor:
    """weight [N, K] (K a multiple of 4), hessian [K, K] -> the 2:4-pruned, error-compensated weight
    [N, K] in weight's dtype."""
    if weight.dim() != 2 or weight.shape[1] % 4:
        raise ValueError(f"sparsegpt_24: expects an [out, in] weight with in % 4 == 0, got {tuple(weight.shape)}")
    N, K = weight.shape
    if hessian.shape != (K, K):
        raise ValueError(f"sparsegpt_24: hessian has shape {tuple(hessian.shape)}, the weight needs [{K}, {K}]")
    block = max(4, block // 4 * 4)  # groups of 4 never straddle two blocks
    W = weight.detach().to(torch.float32).clone()
    Hinv, _ = inverse_factor(hessian.to(weight.device), damp, "sparsegpt_24")
    for i1 in range(0, K, block):
        i2 = min(i1 + block, K)
        W1 = W[:, i1:i2].clone()
        E1 = torch.empty_like(W1)
        d = torch.diag(Hinv)[i1:i2]
        drop = torch.zeros_like(W1, dtype=torch.bool)
        for i in range(i2 - i1):
            if i % 4 == 0:  # the group's mask, from the weights as updated so far
                cost = W1[:, i:i + 4].pow(2) / d[i:i + 4].pow(2)[None, :]
                drop[:, i:i + 4].scatter_(1, cost.topk(2, dim=1, largest=False).indices, True)
            col = W1[:, i]
            q = torch.where(drop[:, i], torch.zeros_like(col), col)
            err = (col - q) / Hinv[i1 + i, i1 + i]
            W1[:, i:] -= err[:, None] * Hinv[i1 + i, i1 + i:i2][None, :]
            W1[:, i] = q
            E1[:, i] = err
        W[:, i1:i2] = W1
        W[:, i2:] -= E1 @ Hinv[i1:i2, i2:]
    return W.to(weight.dtype)
