"""What this CPU's int8 GEMMs can be trusted with, probed on this CPU, once per process.

x86 CPUs differ in how their int8 GEMMs multiply. With AVX512-VNNI (or AMX) ``vpdpbusd`` sums u8·s8 products
straight into int32. Without it (AVX2, AVX512 without VNNI) oneDNN and fbgemm multiply u8·s8 pairs with
``vpmaddubsw``, which *saturates* the pairwise sum to int16: 255·127 + 255·127 does not fit, and the GEMM returns a
silently wrong answer (oneDNN documents this; PyTorch's x86 quantization uses ``reduce_range`` there). And
``torch._int_mm`` on such a CPU falls back to a loop ~100x slower than an fp32 GEMM.

So the routes that depend on the CPU are decided here from what this CPU does, not from its name:

- `onednn_u8_exact`: oneDNN's u8·s8 matmul (``onednn.qlinear_pointwise``) gives exact int32 sums with u8 values up
  to 255, the form the ``cpu:qlinear`` paths feed it. Honours ``ONEDNN_MAX_CPU_ISA`` (``AVX2`` forces the
  saturating kernels on a VNNI machine).
- `fbgemm_ok`: fbgemm's dynamic linear (``quantized::linear_dynamic``) gives exact sums for 7-bit operands
  (u8 <= 127: no pair can saturate), the form the ``cpu:fbgemm`` paths feed it. True on every x86 fbgemm build.
- `int_mm_fast`: ``torch._int_mm`` is no slower than an fp32 GEMM of the same shape (a short timing).

`int8_backend` combines them into the one choice the dispatcher reads.
"""
from __future__ import annotations

import contextlib
import functools
import platform
import time
import warnings

import torch
import torch.nn.functional as F

# fbgemm quantizes its float input with one (scale, zero point) per call from the input's min and max; rows holding
# -FBGEMM_LO and FBGEMM_HI pin them to scale 1, zero point 64 (7-bit reduce_range: 127 levels), so integer inputs in
# [-64, 63] pass through exactly and the zero point is subtracted in int32 inside the GEMM
FBGEMM_LO, FBGEMM_HI = -64, 63


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")


@contextlib.contextmanager
def quantized_engine(name: str):
    """torch.backends.quantized.engine set to ``name`` inside the block (fbgemm's prepack picks its kernel by it)."""
    old = torch.backends.quantized.engine
    torch.backends.quantized.engine = name
    try:
        yield
    finally:
        torch.backends.quantized.engine = old


