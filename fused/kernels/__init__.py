"""Triton kernels, one per file with its launcher. Importing this package imports triton."""
import os

# Under TRITON_INTERPRET=1 (CPU tests), bf16 tl.dot operands come out wrong (numpy has no bf16), so the
# kernels take an fp32-operand dot there. Everything else (loads, masks, epilogues) runs as on the GPU.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def dot_mode(dtype) -> str:
    """How a kernel should run its floating-point dot for activations of ``dtype``:
    "native" (bf16/fp16 tensor cores) or "fp32" (fp32 activations, or the interpreter)."""
    import torch

    return "fp32" if INTERPRET or dtype == torch.float32 else "native"


def check_out(out, shape, dtype, device):
    """Validate a caller-provided output (any strides: kernels store through its strides)."""
    if tuple(out.shape) != tuple(shape) or out.dtype != dtype or out.device != device:
        raise ValueError(f"out must be {tuple(shape)} {dtype} on {device}, got {tuple(out.shape)} {out.dtype} on {out.device}")
    return out


# Host-side helpers for the launchers. triton.cdiv / triton.next_power_of_2 are ConstexprFunctions: called
# from Python they cost ~4 µs each, several per launch, on a path whose budget is ~10 µs per launch.
def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 0 else 0
