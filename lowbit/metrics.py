import math

import torch


def sqnr(ref: torch.Tensor, out: torch.Tensor) -> float:
    """Signal-to-quantization-noise ratio in dB: 20·log10(‖ref‖ / ‖ref − out‖), computed in float64.

    inf when the two are identical; NaN anywhere in either gives NaN (so a threshold test fails).
    """
    ref = ref.detach().double()
    out = out.detach().double()
    if ref.shape != out.shape:
        raise ValueError(f"sqnr: shapes differ, ref {tuple(ref.shape)} vs out {tuple(out.shape)}")
    return ratio_db(torch.linalg.vector_norm(ref).item(), torch.linalg.vector_norm(ref - out).item())


def ratio_db(signal: float, noise: float, per_decade: float = 20.0) -> float:
    """``per_decade``·log10(signal / noise): 20 for amplitudes (norms), 10 for powers (sums of squares). inf for no
    noise, -inf for no signal, NaN if either is NaN."""
    if math.isnan(signal) or math.isnan(noise):
        return float("nan")
    if noise == 0.0:
        return float("inf")
    if signal == 0.0:
        return float("-inf")
    return per_decade * math.log10(signal / noise)
