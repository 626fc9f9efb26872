"""Decode (M <= 16) MLP block in one launch: y = down(h) with h the block's intermediate activation.

gated:  h = act(x·W_gᵀ·s_g + b_g) ⊙ (x·W_uᵀ·s_u + b_u)   W_g/W_u stacked in w1 [2H, K] (FusedGatedLinear)
plain:  h = act(x·W_1ᵀ·s_1 + b_1)                        w1 [H, K] (fc1-act-fc2)
then    y = (h·W_2ᵀ)·s_2 + b_2                           w2 [D, H]
x [M, K] bf16/fp16/fp32 (any strides); weights int8, or float8 e4m3 passed as uint8 (bitcast in
registers); scales fp32; biases any float dtype. Weight-only numerics, as the two-launch path at M <= 16:
h is computed in fp32 and ROUNDED TO x's dtype (the two-launch path stores it so), the down projection
accumulates in fp32 and y is cast to x's dtype. Optional SmoothQuant vectors (fused.smoothing) are folded
in the same way the modules apply them: x·(1/s_1) and h·(1/s_2), each rounded to x's dtype.
Reference: fused.reference.mlp_block_ref (gated_ref / linear_ref, weight-only, composed).

Grid over slices of H: program p owns h[:, p·BLOCK_H : (p+1)·BLOCK_H]. It reads its gate/up (or fc1) rows
over the whole K, finishes its h slice in registers (scale, bias, activation, gate, rounding), then
multiplies it by the matching column slice of W_2 in BLOCK_D chunks: an unscaled [M, D] partial of the
output, to be summed over the P = cdiv(H, BLOCK_H) programs. Every weight byte is read exactly once and h
never leaves the chip; the price is the reduction: P·M·D fp32 adds (Llama-3-8B, BLOCK_H=64, M=16: 14.7 M,
against 176 MB of weights), which grows with M and sets where the block stops paying
(fused.dispatch.DECODE_BLOCK_MAX_M). Two ways to sum the partials:

* default, ONE launch: each program adds its partial into an fp32 workspace [M, D] with atomics, one
  BLOCK_D chunk at a time; after each chunk's adds it bumps that chunk's counter (acq_rel), and the
  program that arrives last for a chunk applies s_2 and b_2, stores y there, and writes the chunk of the
  workspace (and its counter) back to zero, so no memset launch is needed before the next call. This is
  the fast default. fp32 addition is not associative and the order of the atomics depends on which
  program gets there first, so y may differ in the last bits from run to run (as accurate, not bit-stable).
* deterministic (``deterministic=True``, or under torch.use_deterministic_algorithms(True)): each program
  stores its partial into part[p] and a second small kernel, parallel over D, sums the P partials in a
  fixed order and runs the down epilogue: two launches and P·M·D·4 bytes written and read back, no
  atomics, bit-identical across runs.

A third way, not slices of H at all: fused.kernels.decode_chain runs the two layers' GEMV tiles as one chain
of work items in one launch (deterministic; no partials of y). Its configs (``CHAIN``) compete in this
kernel's tuner, so the block route's "one launch" is whichever of the designs is fastest for the shape.

The workspaces are cached per device (sized up as needed); like the split-K GEMV's counters they assume
calls on one device are stream-ordered (two streams running this kernel at once would share them).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fused.kernels import cdiv, check_out, dot_mode
from fused.kernels.act_quant import reciprocal
from fused.kernels.act_split import split_planes
from fused.kernels.decode_chain import block_operands, decode_chain
from fused.kernels.decode_chain import candidates as chain_candidates
from fused.kernels.epilogue import activation, dot_8bit
from fused.kernels.launch import empty, launch_kernel, persistent
from fused.kernels.splitk import buffers as splitk_buffers, grown
from fused.kernels.tuning import m_bucket, pick
from lowbit.quant import MIN_SCALE, SPLIT_QMAX


@triton.jit
def _down_epilogue(acc, offs_m, offs_d, M, D, s2_ptr, b2_ptr, y_ptr, stride_ym, stride_yd, mask,
                   HAS_B2: tl.constexpr):
    d_ok = offs_d < D
    y = acc * tl.load(s2_ptr + offs_d, mask=d_ok, other=0.0)[None, :]
    if HAS_B2:
        y += tl.load(b2_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_d[None, :] * stride_yd, y.to(y_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def _decode_block_kernel(
    x_ptr, w1_ptr, s1_ptr, b1_ptr, sx_ptr, w2_ptr, s2_ptr, b2_ptr, sh_ptr, y_ptr, ws_ptr, count_ptr,
    M, K, H, D,
    stride_xm, stride_xk, stride_w1r, stride_w1k, stride_w2d, stride_w2h, stride_ym, stride_yd,
    GATED: tl.constexpr, ACT: tl.constexpr, HAS_B1: tl.constexpr, HAS_B2: tl.constexpr,
    SMOOTH_X: tl.constexpr, SMOOTH_H: tl.constexpr, W1_FP8: tl.constexpr, W2_FP8: tl.constexpr,
    DETERMINISTIC: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT: tl.constexpr, CVT: tl.constexpr, SPLIT: tl.constexpr = False, QS: tl.constexpr = 32639.0,
    MIN_S: tl.constexpr = 1e-12,
):
    pid = tl.program_id(0)
    offs_m = tl.arange(0, BLOCK_M)
    m_ok = offs_m < M
    offs_h = pid * BLOCK_H + tl.arange(0, BLOCK_H)
    h_ok = offs_h < H

    if SPLIT:
        # int8 weights into int8 MMAs, no widening: x as two int8 planes per token (act_split's 15 bits),
        # whose scale needs the whole row first (a few KB from L2 at decode sizes)
        amax = tl.zeros((BLOCK_M,), dtype=tl.float32)
        bad = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for kq in range(0, K, BLOCK_K):
            offs_k = kq + tl.arange(0, BLOCK_K)
            k_ok = offs_k < K
            xt = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk,
                         mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            if SMOOTH_X:
                xt = (xt.to(tl.float32) * tl.load(sx_ptr + offs_k, mask=k_ok, other=0.0)[None, :]).to(xt.dtype)
            xt = xt.to(tl.float32)
            amax = tl.maximum(amax, tl.max(tl.abs(xt), axis=1))
            bad += tl.sum(tl.where(tl.abs(xt) < float("inf"), 0.0, 1.0), axis=1)
        x_bad = bad > 0
        xscale = tl.where(x_bad, float("nan"), tl.maximum(tl.math.div_rn(amax, QS), MIN_S))
        xinv = reciprocal(xscale)
        acc_gh = tl.zeros((BLOCK_M, BLOCK_H), dtype=tl.int32)
        acc_gl = tl.zeros((BLOCK_M, BLOCK_H), dtype=tl.int32)
        acc_uh = tl.zeros((BLOCK_M, BLOCK_H), dtype=tl.int32)
        acc_ul = tl.zeros((BLOCK_M, BLOCK_H), dtype=tl.int32)

    # ---- up: this program's [BLOCK_M, BLOCK_H] slice of gate/up (fc1) over the whole K
    acc_g = tl.zeros((BLOCK_M, BLOCK_H), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_H), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < K
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk,
                    mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        if SMOOTH_X:  # x·(1/s) in fp32, rounded to x's dtype: what FusedLinear._smooth does
            x = (x.to(tl.float32) * tl.load(sx_ptr + offs_k, mask=k_ok, other=0.0)[None, :]).to(x.dtype)
        w_mask = h_ok[:, None] & k_ok[None, :]
        wg = tl.load(w1_ptr + offs_h[:, None] * stride_w1r + offs_k[None, :] * stride_w1k, mask=w_mask, other=0)
        if SPLIT:
            xh, xl = split_planes(tl.where(x_bad[:, None], 0.0, x.to(tl.float32)), xinv[:, None], QS)
            acc_gh = tl.dot(xh, tl.trans(wg), acc_gh, out_dtype=tl.int32)
            acc_gl = tl.dot(xl, tl.trans(wg), acc_gl, out_dtype=tl.int32)
        else:
            acc_g = dot_8bit(acc_g, x, wg, W1_FP8, BLOCK_M, DOT, CVT)
        if GATED:
            wu = tl.load(w1_ptr + (H + offs_h)[:, None] * stride_w1r + offs_k[None, :] * stride_w1k,
                         mask=w_mask, other=0)
            if SPLIT:
                acc_uh = tl.dot(xh, tl.trans(wu), acc_uh, out_dtype=tl.int32)
                acc_ul = tl.dot(xl, tl.trans(wu), acc_ul, out_dtype=tl.int32)
            else:
                acc_u = dot_8bit(acc_u, x, wu, W1_FP8, BLOCK_M, DOT, CVT)
    if SPLIT:  # x·w = s·(256·(hi·w) + lo·w), the int32 sums combined in fp32
        acc_g = (acc_gh.to(tl.float32) * 256.0 + acc_gl.to(tl.float32)) * xscale[:, None]
        acc_u = (acc_uh.to(tl.float32) * 256.0 + acc_ul.to(tl.float32)) * xscale[:, None]

    h = acc_g * tl.load(s1_ptr + offs_h, mask=h_ok, other=0.0)[None, :]
    if HAS_B1:
        h += tl.load(b1_ptr + offs_h, mask=h_ok, other=0.0).to(tl.float32)[None, :]
    h = activation(h, ACT)
    if GATED:
        u = acc_u * tl.load(s1_ptr + H + offs_h, mask=h_ok, other=0.0)[None, :]
        if HAS_B1:
            u += tl.load(b1_ptr + H + offs_h, mask=h_ok, other=0.0).to(tl.float32)[None, :]
        h = h * u
    # the two-launch path stores h in x's dtype: round the same way
    h = h.to(x_ptr.dtype.element_ty)
    if SMOOTH_H:
        h = (h.to(tl.float32) * tl.load(sh_ptr + offs_h, mask=h_ok, other=0.0)[None, :]).to(x_ptr.dtype.element_ty)
    # columns past H meet zero-masked W_2 columns, but 0·NaN (from a NaN in x) is NaN: zero them
    h = tl.where(h_ok[None, :], h, tl.zeros_like(h))
    if SPLIT:  # h's slice as two int8 planes too, with a scale per (token, slice): finer than per token
        hf = h.to(tl.float32)
        h_bad = tl.sum(tl.where(tl.abs(hf) < float("inf"), 0.0, 1.0), axis=1) > 0
        hscale = tl.where(h_bad, float("nan"), tl.maximum(tl.math.div_rn(tl.max(tl.abs(hf), axis=1), QS), MIN_S))
        hh, hl = split_planes(tl.where(h_bad[:, None], 0.0, hf), reciprocal(hscale)[:, None], QS)

    # ---- down: the unscaled partial h_slice · W_2[:, slice]ᵀ, BLOCK_D outputs at a time. Program p starts
    # at chunk p: the programs' atomics then land on different addresses (L2 slices) at any moment, and
    # the chunks get finished (below) at different times instead of all by one program at the end.
    n_chunks = tl.cdiv(D, BLOCK_D)
    for i in range(0, n_chunks):
        chunk = (pid + i) % n_chunks
        offs_d = chunk * BLOCK_D + tl.arange(0, BLOCK_D)
        d_ok = offs_d < D
        w2 = tl.load(w2_ptr + offs_d[:, None] * stride_w2d + offs_h[None, :] * stride_w2h,
                     mask=d_ok[:, None] & h_ok[None, :], other=0)
        if SPLIT:
            part = tl.dot(hh, tl.trans(w2), out_dtype=tl.int32).to(tl.float32) * 256.0
            part = (part + tl.dot(hl, tl.trans(w2), out_dtype=tl.int32).to(tl.float32)) * hscale[:, None]
        else:
            part = dot_8bit(tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32), h, w2, W2_FP8, BLOCK_M, DOT, CVT)
        # workspace [M, D] (atomics) or part[P, M, D] (deterministic); rows past M dropped
        offs = offs_m[:, None] * D + offs_d[None, :]
        mask = m_ok[:, None] & d_ok[None, :]
        if DETERMINISTIC:
            tl.store(ws_ptr + pid * M * D + offs, part, mask=mask)
        else:
            tl.atomic_add(ws_ptr + offs, part, mask=mask, sem="relaxed")
            tl.debug_barrier()  # every thread's adds are issued before the release below
            count = tl.atomic_add(count_ptr + chunk, 1, sem="acq_rel")
            if count == tl.num_programs(0) - 1:  # the last program for this chunk: all partials are in
                acc = tl.load(ws_ptr + offs, mask=mask, other=0.0, cache_modifier=".cg")  # L2, where atomics land
                _down_epilogue(acc, offs_m, offs_d, M, D, s2_ptr, b2_ptr, y_ptr, stride_ym, stride_yd, mask, HAS_B2)
                tl.store(ws_ptr + offs, tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32), mask=mask)
                tl.atomic_xchg(count_ptr + chunk, 0)  # ready for the next call


@triton.jit
def _decode_block_reduce_kernel(part_ptr, s2_ptr, b2_ptr, y_ptr, M, D, P, stride_ym, stride_yd,
                                HAS_B2: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """Deterministic second stage: y[:, d-chunk] = epilogue(Σ_p part[p, :, d-chunk]) summed in order p = 0..P-1."""
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.program_id(0) * BLOCK_D + tl.arange(0, BLOCK_D)
    offs = offs_m[:, None] * D + offs_d[None, :]
    mask = (offs_m < M)[:, None] & (offs_d < D)[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for p in range(P):
        acc += tl.load(part_ptr + p * M * D + offs, mask=mask, other=0.0)
    _down_epilogue(acc, offs_m, offs_d, M, D, s2_ptr, b2_ptr, y_ptr, stride_ym, stride_yd, mask, HAS_B2)


# device -> (fp32 accumulator, int32 counters per D chunk), both kept at zero by the kernel. (The
# deterministic mode's part[P, M, D] has no invariant: it shares the split-K kernels' partials buffer.)
_workspace: dict = {}
_retired: list = []


def _buffers(device, numel: int, chunks: int):
    ws = _workspace.get(device)
    if ws is None or ws[0].numel() < numel or ws[1].numel() < chunks:
        old = ws or (None, None)
        new = (grown(old[0], numel, 1 << 16, lambda n: torch.zeros(n, device=device, dtype=torch.float32)),
               grown(old[1], chunks, 1024, lambda n: torch.zeros(n, device=device, dtype=torch.int32)))
        persistent(new, old=ws)
        if ws is not None:  # kept: a CUDA graph captured before may hold its address (as splitk._retired)
            _retired.append(ws)
        ws = _workspace[device] = new
    return ws


def _candidates(M: int, K: int, H: int, D: int, gated: bool, fp32_dot: bool = False,
                split_ok: bool = False) -> list[dict]:
    """First entry: the heuristic default (used untuned with FUSED_TUNE=0). BLOCK_H sets the programs
    (P = H / BLOCK_H) and so the reduction traffic (P·M·D atomics): small BLOCK_H fills the GPU, large
    BLOCK_H adds less. BLOCK_K follows BLOCK_H so the gate/up tiles of one step stay near 16 KiB of
    weights. CVT: how int8 becomes float ("magic": integer ops, see epilogue.int8_to_f32). ``fp32_dot``
    (fp32 activations, M > 1): the ieee fp32 dot is FMA code; tiles past these spill (ptxas, sm_90)."""
    if M > 1 and fp32_dot:
        return [dict(BLOCK_M=16, BLOCK_H=bh, BLOCK_K=bk, BLOCK_D=64, num_warps=4, CVT="magic")
                for bh, bk in ((32, 64), (64, 32), (16, 64))]
    if M == 1:
        bm, tiles = 1, [(32, 256, 128, 4, "magic"), (16, 512, 128, 4, "magic"), (64, 128, 128, 4, "magic"),
                        (32, 256, 256, 8, "magic"), (16, 512, 256, 8, "magic"), (64, 128, 256, 4, "native")]
    else:
        bm, tiles = 16, [(64, 128, 128, 4, "native"), (32, 256, 128, 4, "native"), (16, 256, 64, 4, "native"),
                         (128, 128, 128, 8, "native"), (64, 128, 64, 4, "magic"), (32, 256, 128, 8, "magic")]
    # a short list: every candidate is a compile on first use (tuning time), fp8 ignores CVT
    out = [dict(BLOCK_M=bm, BLOCK_H=bh, BLOCK_K=min(bk, 16384 // (bh * (2 if gated else 1))), BLOCK_D=bd,
                num_warps=w, CVT=cvt) for bh, bk, bd, w, cvt in tiles]
    if split_ok:  # int8 weights straight into int8 MMAs (activations split into two int8 planes)
        out += [dict(BLOCK_M=16, BLOCK_H=bh, BLOCK_K=bk, BLOCK_D=bd, num_warps=w, SPLIT=True)
                for bh, bk, bd, w in ((64, 128, 128, 4), (32, 256, 128, 4), (128, 128, 128, 8), (64, 256, 256, 4))]
    return out


def _interpret_config(M):
    return dict(BLOCK_M=1 if M == 1 else 16, BLOCK_H=16, BLOCK_K=32, BLOCK_D=16, num_warps=4, CVT="magic")


def decode_block(x: torch.Tensor, w1: torch.Tensor, s1: torch.Tensor, b1: torch.Tensor | None,
                 w2: torch.Tensor, s2: torch.Tensor, b2: torch.Tensor | None, act: str = "silu",
                 gated: bool = True, smooth_x: torch.Tensor | None = None, smooth_h: torch.Tensor | None = None,
                 deterministic: bool | None = None, config: dict | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """Launch on a 2-D x [M <= 16, K]. gated: w1 [2H, K] (gate rows, then up rows), else w1 [H, K];
    w2 [D, H]; s1/b1 per w1 row, s2/b2 per w2 row; smooth_x [K] / smooth_h [H]: 1/s of SmoothQuant
    smoothing (None: not smoothed). ``deterministic`` None: torch.are_deterministic_algorithms_enabled().
    Returns y [M, D] in x's dtype."""
    M, K = x.shape
    R, H, D = w1.shape[0], w2.shape[1], w2.shape[0]
    assert M <= 16 and w1.shape[1] == K and R == (2 * H if gated else H), (x.shape, w1.shape, w2.shape, gated)
    if deterministic is None:
        deterministic = torch.are_deterministic_algorithms_enabled()
    w1_dtype = w1.dtype
    w1_in, w2_in = w1, w2
    w1, w1_fp8, s1, b1, w2, w2_fp8, s2, b2 = block_operands(w1, s1, b1, w2, s2, b2)
    smooth_x = smooth_x.contiguous() if smooth_x is not None else None
    smooth_h = smooth_h.contiguous() if smooth_h is not None else None
    y = check_out(out, (M, D), x.dtype, x.device) if out is not None else empty((M, D), device=x.device,
                                                                                      dtype=x.dtype)
    if M == 0 or D == 0:
        return y

    chain_ok = smooth_x is None and smooth_h is None

    def launch(cfg):
        if cfg.get("CHAIN"):  # the other one-launch design (fused.kernels.decode_chain), deterministic too
            if not chain_ok:
                raise ValueError("decode_block: the chain configs take no SmoothQuant vectors")
            decode_chain(x, w1_in, s1, b1, w2_in, s2, b2, act, gated, cfg, out=y)
            return
        bm, bh, bd = cfg["BLOCK_M"], cfg["BLOCK_H"], cfg["BLOCK_D"]
        assert bm >= M, f"config BLOCK_M={bm} < M={M}"
        split = cfg.get("SPLIT", False)
        if split and (w1_fp8 or w2_fp8 or bm < 16):
            raise ValueError("decode_block SPLIT needs int8 weights and BLOCK_M >= 16")
        P = max(cdiv(H, bh), 1)
        if deterministic:
            ws, count = splitk_buffers(x.device, P * M * D, 0)[0], s1  # (no counter)
        else:
            ws, count = _buffers(x.device, M * D, cdiv(D, bd))
        launch_kernel(_decode_block_kernel, (P,),
            x, w1, s1, b1 if b1 is not None else s1, smooth_x if smooth_x is not None else s1,
            w2, s2, b2 if b2 is not None else s2, smooth_h if smooth_h is not None else s2, y, ws, count,
            M, K, H, D,
            x.stride(0), x.stride(1), w1.stride(0), w1.stride(1), w2.stride(0), w2.stride(1), y.stride(0), y.stride(1),
            GATED=gated, ACT=act, HAS_B1=b1 is not None, HAS_B2=b2 is not None,
            SMOOTH_X=smooth_x is not None, SMOOTH_H=smooth_h is not None, W1_FP8=w1_fp8, W2_FP8=w2_fp8,
            DETERMINISTIC=deterministic,
            BLOCK_M=bm, BLOCK_H=bh, BLOCK_K=cfg["BLOCK_K"], BLOCK_D=bd, DOT=dot_mode(x.dtype),
            CVT=cfg.get("CVT", "magic"), SPLIT=split, QS=float(SPLIT_QMAX), MIN_S=MIN_SCALE, num_warps=cfg["num_warps"],
        )
        if deterministic:
            launch_kernel(_decode_block_reduce_kernel, (cdiv(D, bd),),
                ws, s2, b2 if b2 is not None else s2, y, M, D, P, y.stride(0), y.stride(1),
                HAS_B2=b2 is not None, BLOCK_M=bm, BLOCK_D=bd, num_warps=4,
            )

    if config is None:
        from fused.kernels import INTERPRET

        fp32_dot = dot_mode(x.dtype) == "fp32"
        split_ok = not (w1_fp8 or w2_fp8 or fp32_dot)
        cands = (lambda: [_interpret_config(M)]) if INTERPRET else (
            lambda: _candidates(M, K, H, D, gated, fp32_dot, split_ok) + (chain_candidates(M, gated) if chain_ok else []))
        key = (m_bucket(M), K, H, D, gated, deterministic, w1_dtype, x.dtype, chain_ok)
        config = pick("decode_block", key, cands, launch)
    launch(config)
    return y
