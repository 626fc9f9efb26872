"""The int8 CPU paths on fbgemm, for x86 CPUs whose u8·s8 GEMMs saturate (no VNNI: see `fused.cpu_isa`).

fbgemm multiplies u8·s8 pairs with ``vpmaddubsw`` there, exact only while both u8 values of a pair are at most 127.
So every operand goes in as 7-bit planes: an integer-valued activation v is written v = 128·hi + lo with hi and lo in
[-64, 63], both planes are rows of one fbgemm call (the packed weight is read once), and

    Σ v·w = 128·Σ hi·w + Σ lo·w        (each sum exact in int32, rounded once to fp32; 128· is exact)

- ``cpu:fbgemm`` (int8 W8A8): v is the reference's per-token int8 activation q (|q| <= 127, so hi is -1, 0 or 1):
  the same int32 sums as ``torch._int_mm``, so the same numbers as the reference.
- ``cpu:split_fbgemm`` (int8 weight-only): v = round(x / s) with s = max|x| / 8127 per token, 14 bits per token
  (~84 dB against exact math, far finer than the int8 weight's ~40 dB).
- ``cpu:fbgemm`` with 7-bit activations (``fused.pack_for_cpu(model, activation_bits=7)``, asked for speed over
  accuracy): one pass instead of two. Per token, asymmetric: x ≈ s·(v + 64) + lo with lo = min x, s = (max x - lo) /
  127 and v in [-64, 63], so Σ x·w = s·Σ v·w + (64·s + lo)·Σ w. About 6 dB below 8-bit W8A8, and at least as
  accurate as PyTorch's ``quantize_dynamic`` on such CPUs (7-bit, one range per tensor).

fbgemm quantizes its float input with one (scale, zero point) per call; `cpu_isa.fbgemm_linear` pins them to 1 and
64 so the planes pass through exactly. The weight is fbgemm's packed copy (`cpu_isa.fbgemm_prepack`): the only copy
after ``fused.pack_for_cpu``, else kept beside the plain weight (1 B/weight more), made once per weight.
"""
from __future__ import annotations

import torch

from fused.cpu_isa import fbgemm_linear
from lowbit import quantize_activation
from lowbit.quant import MIN_SCALE

PATHS = ("cpu:fbgemm", "cpu:split_fbgemm")
# |v| <= SPLIT_QMAX gives hi = floor((v + 64) / 128) in [-63, 63] and lo = v - 128·hi in [-64, 63]
SPLIT_QMAX = 8127
# tokens per fbgemm call: bounds the planes' and the int32 sums' temporaries at long prefills
CHUNK_ROWS = 256


def _planes(v: torch.Tensor) -> torch.Tensor:
    """[2R, K] fp32 for integer-valued fp32 ``v`` [R, K] (|v| <= SPLIT_QMAX): the hi rows, then the lo rows."""
    hi = torch.floor((v + 64) * (1 / 128))  # exact: a power-of-two scale of an integer below 2^24
    lo = v.sub_(hi, alpha=128)
    return torch.cat([hi, lo])


def _sums(v: torch.Tensor, packed) -> torch.Tensor:
    """fp32 [R, N] = Σ v·w per row of integer-valued ``v`` [R, K] (consumed), each rounded to fp32."""
    R = v.shape[0]
    out = fbgemm_linear(_planes(v), packed)
    return out[R:].add_(out[:R], alpha=128)


def split_values(x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(v, s, finite): v [M, K] fp32 integer values with x ≈ s·v, s [M, 1] = max|x| / SPLIT_QMAX per token (NaN for
    a token with NaN/Inf, whose v is 0), and whether every token is finite."""
    x = x2.float()
    amax = x.abs().amax(-1, keepdim=True)
    finite = bool(amax.isfinite().all())
    s = (amax / SPLIT_QMAX).clamp_min_(MIN_SCALE)
    v = (x / s).round_()
    if not finite:
        bad = ~amax.isfinite()
        s.masked_fill_(bad, float("nan"))
        v.masked_fill_(bad, 0.0)
    return v, s, finite


def _seven_bit(x2: torch.Tensor, weight, wscale: torch.Tensor) -> torch.Tensor:
    """fp32 [M, N]: 7-bit asymmetric per-token activations (see the module doc), one row per token; a token with
    NaN/Inf gives a NaN row, as the 8-bit path's reference does. Few torch ops: at decode each costs ~5 µs here."""
    x = x2 if x2.dtype == torch.float32 else x2.float()
    lo, hi = torch.aminmax(x, dim=-1, keepdim=True)
    s = (hi - lo).div_(127).clamp_min_(MIN_SCALE)
    finite = bool(s.isfinite().all())  # NaN or Inf anywhere in a token makes its range non-finite
    v = (x - lo).div_(s).round_().sub_(64)
    if not finite:
        bad = ~s.isfinite()
        s.masked_fill_(bad, float("nan"))
        v.masked_fill_(bad, 0.0)
    # every finite token that is not constant holds -64 (its min) and 63 (its max): no pinning rows needed then
    pin = not finite or bool((s <= MIN_SCALE).any())
    offset = lo.add(s, alpha=64)  # x ≈ s·v + (lo + 64·s)
    y = torch.empty(x.shape[0], wscale.shape[0])
    for i in range(0, x.shape[0], CHUNK_ROWS):
        j = min(i + CHUNK_ROWS, x.shape[0])
        sums = fbgemm_linear(v[i:j], weight.packed, pin)
        y[i:j] = sums.mul_(s[i:j]).addcmul_(offset[i:j], weight.colsum).mul_(wscale)
    return y


def product(path: str, x2: torch.Tensor, weight, wscale: torch.Tensor, dynamic: bool):
    """(y, s_x, finite): y fp32 [M, N] = the integer sums times the token scales times ``wscale`` (in the reference's
    order, (Σ · s_x) · s_w); ``finite`` False where a weight-only token had NaN/Inf (its row is NaN: the caller
    recomputes it). ``weight``: a `cpu_weights.FbgemmWeight`."""
    if path not in PATHS:
        raise ValueError(f"unknown fbgemm path {path!r}; expected one of {PATHS}")
    if dynamic != (path == "cpu:fbgemm"):
        raise ValueError(f"{path!r} is for {'W8A8' if path == 'cpu:fbgemm' else 'weight-only'} layers")
    if dynamic and weight.act_bits == 7:
        return _seven_bit(x2, weight, wscale), None, True
    packed = weight.packed
    M = x2.shape[0]
    if dynamic:
        q, s = quantize_activation(x2, "int8")
        v, finite = q.float(), True
    else:
        v, s, finite = split_values(x2)
    N = wscale.shape[0]
    y = torch.empty(M, N) if M > CHUNK_ROWS else None
    for i in range(0, M, CHUNK_ROWS):
        j = min(i + CHUNK_ROWS, M)
        part = _sums(v[i:j] if y is not None else v, packed).mul_(s[i:j]).mul_(wscale)
        if y is None:
            return part, s, finite
        y[i:j] = part
    return y, s, finite
