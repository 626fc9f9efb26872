"""W8A16 fused linear: y = act((x · Wᵀ) · s_w + b), int8 W dequantized in registers.

x [M, K] (fp16/bf16/fp32, any strides), W [N, K] int8, s_w [N] fp32, b [N] or None -> y [M, N] in x's dtype.
Reference: fused.reference.linear_ref(dynamic=False).

Tiled GEMM in the shape of Triton's tutorial 03: each program owns a BLOCK_M × BLOCK_N output tile,
walks K, converts the int8 tile to the activation dtype (exact: |q| <= 127) and accumulates in fp32;
the per-channel scale, bias and activation run on the accumulator before the single store.
"""
import torch
import triton
import triton.language as tl

from fused.kernels import dot_mode
from fused.kernels.epilogue import activation


@triton.jit
def _int8_linear_kernel(
    x_ptr, w_ptr, ws_ptr, b_ptr, y_ptr,
    M, N, K,
    stride_xm, stride_xk,
    stride_wn, stride_wk,
    stride_ym, stride_yn,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
    DOT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # grouped order: GROUP_M row-tiles share the same weight columns while they are in L2
    group_size = GROUP_M * num_pid_n
    first_m = (pid // group_size) * GROUP_M
    rows_in_group = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % rows_in_group
    pid_n = (pid % group_size) // rows_in_group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_n[None, :] * stride_wn + offs_k[:, None] * stride_wk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        x = tl.load(x_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        w = tl.load(w_ptrs, mask=(offs_n[None, :] < N) & (offs_k[:, None] < k_left), other=0)
        if DOT == "fp32":
            acc = tl.dot(x.to(tl.float32), w.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(x, w.to(x.dtype), acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    n_mask = offs_n < N
    acc = acc * tl.load(ws_ptr + offs_n, mask=n_mask, other=0.0)[None, :]
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    acc = activation(acc, ACT)
    y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & n_mask[None, :])


def int8_linear(x: torch.Tensor, qweight: torch.Tensor, wscale: torch.Tensor,
                bias: torch.Tensor | None = None, act: str = "none",
                out: torch.Tensor | None = None) -> torch.Tensor:
    """Launch the W8A16 kernel on a 2-D x [M, K]; returns y [M, N] in x's dtype.

    ``out``: an [M, N] tensor of x's dtype (any strides) to write into instead of a fresh one."""
    assert x.dim() == 2 and qweight.dim() == 2 and x.shape[1] == qweight.shape[1], (x.shape, qweight.shape)
    assert qweight.dtype == torch.int8 and wscale.dtype == torch.float32
    M, K = x.shape
    N = qweight.shape[0]
    if out is None:
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    else:
        if out.shape != (M, N) or out.dtype != x.dtype or out.device != x.device:
            raise ValueError(f"int8_linear: out must be {x.dtype} {(M, N)} on {x.device}, got "
                             f"{out.dtype} {tuple(out.shape)} on {out.device}")
        y = out
    if M == 0:
        return y
    BLOCK_M = 16 if M <= 16 else (32 if M <= 32 else 64)
    BLOCK_N, BLOCK_K = 64, 64
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    _int8_linear_kernel[grid](
        x, qweight, wscale, bias if bias is not None else wscale, y,
        M, N, K,
        x.stride(0), x.stride(1),
        qweight.stride(0), qweight.stride(1),
        y.stride(0), y.stride(1),
        HAS_BIAS=bias is not None,
        ACT=act,
        DOT=dot_mode(x.dtype),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        GROUP_M=8,
    )
    return y