def fbgemm_prepack(w: torch.Tensor):
    """fbgemm's packed copy of the int8 [N, K] weight ``w`` with unit scales (the scales stay ours)."""
    N = w.shape[0]
    with quantized_engine("fbgemm"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's quantized tensors are deprecated; the packed op is not replaced yet
        qw = torch._make_per_channel_quantized_tensor(w.contiguous(), torch.ones(N, dtype=torch.double),
                                                      torch.zeros(N, dtype=torch.long), 0)
        return torch.ops.quantized.linear_prepack(qw, None)


def fbgemm_unpack(packed) -> torch.Tensor:
    """The plain int8 [N, K] weight of `fbgemm_prepack`'s copy (a new tensor)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.ops.quantized.linear_unpack(packed)[0].int_repr().contiguous()


def fbgemm_linear(rows: torch.Tensor, packed, pin: bool = True) -> torch.Tensor:
    """fp32 [R, N] = rows · Wᵀ for integer-valued fp32 ``rows`` in [FBGEMM_LO, FBGEMM_HI], exact int32 sums each
    rounded once to fp32. Two rows pinning fbgemm's per-call quantization to scale 1 / zero point 64 go on the end;
    ``pin=False`` where the rows themselves hold both FBGEMM_LO and FBGEMM_HI."""
    if not pin:
        return torch.ops.quantized.linear_dynamic(rows, packed, True)
    K = rows.shape[1]
    pin = rows.new_empty(2, K)
    pin[0].fill_(FBGEMM_LO)
    pin[1].fill_(FBGEMM_HI)
    return torch.ops.quantized.linear_dynamic(torch.cat([rows, pin]), packed, True)[: rows.shape[0]]


def _exact_case(K: int = 64, N: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """An int8 weight and int8 activations whose u8·s8 pairs saturate int16 if anything does: every weight ±127 and
    every activation at the int8 extremes, with mixed signs so no row sums to zero."""
    g = torch.Generator().manual_seed(0)
    w = torch.where(torch.rand(N, K, generator=g) < 0.75, 127, -127).to(torch.int8)
    q = torch.where(torch.rand(4, K, generator=g) < 0.75, 127, -127).to(torch.int8)
    q[0] = 127
    w[0] = 127
    return q, w


@functools.cache
def onednn_u8_exact() -> bool:
    """oneDNN's u8·s8 matmul on a reordered weight sums exactly with u8 values up to 255 on this CPU."""
    if not is_x86() or not torch.backends.mkldnn.is_available():
        return False
    if not (hasattr(torch.ops.onednn, "qlinear_prepack") and hasattr(torch.ops.onednn, "qlinear_pointwise")):
        return False
    q, w = _exact_case()
    N = w.shape[0]
    try:
        packed = torch.ops.onednn.qlinear_prepack(w, None)
        u = q.view(torch.uint8).bitwise_xor(128)  # q + 128
        y = torch.ops.onednn.qlinear_pointwise(u, 1.0, 128, packed, torch.ones(N), torch.zeros(N, dtype=torch.int64),
                                               None, 1.0, 0, torch.float32, "none", [], "")
    except RuntimeError:
        return False
    return torch.equal(y.double(), q.double() @ w.double().t())


@functools.cache
def fbgemm_ok() -> bool:
    """fbgemm's dynamic int8 linear runs here and sums exactly on 7-bit operands (`fbgemm_linear`)."""
    if not is_x86() or "fbgemm" not in torch.backends.quantized.supported_engines:
        return False
    _, w = _exact_case()
    rows = torch.tensor([[FBGEMM_LO, FBGEMM_HI] * 32, [FBGEMM_HI] * 64, [FBGEMM_LO] * 64], dtype=torch.float32)
    try:
        y = fbgemm_linear(rows, fbgemm_prepack(w))
    except (RuntimeError, AttributeError):
        return False
    return torch.equal(y.double(), rows.double() @ w.double().t())


def _best_of_3(f) -> float:
    """Seconds of the fastest of 3 calls of ``f`` after one warm-up call (the probes' short timings)."""
    f()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


@functools.cache
def int_mm_fast() -> bool:
    """torch._int_mm is no slower than an fp32 GEMM of the same shape here (best of 3 each: ~5 ms in all where it is
    fast, ~150 ms where it is a fallback loop)."""
    M, K, N = 32, 1024, 1024
    q, w = torch.ones(M, K, dtype=torch.int8), torch.ones(N, K, dtype=torch.int8)
    x, wf = q.float(), w.float()
    return _best_of_3(lambda: torch._int_mm(q, w.t())) <= _best_of_3(lambda: F.linear(x, wf))


@functools.cache
def bf16_gemm_fast() -> bool:
    """A bf16 GEMM is no slower than an fp32 one at a compute-bound shape here (AVX512-BF16 / AMX; not AVX2, where
    oneDNN converts bf16 to fp32 inside: 3x slower at 64 rows on a TinyLlama layer)."""
    M, K, N = 64, 1024, 1024
    x, w = torch.ones(M, K), torch.ones(N, K)
    xb, wb = x.bfloat16(), w.bfloat16()
    return _best_of_3(lambda: F.linear(xb, wb)) <= _best_of_3(lambda: F.linear(x, w))


@functools.cache
def int8_backend() -> str:
    """Which int8 GEMMs the CPU paths use here:

    - "onednn": oneDNN's u8·s8 sums are exact and ``torch._int_mm`` is fast (VNNI / AMX x86): the plain-weight
      ``_int_mm`` paths, and the oneDNN ``qlinear`` paths where opted in;
    - "fbgemm": oneDNN's u8 sums saturate or ``_int_mm`` is slow (AVX2 x86), fbgemm is exact on 7-bit operands:
      the ``cpu:fbgemm`` paths on a packed fbgemm copy of the weight;
    - "none": neither (aarch64, other CPUs): ``torch._weight_int8pack_mm`` and dequantized float GEMMs only."""
    if onednn_u8_exact() and int_mm_fast():
        return "onednn"
    if fbgemm_ok():
        return "fbgemm"
    return "none"


def summary() -> str:
    """One line about this CPU for `explain`: the ISA torch uses and what the probes found."""
    isa = torch.backends.cpu.get_cpu_capability()
    return (f"CPU {platform.machine()} ({isa}): int8 GEMMs on {int8_backend()} (oneDNN u8 sums exact: "
            f"{onednn_u8_exact()}, _int_mm fast: {int_mm_fast()}, fbgemm 7-bit exact: {fbgemm_ok()}); bf16 GEMM fast: "
            f"{bf16_gemm_fast()}")
