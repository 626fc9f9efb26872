"""Random operands the GPU kernel tests share."""
import torch


def weights_8bit(N: int, K: int, fp8: bool, bias: bool):
    """A random 8-bit weight [N, K] on the GPU (e4m3: every value but NaN, subnormals included; int8: -127..127),
    per-row scales and, with ``bias``, a bf16 bias (else None)."""
    if fp8:
        q = torch.randint(0, 256, (N, K), device="cuda", dtype=torch.uint8)
        q = torch.where((q & 0x7F) == 0x7F, q - 1, q).view(torch.float8_e4m3fn)
    else:
        q = torch.randint(-127, 128, (N, K), device="cuda", dtype=torch.int8)
    s = torch.rand(N, device="cuda") * 0.01 + 1e-3
    b = torch.randn(N, device="cuda", dtype=torch.bfloat16) if bias else None
    return q, s, b
