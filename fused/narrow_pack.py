"""The packed format of a narrow MLP (fused.narrow): every layer's weight zero-padded to a power of two >= 16 in one
buffer, scales and biases in one fp32 buffer. Pure torch: the reference, the kernel and the CPU path read it."""
from __future__ import annotations

import torch

MAX_WIDTH = 128
MAX_LAYERS = 8
MIN_PAD = 16  # tl.dot needs every tile dim >= 16
WEIGHT_DTYPES = {"fp16": torch.float16, "float16": torch.float16, "bf16": torch.bfloat16,
                 "bfloat16": torch.bfloat16, "int8": torch.int8}


def padded_width(n: int) -> int:
    """The width a layer occupies inside the kernel: the next power of two, at least 16."""
    p = MIN_PAD
    while p < n:
        p *= 2
    return p


# ------------------------------------------------------------------------------------------- packing

def pack_narrow(weights: list[torch.Tensor], scales: list[torch.Tensor | None], biases: list[torch.Tensor | None],
                dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Pack per-layer weights [N_i, K_i] (already in ``dtype``: fp16 / bf16 / int8), optional fp32 scales
    [N_i] and biases [N_i] into (weights 1-D ``dtype``, params 1-D fp32): layer i as W_i zero-padded to
    [pad(N_i), pad(K_i)] row-major (a Linear's own layout; the kernel dots with its transpose), layers
    back to back; params per layer [scale (1 if None), bias (0 if None)], each pad(N_i) long."""
    wparts, pparts = [], []
    for w, s, b in zip(weights, scales, biases):
        n, k = w.shape
        kp, np_ = padded_width(k), padded_width(n)
        wt = torch.zeros(np_, kp, dtype=dtype, device=w.device)
        wt[:n, :k] = w
        wparts.append(wt.reshape(-1))
        p = torch.zeros(2, np_, dtype=torch.float32, device=w.device)
        p[0] = 1.0
        if s is not None:
            p[0, :n] = s.float()
        if b is not None:
            p[1, :n] = b.detach().float()
        pparts.append(p.reshape(-1))
    return torch.cat(wparts), torch.cat(pparts)


def unpack_narrow(weights: torch.Tensor, params: torch.Tensor, dims) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Inverse of pack_narrow, dequantized: [(W_i fp32 [N_i, K_i] with its scale applied, b_i fp32 [N_i])]."""
    out, wo, po = [], 0, 0
    for k, n in zip(dims[:-1], dims[1:]):
        kp, np_ = padded_width(k), padded_width(n)
        wt = weights[wo:wo + kp * np_].view(np_, kp)
        p = params[po:po + 2 * np_].view(2, np_)
        out.append((wt[:n, :k].float() * p[0, :n, None], p[1, :n]))
        wo += kp * np_
        po += 2 * np_
    return out


def _transpose_layers(packed: torch.Tensor, dims) -> torch.Tensor:
    """The first packing (each layer as Wᵀ, [pad(K), pad(N)]) in today's layout ([pad(N), pad(K)])."""
    if packed.numel() != packed_sizes(dims)[0]:
        return packed  # not this architecture's size: the shape check refuses it
    parts, o = [], 0
    for k, n in zip(dims[:-1], dims[1:]):
        kp, np_ = padded_width(k), padded_width(n)
        parts.append(packed[o:o + kp * np_].view(kp, np_).t().reshape(-1))
        o += kp * np_
    return torch.cat(parts)


def packed_sizes(dims) -> tuple[int, int]:
    """(weight elements, param elements) of the packed buffers for real widths ``dims``."""
    pads = [padded_width(d) for d in dims]
    return sum(a * b for a, b in zip(pads[:-1], pads[1:])), sum(2 * p for p in pads[1:])


# ------------------------------------------------------------------------------------------- parsing
