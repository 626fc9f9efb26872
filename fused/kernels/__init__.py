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
