"""Microbenchmark of the Gluon W8A16 GEMM's consumer loop (fused/kernels/w8a16_ws.py) without its memory traffic
(thirty-first session: the kernel's tensor pipe runs 77.5% busy, the consumers stalled at their wgmma wait; which part
holds it back?). Each CTA loads ONE stage (x [256, 64] bf16, W [128, 64] int8) by TMA and then its two consumer
warpgroups run K_STEPS steps over that same stage, as the kernel's K loop does but with no TMA or stage barriers:
  MODE 0 "full": load the int8 A fragment from shared memory, widen, 4 wgmma, wait (the kernel's loop minus TMA);
  MODE 1 "reg": the A fragment widened once before the loop, each step only issues the 4 wgmma and waits;
  MODE 2 "one": as 0 but a single consumer warpgroup per CTA (the other idles).
TFLOP/s against the H200's ~800 for bf16 cuBLAS: "reg" near it says wgmma with a register A runs at full rate and the
load + widen per step is what costs; "full" near it says the kernel's TMA / shared-memory traffic does.
usage: python .ci/ws_micro.py [K_STEPS]"""
import os
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

sys.path.insert(0, os.getcwd())
from fused.kernels.w8a16_ws import _descriptor, _instr_n  # noqa: E402


@gluon.jit
def _micro_consumer(x_s, w_s, bar, y_ptr, k_steps, HALF: gl.constexpr, MODE: gl.constexpr):
    BLOCK_T: gl.constexpr = x_s.type.shape[0]
    ROWS: gl.constexpr = w_s.type.shape[0] // 2
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                         instr_shape=[16, _instr_n(BLOCK_T), 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    acc = gl.zeros((ROWS, BLOCK_T), dtype=gl.float32, layout=acc_layout)
    mbarrier.wait(bar, 0)
    if MODE != 2 or HALF == 0:
        a = w_s.slice(HALF * ROWS, ROWS, dim=0).load(a_layout).to(gl.bfloat16)
        for k in range(k_steps):
            if MODE != 1:
                a = w_s.slice(HALF * ROWS, ROWS, dim=0).load(a_layout).to(gl.bfloat16)
            acc = warpgroup_mma(a, x_s.permute((1, 0)), acc, is_async=True)
            acc, a = warpgroup_mma_wait(num_outstanding=0, deps=(acc, a))
    # one value per CTA and consumer, so the loop is not dead code
    s = gl.sum(gl.sum(acc, axis=1), axis=0)
    gl.store(y_ptr + gl.program_id(0) * 2 + HALF, s)


@gluon.jit
def _micro_idle(x_desc, w_desc, x_s, w_s, bar):
    mbarrier.expect(bar, x_desc.block_type.nbytes + w_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(x_desc, [0, 0], bar, x_s)
    tma.async_copy_global_to_shared(w_desc, [0, 0], bar, w_s)


@gluon.jit
def _micro_kernel(x_desc, w_desc, y_ptr, k_steps, MODE: gl.constexpr, num_warps: gl.constexpr):
    x_s = gl.allocate_shared_memory(x_desc.dtype, x_desc.block_type.shape, x_desc.layout)
    w_s = gl.allocate_shared_memory(w_desc.dtype, w_desc.block_type.shape, w_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    gl.warp_specialize([
        (_micro_consumer, (x_s, w_s, bar, y_ptr, k_steps, 0, MODE)),
        (_micro_consumer, (x_s, w_s, bar, y_ptr, k_steps, 1, MODE)),
        (_micro_idle, (x_desc, w_desc, x_s, w_s, bar)),
    ], [4, 1], [232, 24])


def run(mode: int, k_steps: int, ctas: int = 132):
    x = torch.randn(256, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randint(-127, 128, (128, 64), device="cuda", dtype=torch.int8)
    y = torch.empty(ctas * 2, device="cuda")
    xd, wd = _descriptor(x, [256, 64]), _descriptor(w, [128, 64])
    f = lambda: _micro_kernel[(ctas, )](xd, wd, y, k_steps, MODE=mode, num_warps=4)  # noqa: E731
    f()
    from triton.testing import do_bench

    us = min(do_bench(f, warmup=10, rep=50) for _ in range(3)) * 1e3
    rows = 64 if mode == 2 else 128
    return us, 2 * ctas * rows * 256 * 64 * k_steps / us / 1e6


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    for mode, name in ((0, "full (LDS + widen + 4 wgmma + wait)"), (1, "reg (4 wgmma + wait, A kept)"),
                       (2, "one consumer, full")):
        us, tf = run(mode, steps)
        print(f"ws_micro {name}: {steps} steps x 132 CTAs {us:.1f} µs, {tf:.0f} TFLOP/s")
