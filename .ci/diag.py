"""H200 diagnostics: per-kernel device time of our Llama block per config and M, act_quant variants,
Triton launcher internals. Writes to $OUT/diag.txt. Not part of CI."""
import inspect
import os
import sys
import time

import torch
import triton
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.getcwd())
import fused  # noqa: E402
from fused.bench import make_block  # noqa: E402
from fused.kernels import act_quant as aq  # noqa: E402

OUT = os.environ.get("OUT", "out")
log = open(os.path.join(OUT, "diag.txt"), "a")


def p(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    log.write(s + "\n")
    log.flush()


def kernels(model, x, iters=5):
    with torch.no_grad():
        for _ in range(3):
            model(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as pr:
            for _ in range(iters):
                model(x)
            torch.cuda.synchronize()
    rows = []
    for e in pr.key_averages():
        if e.self_device_time_total > 0:
            rows.append((e.self_device_time_total / iters, e.count / iters, e.key[:90]))
    rows.sort(reverse=True)
    tot = sum(r[0] for r in rows)
    return tot, rows


what = sys.argv[1] if len(sys.argv) > 1 else "kernels,actq,launcher"
def per_kernel(cfgs: dict, Ms, skip=lambda name, M: False):
    """Per-kernel device time of our Llama block per config and M (profiler, not a graph)."""
    import copy
    base = make_block("llama", 4096, 14336, "cuda")
    for name, cfg in cfgs.items():
        m = fused.quantize(copy.deepcopy(base), cfg, blocks=True)
        for M in Ms:
            if skip(name, M):
                continue
            tot, rows = kernels(m, torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16))
            p(f"== {name} M={M}: kernel sum {tot:.1f} us")
            for t, c, k in rows[:6]:
                p(f"   {t:9.1f} us  x{c:.0f}  {k}")
        del m
        torch.cuda.empty_cache()


if "kernels" in what:
    per_kernel({"int8 W8A16": fused.FusedInt8MLP(), "int8 W8A8": fused.FusedInt8MLP(weight_only=False),
                "fp8 W8A8": fused.FusedFloat8MLP()}, (1, 16, 128, 1024, 8192),
               skip=lambda name, M: name == "int8 W8A16" and M == 8192)
    from fused.kernels import tuning
    for k, v in tuning.timings.items():
        p("timings", k, sorted(v, key=lambda t: t[0])[:4])

if "split512" in what:
    # where the split-activation W8A16 block's time goes at M = 128 / 512 (fp8 364.7 us at 512 vs 306 for
    # its tuned GEMMs on 2026-12-01): per-kernel device times, fp8 and int8 side by side
    per_kernel({"fp8 W8A16": fused.FusedFloat8MLP(weight_only=True), "int8 W8A16": fused.FusedInt8MLP()}, (128, 512))

if "actq" in what:
    from triton.testing import do_bench
    for K in (4096, 14336):
        x = torch.randn(8192, K, device="cuda", dtype=torch.bfloat16)
        for fp8 in (False, True):
            t = do_bench(lambda: aq.act_quant(x, fp8), warmup=10, rep=50)
            gb = x.numel() * 3 / 1e9
            p(f"act_quant M=8192 K={K} fp8={fp8}: {t*1e3:.1f} us ({gb / (t * 1e-3) / 1e3:.2f} TB/s)")
            q = torch.empty((8192, K), device="cuda", dtype=torch.float8_e4m3fn if fp8 else torch.int8)
            qv = q.view(torch.uint8) if fp8 else q
            s = torch.empty(8192, device="cuda", dtype=torch.float32)
            for block, warps in ((16384, 16), (16384, 32), (4096, 8), (2048, 4), (8192, 8)):
                if block < K and block > 8192:
                    continue
                def f():
                    aq._act_quant_kernel[(8192,)](x, qv, s, K, x.stride(0), x.stride(1), qv.stride(0),
                                                  QMAX=448.0 if fp8 else 127.0, MIN_S=1e-12, FP8=fp8,
                                                  BLOCK_K=min(block, triton.next_power_of_2(K)),
                                                  ONE_PASS=K <= block, num_warps=warps)
                t = do_bench(f, warmup=10, rep=50)
                p(f"    block {block} warps {warps}: {t*1e3:.1f} us")

if "host" in what:
    import cProfile
    import io
    import pstats

    from fused.kernels import launch
    base = make_block("llama", 4096, 14336, "cuda")
    import copy
    for name, cfg in (("int8 W8A16", fused.FusedInt8MLP()), ("fp8 W8A8", fused.FusedFloat8MLP())):
        m = fused.quantize(copy.deepcopy(base), cfg, blocks=True)
        for M in (1, 128):
            x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                for _ in range(5):
                    m(x)
                torch.cuda.synchronize()
                c0 = dict(launch.counts)
                t = time.perf_counter()
                for _ in range(300):
                    m(x)
                host = (time.perf_counter() - t) / 300 * 1e6
                torch.cuda.synchronize()
                tot = (time.perf_counter() - t) / 300 * 1e6
                p(f"{name} M={M}: host {host:.1f} us/call, with sync {tot:.1f}; launches {dict((k, launch.counts[k] - c0[k]) for k in c0)}")
                p(f"    replay_status (replayed signatures, refusals): {fused.dispatch.replay_status(m)}")
                if M == 1:
                    pr = cProfile.Profile()
                    pr.enable()
                    for _ in range(200):
                        m(x)
                    pr.disable()
                    sio = io.StringIO()
                    pstats.Stats(pr, stream=sio).sort_stats("tottime").print_stats(14)
                    p(sio.getvalue()[-3500:])
        del m

if "w8a16big" in what:
    # W8A16 at large M: widen the 8-bit weight to bf16 once per call (exact), then the same tiled kernel
    # with a bf16 B operand (pipelined wgmma, no per-tile widening) vs the mixed-input kernel
    from triton.testing import do_bench

    from fused.kernels.w8_gemm import w8_gemm
    from lowbit import quantize_weight
    for fmt in ("int8", "float8_e4m3"):
        for (N2, K, gated) in ((28672, 4096, True), (4096, 14336, False)):
            q, s_ = quantize_weight(torch.randn(N2, K, device="cuda"), fmt)
            for M in (128, 1024, 8192):
                x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
                t_mixed = do_bench(lambda: w8_gemm(x, q, s_, None, "silu", gated), warmup=5, rep=30)
                t_deq = do_bench(lambda: q.to(torch.bfloat16), warmup=5, rep=30)
                wb = q.to(torch.bfloat16)
                t_bf = do_bench(lambda: w8_gemm(x, wb, s_, None, "silu", gated), warmup=5, rep=30)
                ref = w8_gemm(x, q, s_, None, "silu", gated)
                d = (w8_gemm(x, wb, s_, None, "silu", gated).float() - ref.float()).abs().max().item()
                t_cub = do_bench(lambda: torch.mm(x, wb.t()), warmup=5, rep=30)
                p(f"w8a16 {fmt} N={N2} K={K} M={M}: mixed {t_mixed*1e3:.1f}  dequant {t_deq*1e3:.1f} + bf16 tiled {t_bf*1e3:.1f}  (cuBLAS mm alone {t_cub*1e3:.1f}) maxdiff {d:.3g}")

if "launcher" in what:
    from triton.compiler import compiler as cc
    p("== CompiledKernel source (triton", triton.__version__, ")")
    p(inspect.getsource(cc.CompiledKernel)[:6000])
    from triton.runtime import jit
    p(inspect.getsource(jit.JITFunction.run)[:5000])
    m = fused.quantize(make_block("llama", 4096, 14336, "cuda"), fused.FusedInt8MLP(), blocks=True)
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        for _ in range(5):
            m(x)
        torch.cuda.synchronize()
        for _ in range(3):
            t = time.perf_counter()
            for _ in range(200):
                m(x)
            torch.cuda.synchronize()
            p(f"plain block call M=1: {(time.perf_counter() - t) / 200 * 1e6:.1f} us")
    p(fused.bench.host_profile())

if "gemv" in what:
    # every w8a16_gemv candidate on the Llama shapes, L2 flushed by do_bench: which loop variant streams fastest
    from triton.testing import do_bench

    from fused.kernels.w8a16_gemv import _candidates, w8a16_gemv
    from lowbit import quantize_weight
    for fmt in ("int8", "float8_e4m3"):
        for name, R, K, gated in (("gate_up", 2 * 14336, 4096, True), ("down", 4096, 14336, False)):
            q, s = quantize_weight(torch.randn(R, K, device="cuda"), fmt)
            for M in (1, 16):
                x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
                N = R // 2 if gated else R
                res = []
                for c in _candidates(M, N, K, gated):
                    try:
                        t = do_bench(lambda: w8a16_gemv(x, q, s, None, "silu" if gated else "none", gated, config=c),
                                     warmup=10, rep=40, return_mode="median")
                    except Exception as e:  # noqa: BLE001
                        p(f"  {c}: {type(e).__name__}")
                        continue
                    res.append((t * 1e3, c))
                res.sort(key=lambda r: r[0])
                p(f"== gemv {fmt} {name} M={M}: {len(res)} configs")
                for t, c in res[:6]:
                    p(f"  {t:6.1f} us {R * K / t / 1e6:5.2f} TB/s {c}")


if "readbw" in what:
    # Is the decode GEMV's ~2.6 TB/s plateau its access pattern or its arithmetic? Stream the same [BN, BK]
    # int8 tiles with the GEMV's grid but almost no ALU work (xor of int32 words), next to a torch copy.
    import triton.language as tl
    from triton.testing import do_bench

    @triton.jit
    def _read_tiles(w_ptr, out_ptr, N, KW, stride_n, BLOCK_N: tl.constexpr, BLOCK_KW: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_N, BLOCK_KW), dtype=tl.int32)
        for k0 in range(0, KW, BLOCK_KW):
            offs = k0 + tl.arange(0, BLOCK_KW)
            acc ^= tl.load(w_ptr + rows[:, None] * stride_n + offs[None, :], mask=(rows[:, None] < N) & (offs[None, :] < KW), other=0)
        tl.store(out_ptr + rows, tl.xor_sum(acc, axis=1), mask=rows < N)

    @triton.jit
    def _read_blocked(w_ptr, out_ptr, KW, SPLIT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_KW: tl.constexpr):
        # the same tiles, but each [BLOCK_N, BLOCK_KW] tile contiguous (a weight pre-tiled at conversion):
        # program (tile, split) reads its K-range's tiles one after the other
        tile, sp = tl.program_id(0), tl.program_id(1)
        kper = KW // SPLIT
        base = tile.to(tl.int64) * BLOCK_N * KW + sp * kper * BLOCK_N
        offs = tl.arange(0, BLOCK_N)[:, None] * BLOCK_KW + tl.arange(0, BLOCK_KW)[None, :]
        acc = tl.zeros((BLOCK_N, BLOCK_KW), dtype=tl.int32)
        for k0 in range(0, kper, BLOCK_KW):
            acc ^= tl.load(w_ptr + base + k0 * BLOCK_N + offs)
        tl.store(out_ptr + (tile * SPLIT + sp) * BLOCK_N + tl.arange(0, BLOCK_N), tl.xor_sum(acc, axis=1))

    @triton.jit
    def _read_tiles_split(w_ptr, out_ptr, N, KW, stride_n, SPLIT: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_KW: tl.constexpr):
        tile, sp = tl.program_id(0), tl.program_id(1)
        kper = KW // SPLIT
        rows = tile * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_N, BLOCK_KW), dtype=tl.int32)
        for k0 in range(sp * kper, (sp + 1) * kper, BLOCK_KW):
            offs = k0 + tl.arange(0, BLOCK_KW)
            acc ^= tl.load(w_ptr + rows[:, None].to(tl.int64) * stride_n + offs[None, :])
        tl.store(out_ptr + (tile * SPLIT + sp) * BLOCK_N + tl.arange(0, BLOCK_N), tl.xor_sum(acc, axis=1))

    for name, R, K in (("gate_up", 2 * 14336, 4096), ("down", 4096, 14336)):
        w = torch.randint(-128, 127, (R, K), device="cuda", dtype=torch.int8)
        w32 = w.view(torch.int32)
        out = torch.empty(R * 16, device="cuda", dtype=torch.int32)
        t = do_bench(lambda: w.clone(), warmup=10, rep=40, return_mode="median")
        p(f"== readbw {name}: torch clone {t * 1e3:.1f} us = {2 * R * K / t / 1e9:.2f} TB/s (read+write)")
        t = do_bench(lambda: w32.sum(), warmup=10, rep=40, return_mode="median")
        p(f"   torch int32 sum {t * 1e3:.1f} us = {R * K / t / 1e9:.2f} TB/s (read)")
        res = []
        for bn in (16, 32, 64):
            for bk in (128, 256, 512):
                for split in (1, 2, 4, 8):
                    if K // split < bk:
                        continue
                    for warps in (4, 8):
                        for lay, kern in (("rowmajor", _read_tiles_split), ("pretiled", _read_blocked)):
                            if lay == "rowmajor":
                                f = lambda: kern[(R // bn, split)](w32, out, R, K // 4, w32.stride(0), SPLIT=split,  # noqa: E731
                                                                    BLOCK_N=bn, BLOCK_KW=bk // 4, num_warps=warps)
                            else:
                                f = lambda: kern[(R // bn, split)](w32, out, K // 4, SPLIT=split, BLOCK_N=bn,  # noqa: E731
                                                                    BLOCK_KW=bk // 4, num_warps=warps)
                            t = do_bench(f, warmup=10, rep=40, return_mode="median")
                            res.append((t * 1e3, lay, bn, bk, split, warps))
        for lay in ("rowmajor", "pretiled"):
            rs = sorted(r for r in res if r[1] == lay)
            p(f"  {lay}: best 6 of {len(rs)}, worst {rs[-1][0]:.1f} us")
            for t, _, bn, bk, split, warps in rs[:6]:
                p(f"    BN {bn:3d} BK {bk:4d} split {split} warps {warps}: {t:6.1f} us {R * K / t / 1e6:5.2f} TB/s")

if "ncu1" in what:
    # run under ncu: the tuned (shipped) decode GEMV picks of the Llama block at M=1, 3 launches each
    from fused.kernels.w8a16_gemv import w8a16_gemv
    from lowbit import quantize_weight
    for fmt in ("int8", "float8_e4m3"):
        for R, K, gated in ((2 * 14336, 4096, True), (4096, 14336, False)):
            q, s = quantize_weight(torch.randn(R, K, device="cuda"), fmt)
            x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
            for _ in range(3):
                w8a16_gemv(x, q, s, None, "silu" if gated else "none", gated)
            torch.cuda.synchronize()

if "decode8" in what:
    # decode (M = 1, 16) with the weights fed straight into tensor-core MMAs (no per-weight widening): the
    # W8A8 tiled GEMM (act_quant + w8_gemm) and, for W8A16 int8, split activations (act_split + w8_gemm
    # x_split), each config timed; vs the weight-only GEMV's tuned pick. L2 flushed by do_bench.
    from triton.testing import do_bench

    from fused.kernels import w8_gemm as wg
    from fused.kernels.act_quant import act_quant
    from fused.kernels.act_split import act_split
    from fused.kernels.w8a16_gemv import w8a16_gemv
    from lowbit import quantize_weight
    for fmt in ("int8", "float8_e4m3"):
        for name, R, K, gated in (("gate_up", 2 * 14336, 4096, True), ("down", 4096, 14336, False)):
            q, s = quantize_weight(torch.randn(R, K, device="cuda"), fmt)
            N = R // 2 if gated else R
            act = "silu" if gated else "none"
            for M in (1, 16):
                x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
                t = do_bench(lambda: w8a16_gemv(x, q, s, None, act, gated), warmup=10, rep=40, return_mode="median")
                p(f"== decode8 {fmt} {name} M={M}: GEMV (tuned pick) {t * 1e3:.1f} us {R * K / t / 1e9:.2f} TB/s")
                xq, xs = act_quant(x, fp8=fmt != "int8")
                modes = [("W8A8 tiled", lambda c: wg.w8_gemm(xq, q, s, None, act, gated, x_scale=xs,
                                                              out_dtype=x.dtype, config=c)),
                         ("W8A8 tiled, x quantized inside", lambda c: wg.w8_gemm(x, q, s, None, act, gated, config=c,
                                                                                  quantize_x=True))]
                if fmt == "int8":
                    planes, ps = act_split(x)
                    modes.append(("split W8A16", lambda c: wg.w8_gemm(planes, q, s, None, act, gated, x_scale=ps,
                                                                       out_dtype=x.dtype, config=c, x_split=True)))
                    modes.append(("split W8A16, planes made inside", lambda c: wg.w8_gemm(
                        x, q, s, None, act, gated, config=c, quantize_x=True, x_split=True)))
                t = do_bench(lambda: act_quant(x, fp8=fmt != "int8"), warmup=10, rep=40, return_mode="median")
                t2 = do_bench(lambda: act_split(x), warmup=10, rep=40, return_mode="median")
                p(f"  act_quant {t * 1e3:.1f} us, act_split {t2 * 1e3:.1f} us")
                for label, fn in modes:
                    res = []
                    for c in wg._candidates(max(M, 2), N, K, gated, True):
                        try:
                            res.append((do_bench(lambda: fn(c), warmup=10, rep=40, return_mode="median") * 1e3, c))
                        except Exception as e:  # noqa: BLE001
                            p(f"  {label} {c}: {type(e).__name__}")
                    res.sort(key=lambda r: r[0])
                    for t, c in res[:3]:
                        p(f"  {label}: {t:6.1f} us {R * K / t / 1e6:5.2f} TB/s {c}")

if "readtma" in what:
    # Can the weight stream go faster than the plain LDG loop (readbw: 38.0 us gate/up, 23.0 down, whatever the
    # tile)? The same read-and-xor with software-pipelined loads (tl.range num_stages: cp.async) and with TMA
    # (host TensorDescriptor, multi-stage), L2 flushed by do_bench as in readbw.
    import triton.language as tl
    from triton.testing import do_bench

    @triton.jit
    def _rd_plain(w_ptr, out_ptr, K, stride_n, SPLIT: tl.constexpr, STAGES: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
        tile, sp = tl.program_id(0), tl.program_id(1)
        kper = K // SPLIT
        rows = tile * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_N, BLOCK_K // 4), dtype=tl.int32)
        for k0 in tl.range(sp * kper, (sp + 1) * kper, BLOCK_K, num_stages=STAGES):
            offs = k0 + tl.arange(0, BLOCK_K)
            v = tl.load(w_ptr + rows[:, None].to(tl.int64) * stride_n + offs[None, :])
            acc ^= v.to(tl.int32, bitcast=False).reshape(BLOCK_N, BLOCK_K // 4, 4).sum(axis=2)
        tl.store(out_ptr + (tile * SPLIT + sp) * BLOCK_N + tl.arange(0, BLOCK_N), tl.xor_sum(acc, axis=1))

    @triton.jit
    def _rd_tma(desc, out_ptr, K, SPLIT: tl.constexpr, STAGES: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr):
        tile, sp = tl.program_id(0), tl.program_id(1)
        kper = K // SPLIT
        acc = tl.zeros((BLOCK_N, BLOCK_K // 4), dtype=tl.int32)
        for k0 in tl.range(sp * kper, (sp + 1) * kper, BLOCK_K, num_stages=STAGES):
            v = desc.load([tile * BLOCK_N, k0])
            acc ^= v.to(tl.int32).reshape(BLOCK_N, BLOCK_K // 4, 4).sum(axis=2)
        tl.store(out_ptr + (tile * SPLIT + sp) * BLOCK_N + tl.arange(0, BLOCK_N), tl.xor_sum(acc, axis=1))

    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError as e:
        TensorDescriptor = None
        p(f"no TensorDescriptor: {e}")
    for name, R, K in (("gate_up", 2 * 14336, 4096), ("down", 4096, 14336)):
        w = torch.randint(-128, 127, (R, K), device="cuda", dtype=torch.int8)
        out = torch.empty(R * 16, device="cuda", dtype=torch.int32)
        p(f"== readtma {name} ({R * K / 1e6:.1f} MB)")
        res = []
        for bn, bk in ((16, 256), (32, 256), (64, 128), (64, 256)):
            for split in ((1, 4) if name == "gate_up" else (4, 8)):
                if K // split < 2 * bk:
                    continue
                for warps in (4, 8):
                    for kind in ("plain", "tma"):
                        if kind == "tma" and TensorDescriptor is None:
                            continue
                        for stages in ((1, 3) if kind == "plain" else (2, 3, 4)):
                            if kind == "plain":
                                f = lambda: _rd_plain[(R // bn, split)](w, out, K, w.stride(0), SPLIT=split,  # noqa: E731
                                    STAGES=stages, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps)
                            else:
                                d = TensorDescriptor(w, [R, K], [K, 1], [bn, bk])
                                f = lambda: _rd_tma[(R // bn, split)](d, out, K, SPLIT=split, STAGES=stages,  # noqa: E731
                                    BLOCK_N=bn, BLOCK_K=bk, num_warps=warps)
                            try:
                                t = do_bench(f, warmup=10, rep=30, return_mode="median")
                            except Exception as e:  # noqa: BLE001
                                p(f"  {kind} s{stages} BN {bn} BK {bk}: {type(e).__name__} {str(e)[:120]}")
                                continue
                            res.append((t * 1e3, f"{kind} s{stages}", bn, bk, split, warps))
        for kind in sorted({r[1] for r in res}):
            rs = sorted(r for r in res if r[1] == kind)
            p(f"  {kind}: best 4 of {len(rs)}")
            for t, _, bn, bk, split, warps in rs[:4]:
                p(f"    BN {bn:3d} BK {bk:4d} split {split} warps {warps}: {t:6.1f} us {R * K / t / 1e6:5.2f} TB/s")

if "pdl" in what:
    # Programmatic dependent launch: the down GEMV's weights do not depend on the gate/up output, so its
    # programs could start streaming while the gate/up kernel drains. Pure-read stand-ins for the two
    # kernels (read-and-xor over the Llama gate/up and down weights), back to back, with and without PDL.
    import triton.language as tl
    from triton.testing import do_bench

    try:
        from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
    except ImportError as e:
        p(f"no gdc: {e}")
        raise SystemExit

    @triton.jit
    def _rd_dep(w_ptr, out_ptr, K, stride_n, SPLIT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                PDL: tl.constexpr):
        if PDL:
            gdc_launch_dependents()
        tile, sp = tl.program_id(0), tl.program_id(1)
        kper = K // SPLIT
        rows = tile * BLOCK_N + tl.arange(0, BLOCK_N)
        base = w_ptr + rows[:, None].to(tl.int64) * stride_n + sp * kper + tl.arange(0, BLOCK_K)[None, :]
        v = tl.load(base)  # the first weight tile before waiting for the previous kernel
        if PDL:
            gdc_wait()
        acc = v.to(tl.int32)
        for k0 in range(BLOCK_K, kper, BLOCK_K):
            acc ^= tl.load(base + k0).to(tl.int32)
        tl.store(out_ptr + (tile * SPLIT + sp) * BLOCK_N + tl.arange(0, BLOCK_N), tl.xor_sum(acc, axis=1))

    wa = torch.randint(-128, 127, (2 * 14336, 4096), device="cuda", dtype=torch.int8)
    wb = torch.randint(-128, 127, (4096, 14336), device="cuda", dtype=torch.int8)
    out = torch.empty(1 << 20, device="cuda", dtype=torch.int32)

    def run(pdl, cfg_a=(32, 256, 1, 4), cfg_b=(32, 256, 4, 4)):
        for w, (bn, bk, split, warps) in ((wa, cfg_a), (wb, cfg_b)):
            R, K = w.shape
            kw = dict(launch_pdl=True) if pdl else {}
            _rd_dep[(R // bn, split)](w, out, K, w.stride(0), SPLIT=split, BLOCK_N=bn, BLOCK_K=bk, PDL=pdl,
                                      num_warps=warps, **kw)

    for pdl in (False, True, False, True):
        try:
            t = do_bench(lambda: run(pdl), warmup=10, rep=50, return_mode="median")
            g = torch.cuda.CUDAGraph()
            run(pdl)
            with torch.cuda.graph(g):
                for _ in range(10):
                    run(pdl)
            tg = do_bench(lambda: g.replay(), warmup=5, rep=50, return_mode="median") / 10
            p(f"== pdl={pdl}: two reads (176 MB) {t * 1e3:.1f} us do_bench, {tg * 1e3:.1f} us per pair in a graph")
        except Exception as e:  # noqa: BLE001
            p(f"== pdl={pdl}: {type(e).__name__} {str(e)[:300]}")

if "ncu128" in what:
    # run under ncu: the tuned W8A8 tiled GEMMs of the Llama block at M=128 (fp8, int8), 2 launches each
    from fused.kernels.act_quant import act_quant
    from fused.kernels.w8_gemm import w8_gemm
    from lowbit import quantize_weight
    for fmt in ("float8_e4m3", "int8"):
        for R, K, gated in ((2 * 14336, 4096, True), (4096, 14336, False)):
            q, s = quantize_weight(torch.randn(R, K, device="cuda"), fmt)
            xq, xs = act_quant(torch.randn(128, K, device="cuda", dtype=torch.bfloat16), fp8=fmt != "int8")
            # the picks of the 2026-12-01 full bench (examples/results/h200/llama_bench.json): no tuning under ncu
            cfg = dict(BLOCK_M=64 if (gated and fmt != "int8") else 128, BLOCK_N=128 if (gated and fmt != "int8") else 64,
                       BLOCK_K=128, GROUP_M=8, num_stages=4, num_warps=8 if (gated and fmt == "int8") else 4,
                       SPLIT_K=1 if gated else 4)
            print("config", fmt, R, K, cfg)
            for _ in range(2):
                w8_gemm(xq, q, s, None, "silu" if gated else "none", gated, x_scale=xs, out_dtype=torch.bfloat16,
                        config=cfg)
            torch.cuda.synchronize()

if "ncusplit128" in what:
    # run under ncu (NOTES, thirty-ninth): W8A16 through split activations at M=128, int8, Llama (issue 3: block 114 µs
    # against 75; layers alone 74.6 gated / 46.4 down, twenty-ninth). The shipped picks, then for the down the stacked
    # 128x128 tile with split-K 4 / 8 (fewer L2 bytes per product: it lost the tuning), 2 launches each, no tuning
    from fused.kernels.act_split import act_split
    from fused.kernels.tuned_h200 import TUNED
    from fused.kernels.w8_gemm import w8_gemm
    from lowbit import quantize_weight
    for R, K, gated in ((2 * 14336, 4096, True), (4096, 14336, False)):
        q, s = quantize_weight(torch.randn(R, K, device="cuda"), "int8")
        planes, xs = act_split(torch.randn(128, K, device="cuda", dtype=torch.bfloat16))
        shipped = TUNED[("w8_gemm", "128", str(R // 2 if gated else R), str(K), str(gated), "True", "torch.int8",
                         "split")]
        cfgs = [shipped] + ([] if gated else [dict(shipped, BLOCK_N=128, num_stages=3, num_warps=8, SPLIT_K=sk)
                                              for sk in (4, 8)])
        for cfg in cfgs:
            print("config", R, K, cfg, flush=True)
            for _ in range(2):
                w8_gemm(planes, q, s, None, "silu" if gated else "none", gated, x_scale=xs, out_dtype=torch.bfloat16,
                        config=cfg, x_split=True)
            torch.cuda.synchronize()

if "narrow8" in what:
    # one candidate config of the 8-layer narrow MLP (tests/test_narrow_mlp.py ARCHS), in its own process so a
    # fault names its config: `diag.py narrow8 fp16 3`
    sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
    from test_narrow_mlp import ARCHS, make_seq

    from fused.kernels.narrow_mlp import candidates, narrow_mlp
    from fused.narrow import FusedNarrowMLP, padded_width
    from fused.reference import narrow_mlp_ref
    from lowbit import sqnr
    wdtype, i = sys.argv[2], int(sys.argv[3])
    dims, acts = ARCHS["8-layers"]
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a smoke test under TRITON_INTERPRET=1
    mod = FusedNarrowMLP.from_module(make_seq(dims, acts).to(dev), wdtype)
    dtype = torch.bfloat16 if wdtype == "bf16" else torch.float16
    x = torch.randn(5000 if dev == "cuda" else 40, dims[0], device=dev, dtype=dtype)
    ref = narrow_mlp_ref(x, mod.weights, mod.params, mod.dims, mod.acts)
    cfg = candidates(max(padded_width(d) for d in dims))[i]
    p("cfg", wdtype, i, cfg)
    y = narrow_mlp(x, mod.weights, mod.params, mod.dims, mod.acts, config=cfg, out=torch.full_like(ref, float("nan")))
    if dev == "cuda":
        torch.cuda.synchronize()
    p("cfg", wdtype, i, "ok, sqnr", round(sqnr(ref.float(), y.float()), 1))

if "graphprof" in what:
    # where a block's CUDA-graph time goes (eighth session): per-kernel device µs of graph replays (graph picks:
    # cuBLAS / cslt routes included), per config and M
    import copy

    from fused.bench import OURS, SPARSE_FP8
    cfgs = {**OURS, **SPARSE_FP8}
    names = os.environ.get("GP_CONFIGS", "ours fp8 W8A8,ours fp8 2:4 W8A8").split(",")
    Ms = [int(v) for v in os.environ.get("GP_MS", "128,1024,8192").split(",")]
    base = make_block("llama", 4096, 14336, "cuda")
    for name in names:
        m = fused.quantize(copy.deepcopy(base), cfgs[name](), blocks=True)
        for M in Ms:
            x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                m(x)
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    m(x)
                    m(x)
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    m(x)
            from triton.testing import do_bench
            t = do_bench(g.replay, warmup=25, rep=100, return_mode="median") * 1e3
            for _ in range(3):
                g.replay()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as pr:
                for _ in range(5):
                    g.replay()
                torch.cuda.synchronize()
            rows = sorted(((e.self_device_time_total / 5, e.count / 5, e.key[:80]) for e in pr.key_averages()
                           if e.self_device_time_total > 0), reverse=True)
            p(f"== {name} M={M}: graph {t:.1f} us, kernel sum {sum(r[0] for r in rows):.1f}")
            for tt, c, k in rows[:8]:
                p(f"   {tt:8.1f} us x{c:.0f} {k}")
            del g
        del m
        torch.cuda.empty_cache()
    from fused.kernels import tuning
    for k, v in tuning.timings.items():
        if k[0] == "epilogue_quant":
            p("timings", k, sorted(v, key=lambda t: t[0])[:4])

if "rowwise" in what:
    # torch._scaled_mm with rowwise scales (scale_a [M, 1], scale_b [1, N]: CUTLASS on sm90) against unit
    # scales (cuBLAS), graph replays of 10 calls, µs per call
    from lowbit import quantize_weight
    for name, N, K in (("gate_up", 28672, 4096), ("down", 4096, 14336)):
        w, ws = quantize_weight(torch.randn(N, K, device="cuda"), "float8_e4m3")
        for M in (16, 128, 1024, 8192):
            xq = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
            xs = torch.rand(M, 1, device="cuda") + 0.5
            one = torch.ones((), device="cuda")
            res = {}
            for mode, f in (("unit", lambda: torch._scaled_mm(xq, w.t(), one, one, out_dtype=torch.bfloat16)),
                            ("rowwise", lambda: torch._scaled_mm(xq, w.t(), xs, ws.view(1, -1), out_dtype=torch.bfloat16)),
                            ("rowwise_fast", lambda: torch._scaled_mm(xq, w.t(), xs, ws.view(1, -1), out_dtype=torch.bfloat16,
                                                                      use_fast_accum=True))):
                try:
                    f()
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        for _ in range(10):
                            f()
                    from triton.testing import do_bench
                    res[mode] = do_bench(g.replay, warmup=5, rep=40, return_mode="median") * 1e3 / 10
                except Exception as e:  # noqa: BLE001
                    res[mode] = f"{type(e).__name__}: {str(e)[:80]}"
            p(f"rowwise {name} M={M}: " + "  ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in res.items()))

if "actq2" in what:
    # act_quant / act_split throughput after the reciprocal change (eighth session), and num_warps variants
    from triton.testing import do_bench

    from fused.kernels import next_pow2
    from fused.kernels.act_split import act_split
    from fused.kernels.launch import launch_kernel
    for K in (4096, 14336):
        for M in (128, 1024, 8192):
            x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            for fp8 in (False, True):
                t = do_bench(lambda: aq.act_quant(x, fp8), warmup=10, rep=50, return_mode="median")
                gb = x.numel() * 3 / 1e9
                res = [f"default {t*1e3:.1f} us ({gb / (t * 1e-3) / 1e3:.2f} TB/s)"]
                q = torch.empty((M, K), device="cuda", dtype=torch.uint8 if fp8 else torch.int8)
                s = torch.empty(M, device="cuda", dtype=torch.float32)
                block = min(next_pow2(K), aq.MAX_ONE_PASS)
                for warps in (4, 8, 16, 32):
                    def f():
                        launch_kernel(aq._act_quant_kernel, (M,), x, q, s, M, K, x.stride(0), x.stride(1), q.stride(0),
                                      QMAX=448.0 if fp8 else 127.0, MIN_S=1e-12, FP8=fp8, BLOCK_K=block,
                                      ONE_PASS=K <= block, HAND_ROUND=False, num_warps=warps)
                    res.append(f"w{warps} {do_bench(f, warmup=10, rep=50, return_mode='median')*1e3:.1f}")
                ts = do_bench(lambda: act_split(x, fp8=fp8), warmup=10, rep=50, return_mode="median")
                res.append(f"act_split {ts*1e3:.1f}")
                p(f"actq M={M} K={K} fp8={fp8}: " + "  ".join(res))

if "w8a16parts" in what:
    # the pieces of W8A16 on cuBLAS (tenth session): bf16 eager's kernels, stacked vs separate cuBLAS GEMMs, the
    # widening, scale_epilogue, and a side-stream widen overlapped with a GEMM. Graph replays, µs.
    from triton.testing import do_bench

    from fused.kernels.scale_epilogue import scale_epilogue
    from fused.kernels.widen import widen

    def gt(f, n=1):
        f()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            f()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            f()
        return do_bench(g.replay, warmup=10, rep=60, return_mode="median") * 1e3

    H, D = 14336, 4096
    wg = torch.randn(2 * H, D, device="cuda", dtype=torch.bfloat16) * 0.02
    wd = torch.randn(D, H, device="cuda", dtype=torch.bfloat16) * 0.02
    qg = torch.randint(-127, 128, (2 * H, D), device="cuda", dtype=torch.int8)
    qd = torch.randint(-127, 128, (D, H), device="cuda", dtype=torch.int8)
    sg = torch.rand(2 * H, device="cuda") * 1e-3
    sd = torch.rand(D, device="cuda") * 1e-3
    p("widen gate/up", round(gt(lambda: widen(qg)), 1), "down", round(gt(lambda: widen(qd)), 1))
    for M in (1024, 8192):
        x = torch.randn(M, D, device="cuda", dtype=torch.bfloat16)
        h = torch.randn(M, H, device="cuda", dtype=torch.bfloat16)
        g1, u1 = wg[:H], wg[H:]

        def eager():
            a = torch.mm(x, g1.t())
            b = torch.mm(x, u1.t())
            return torch.mm(torch.nn.functional.silu(a) * b, wd.t())
        r = {"bf16 eager block": gt(eager),
             "mm gate (N=H)": gt(lambda: torch.mm(x, g1.t())),
             "mm gate|up stacked": gt(lambda: torch.mm(x, wg.t())),
             "mm down": gt(lambda: torch.mm(h, wd.t())),
             "scale_epilogue gated": gt(lambda y=torch.mm(x, wg.t()): scale_epilogue(y, None, sg, None, "silu", True,
                                                                                    torch.bfloat16)),
             "scale_epilogue down": gt(lambda y=torch.mm(h, wd.t()): scale_epilogue(y, None, sd, None, None, False,
                                                                                  torch.bfloat16))}
        for c in (2, 4):
            rows = 2 * H // c

            def chunked(c=c, rows=rows):
                y = torch.empty(M, 2 * H, device="cuda", dtype=torch.bfloat16)
                w = torch.empty(2 * H, D, device="cuda", dtype=torch.bfloat16)
                main = torch.cuda.current_stream()
                side.wait_stream(main)
                evs = []
                with torch.cuda.stream(side):
                    for i in range(c):
                        widen(qg[i * rows:(i + 1) * rows], out=w[i * rows:(i + 1) * rows])
                        e = torch.cuda.Event()
                        e.record(side)
                        evs.append(e)
                for i in range(c):
                    main.wait_event(evs[i])
                    torch.mm(x, w[i * rows:(i + 1) * rows].t(), out=y[:, i * rows:(i + 1) * rows])
                return y
            side = torch.cuda.Stream()
            r[f"widen+mm gate|up chunked {c} (side stream)"] = gt(chunked)
        r["widen+mm gate|up serial"] = gt(lambda: torch.mm(x, widen(qg).t()))
        for k, v in r.items():
            p(f"w8a16parts M={M} {k}: {v:.1f} us")

if "tmadown" in what:
    # W8A8 fp8 down projection at M = 128 (tenth session): cuBLAS takes 21.5 us, our w8_gemm pick 33.8. A bare
    # split-K fp8 GEMM (partials stored, no reduce) with pointer loads and with TMA descriptors, over tiles;
    # and the same with x in bf16 quantized inside the loop per 1x128 group (acc += dot(q, w) * s), which would
    # drop act_quant(h). do_bench with L2 flushed, us.
    import triton.language as tl
    from triton.testing import do_bench

    @triton.jit
    def _dn(x_ptr, w_ptr, xd, wd, part_ptr, M, N, K, KPER, sxm, swn, TMA: tl.constexpr, QX: tl.constexpr,
            STAGES: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pn, pk = tl.program_id(0), tl.program_id(1)
        rm = tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in tl.range(pk * KPER, (pk + 1) * KPER, BK, num_stages=STAGES):
            if TMA:
                a = xd.load([0, k0])
                b = wd.load([pn * BN, k0])
            else:
                rk = k0 + tl.arange(0, BK)
                a = tl.load(x_ptr + rm[:, None] * sxm + rk[None, :])
                b = tl.load(w_ptr + rn[:, None].to(tl.int64) * swn + rk[None, :])
            if QX:
                af = a.to(tl.float32)
                s = tl.maximum(tl.max(tl.abs(af), axis=1) / 448.0, 1e-12)
                q = (af * (1.0 / s)[:, None]).to(tl.float8e4nv)
                acc += tl.dot(q, tl.trans(b)) * s[:, None]
            else:
                acc = tl.dot(a, tl.trans(b), acc)
        tl.store(part_ptr + pk * M * N + rm[:, None] * N + rn[None, :], acc)

    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:
        TensorDescriptor = None
    M, N, K = 128, 4096, 14336
    w = (torch.randn(N, K, device="cuda") * 100).clamp(-440, 440).to(torch.float8_e4m3fn)
    xq = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
    xb = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    one = torch.ones((), device="cuda")
    p("tmadown cublas unit-scale", round(do_bench(lambda: torch._scaled_mm(xq, w.t(), one, one,
                                                                        out_dtype=torch.bfloat16)) * 1e3, 1))
    res = []
    for qx in (False, True):
        x = xb if qx else xq
        for bn in (64, 128):
            for split in (4, 8):
                for stages in (3, 4):
                    for warps in (4, 8):
                        bk = 128
                        if stages * (bk * M * x.element_size() + bn * bk) > 225 * 1024:
                            continue
                        part = torch.empty(split, M, N, device="cuda")
                        for tma in ((False, True) if TensorDescriptor else (False,)):
                            xd = TensorDescriptor(x, [M, K], [K, 1], [M, bk]) if tma else None
                            wd = TensorDescriptor(w, [N, K], [K, 1], [bn, bk]) if tma else None
                            f = lambda: _dn[(N // bn, split)](x, w, xd, wd, part, M, N, K, K // split, K, K,  # noqa: E731
                                TMA=tma, QX=qx, STAGES=stages, BM=M, BN=bn, BK=bk, num_warps=warps)
                            try:
                                f()
                                t = do_bench(f, warmup=5, rep=25, return_mode="median") * 1e3
                            except Exception as e:  # noqa: BLE001
                                p(f"  tmadown qx {qx} tma {tma} {bn}/{split}/{stages}/{warps}: {type(e).__name__} "
                                  f"{str(e)[:100]}")
                                continue
                            res.append((t, qx, tma, bn, split, stages, warps))
    for qx in (False, True):
        for tma in (False, True):
            rs = sorted(r for r in res if r[1] == qx and r[2] == tma)
            for r in rs[:3]:
                p(f"tmadown qx={qx} tma={tma}: {r[0]:.1f} us  BN {r[3]} split {r[4]} stages {r[5]} warps {r[6]}")
    # correctness of the group-quantized variant against torch (one config)
    part = torch.empty(4, M, N, device="cuda")
    _dn[(N // 128, 4)](xb, w, None, None, part, M, N, K, K // 4, K, K, TMA=False, QX=True, STAGES=3, BM=M, BN=128,
                       BK=128, num_warps=8)
    ref = xb.float() @ w.float().t()
    y = part.sum(0)
    p("tmadown qx sqnr dB", round(float(10 * torch.log10(ref.pow(2).mean() / (ref - y).pow(2).mean())), 1))

def narrow_w64():
    """The narrow benchmark network (width 64 x 5, relu, fp16 weights) on the GPU, a 2**21-row fp16 input and the
    hoisted pick's config (BM 128, 4 warps, 3 programs per SM)."""
    from torch import nn

    from fused.narrow import FusedNarrowMLP
    layers = []
    for i in range(5):
        layers += [nn.Linear(64, 64)] + ([nn.ReLU()] if i < 4 else [])
    mod = FusedNarrowMLP.from_module(nn.Sequential(*layers), "fp16").cuda()
    x = torch.randn(1 << 21, 64, device="cuda", dtype=torch.float16)
    return mod, x, dict(BLOCK_M=128, num_warps=4, num_stages=1, programs_per_sm=3, prefetch=False, hoist=True)



def narrow_config_us(tag, mod, x, cfg, ref, ref_name):
    """Prints µs of the narrow kernel with an explicit config and whether its output equals ``ref`` bit for bit."""
    from triton.testing import do_bench

    from fused.kernels.narrow_mlp import narrow_mlp
    try:
        y = narrow_mlp(x, mod.weights, mod.params, mod.dims, mod.acts, config=cfg)
        t = do_bench(lambda: narrow_mlp(x, mod.weights, mod.params, mod.dims, mod.acts, config=cfg), warmup=5, rep=40)
        p(f"{tag} {cfg}: {t * 1e3:.1f} us, equal to {ref_name}: {bool(torch.equal(y, ref))}")
    except Exception as e:  # noqa: BLE001
        p(f"{tag} {cfg}: {type(e).__name__} {str(e)[:200]}")

if "narrowncu" in what:
    # one launch of the narrow MLP's pick for ncu (tenth session: where the 215 us go after the packed relu;
    # since the eleventh, the TMA pick: 3 input stages, 2 programs per SM)
    from fused.kernels.narrow_mlp import narrow_mlp
    mod, x, cfg = narrow_w64()
    cfg = dict(cfg, num_stages=3, programs_per_sm=2, tma=True)
    for _ in range(3):
        narrow_mlp(x, mod.weights, mod.params, mod.dims, mod.acts, config=cfg)
    torch.cuda.synchronize()
    p("narrowncu done")

if "narrowtma2" in what:
    # the narrow MLP's TMA candidates against the pick (tenth session), explicit configs: same bits, µs
    from fused.kernels.narrow_mlp import narrow_mlp
    from fused.reference import narrow_mlp_ref
    mod, x, base = narrow_w64()
    ref = narrow_mlp(x, mod.weights, mod.params, mod.dims, mod.acts, config=base)
    r = narrow_mlp_ref(x[:4096], mod.weights, mod.params, mod.dims, mod.acts)
    from lowbit import sqnr
    p("narrowtma2 pick sqnr vs reference", round(float(sqnr(r.float(), ref[:4096].float())), 1))
    for st, pp, bm, w in ((0, 0, 0, 0), (2, 3, 128, 4), (2, 2, 128, 4), (3, 2, 128, 4), (2, 4, 64, 4), (2, 2, 128, 8), (1, 3, 128, 4)):
        cfg = base if st == 0 else dict(base, BLOCK_M=bm, num_warps=w, num_stages=st, programs_per_sm=pp, tma=True)
        narrow_config_us("narrowtma2", mod, x, cfg, ref, "the pick")

if "narrowhost" in what:
    # eleventh session: a TMA pick (device-made descriptor) stays on the cached launcher and is replayed in eager
    # calls; host µs per call at 2**14 rows (GPU time ~6 µs) with the TMA config forced, against a pointer config
    from fused import dispatch
    from fused.kernels import launch, tuning
    mod, x, _ = narrow_w64()
    xs = x[: 1 << 14].clone()
    with torch.no_grad():
        mod(xs)
        key = next(k for k in tuning._cache if k[0] == "narrow_mlp" and k[1] == 1 << 14)
        for name, cfg in (("tma", dict(BLOCK_M=128, num_warps=8, num_stages=3, programs_per_sm=2, prefetch=False,
                                       hoist=True, tma=True)),
                          ("pointer", dict(BLOCK_M=128, num_warps=4, num_stages=1, programs_per_sm=3, prefetch=False,
                                           hoist=True))):
            tuning._cache[key] = cfg
            mod.__dict__.pop("_replays", None)
            for _ in range(3):
                y = mod(xs)
            torch.cuda.synchronize()
            before = dict(launch.counts)
            t0 = time.perf_counter()
            for _ in range(200):
                mod(xs)
            torch.cuda.synchronize()
            us = (time.perf_counter() - t0) / 200 * 1e6
            delta = {k: launch.counts[k] - before[k] for k in before}
            p(f"narrowhost {name}: {us:.1f} us per eager call at 2**14 rows, launches {delta}, "
              f"replay {dispatch.replay_status(mod)}")

def gus(fn):
    """GPU µs of ``fn`` replayed from a CUDA graph (do_bench median)."""
    from fused.dispatch import _graph_replay
    return triton.testing.do_bench(_graph_replay(fn).replay, warmup=25, rep=200, return_mode="median") * 1e3


def timed_row(run, ref, cfg, tag=""):
    """(graph µs, "<tag><SQNR vs ref> dB" or the failure, cfg) for one candidate ``run()`` (a row of a timing table)."""
    from lowbit.metrics import sqnr
    try:
        y = run()
        return gus(run), f"{tag}{sqnr(ref.float(), y.float()):.0f} dB", cfg
    except Exception as e:  # noqa: BLE001
        return float("inf"), f"failed {type(e).__name__}: {str(e)[:80]}", cfg


def llama_decode_weights(fmt):
    """Random Llama-3-8B MLP weights quantized to ``fmt``: stacked gate/up [2H, K] and down [D, H] with scales."""
    from lowbit import quantize_weight
    K, H, D = 4096, 14336, 4096
    q1, s1 = quantize_weight(torch.randn(2 * H, K, device="cuda") * K ** -0.5, fmt)
    q2, s2 = quantize_weight(torch.randn(D, H, device="cuda") * H ** -0.5, fmt)
    return q1, s1, q2, s2


def llama_decode_cases():
    """(fmt, weights as llama_decode_weights gives them, M, x) for int8 / fp8 weights at M = 1 / 16."""
    for fmt in ("int8", "float8_e4m3"):
        weights = llama_decode_weights(fmt)
        for M in (1, 16):
            yield fmt, weights, M, torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)


if "chainparts" in what:
    # eleventh session: where the decode chain loses to the two launches (graph µs, Llama block, M = 1 / 16):
    # each GEMV alone with the chain's tiles, the two in one graph, the chain's first-layer items alone, its down
    # items alone (no waits), the chain
    from fused.kernels import decode_chain as dc
    from fused.kernels.w8a16_gemv import w8a16_gemv

    for fmt, (q1, s1, q2, s2), M, x in llama_decode_cases():
        for c in dc.candidates(M, True)[::3][:3]:
            g, d = dc.gemv_configs(c, 4096, 14336)
            h = w8a16_gemv(x, q1, s1, None, "silu", True, config=g)
            t1 = gus(lambda: w8a16_gemv(x, q1, s1, None, "silu", True, config=g))
            t2 = gus(lambda: w8a16_gemv(h, q2, s2, None, "none", False, config=d))
            t12 = gus(lambda: w8a16_gemv(w8a16_gemv(x, q1, s1, None, "silu", True, config=g), q2, s2, None, "none", False, config=d))
            tc = {ph: gus(lambda: dc.decode_chain(x, q1, s1, None, q2, s2, None, "silu", True, dict(c, PHASES=ph)))
                  for ph in (1, 2, 3)}
            p(f"chainparts {fmt} M={M} pps={c['programs_per_sm']} tiles {c['BM1']}x{c['BN1']}x{c['BK1']}/{c['SPLIT1']} "
              f"{c['BM2']}x{c['BN2']}x{c['BK2']}/{c['SPLIT2']}: gemv1 {t1:.1f} gemv2 {t2:.1f} both {t12:.1f} | "
              f"chain first {tc[1]:.1f} down {tc[2]:.1f} block {tc[3]:.1f}")

if "chainreg" in what:
    # eleventh session: the chain's registers (128-146) leave 3 programs of 4 warps per SM, so its 448 first-layer
    # items take two waves where the standalone GEMV (448 CTAs) takes one; a register cap fits 4 (graph µs)
    from fused import dispatch
    from fused.kernels import decode_chain as dc

    for fmt, (q1, s1, q2, s2), M, x in llama_decode_cases():
        two = gus(lambda: dispatch.linear(dispatch.gated(x, q1, s1, None, "silu"), q2, s2, None))
        c = dc.candidates(M, True)[1 if M == 1 else 0]
        row = []
        for r in (0, 128, 96):
            for pps in (4, 0):
                cfg = dict(c, programs_per_sm=pps, **({"maxnreg": r} if r else {}))
                y = dc.decode_chain(x, q1, s1, None, q2, s2, None, "silu", True, cfg)
                row.append(f"reg {r or '-'} pps {pps}: {gus(lambda: dc.decode_chain(x, q1, s1, None, q2, s2, None, 'silu', True, cfg)):.1f}")
        p(f"chainreg {fmt} M={M} two launches (tuned) {two:.1f} | " + ", ".join(row))

if "narrowtmaout" in what:
    # prepared in the eleventh session: the narrow TMA picks with the output tile by TMA store too (µs, same bits?)
    from fused.kernels.narrow_mlp import narrow_mlp
    mod, x, base = narrow_w64()
    ref = narrow_mlp(x, mod.weights, mod.params, mod.dims, mod.acts, config=base)
    for bm, w, st, pp in ((128, 4, 3, 2), (64, 4, 3, 3), (128, 8, 3, 2)):
        for out in (False, True):
            cfg = dict(base, BLOCK_M=bm, num_warps=w, num_stages=st, programs_per_sm=pp, tma=True, tma_out=out)
            narrow_config_us("narrowtmaout", mod, x, cfg, ref, "the pointer pick")

if "smootheager" in what:
    # prepared in the twelfth session: a SmoothQuant-smoothed int8 W8A8 Llama block is never recorded (x·s⁻¹ is a
    # torch op); plain-call µs with FUSED_EAGER_GRAPH_REFUSED off / on (dispatch.EAGER_GRAPH_REFUSED toggled in
    # process, recordings dropped between), beside the block's graph time
    import fused
    from triton.testing import do_bench

    from fused import dispatch
    from fused.bench import make_block
    base = make_block("llama", 4096, 14336, "cuda")
    s = fused.calibrate_smoothing(base, [torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(2)])
    model = fused.quantize(base, fused.FusedInt8MLP(weight_only=False, smoothing=s))
    with torch.no_grad():
        for M in (1, 16, 128):
            x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
            row = [f"graph {gus(lambda: model(x)):.1f}"]
            for on in (False, True):
                dispatch.EAGER_GRAPH_REFUSED = on
                for m in model.modules():
                    m.__dict__.pop("_replays", None)
                for _ in range(3):
                    model(x)
                row.append(f"plain {'on' if on else 'off'} {do_bench(lambda: model(x), warmup=25, rep=100) * 1e3:.1f}")
            p(f"smootheager M={M}: " + ", ".join(row) + f", replay {dispatch.replay_status(model)[::2]}")

if "w8a16eager" in what:
    # fifteenth session: W8A16 plain calls at M=8192 took 300-500 µs over their CUDA-graph time (GPT int8 3975 vs 3484,
    # fp8 3912 vs 3615; Llama int8 4823 vs 4589) where bf16 eager did not. Plain and graph µs, the allocator's device
    # allocations per plain call, then a profile of plain calls: device time per kernel, and the host-side CUDA
    # runtime calls (allocations, synchronizations) with their time
    import copy

    from triton.testing import do_bench

    from fused import dispatch
    base = make_block("gpt", 4096, 16384, "cuda")
    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    for name, cfg in (("int8 W8A16", fused.FusedInt8MLP()), ("fp8 W8A16", fused.FusedFloat8MLP(weight_only=True))):
        m = fused.quantize(copy.deepcopy(base), cfg, blocks=True)
        with torch.no_grad():
            for _ in range(3):
                m(x)
            torch.cuda.synchronize()
            s0 = torch.cuda.memory_stats()
            plain = do_bench(lambda: m(x), warmup=5, rep=60, return_mode="median") * 1e3
            s1 = torch.cuda.memory_stats()
            graph = gus(lambda: m(x))
            calls = {k: v for k, v in dispatch.stats.items() if v}
            p(f"w8a16eager gpt {name} M=8192: plain {plain:.1f} graph {graph:.1f} us; device allocs / frees during the "
              f"plain timing {s1.get('num_device_alloc', 0) - s0.get('num_device_alloc', 0)} / "
              f"{s1.get('num_device_free', 0) - s0.get('num_device_free', 0)}, alloc retries "
              f"{s1.get('num_alloc_retries', 0) - s0.get('num_alloc_retries', 0)}; paths {calls}")
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as pr:
                t0 = time.perf_counter()
                for _ in range(5):
                    m(x)
                torch.cuda.synchronize()
                wall = (time.perf_counter() - t0) / 5 * 1e6
            p(f"   profiled: {wall:.1f} us wall per call")
            ev = pr.key_averages()
            for e in sorted(ev, key=lambda e: -e.self_device_time_total)[:8]:
                if e.self_device_time_total > 0:
                    p(f"   gpu {e.self_device_time_total / 5:9.1f} us  x{e.count / 5:.0f}  {e.key[:90]}")
            for e in sorted(ev, key=lambda e: -e.self_cpu_time_total)[:10]:
                p(f"   cpu {e.self_cpu_time_total / 5:9.1f} us  x{e.count / 5:.0f}  {e.key[:90]}")
        del m
        torch.cuda.empty_cache()

if "gemvroute" in what:
    # fifteenth session: W8A16 at 17 <= M <= 32 may take the 32-row GEMV per layer (dispatch.GEMV_ROUTE_MAX_M, timed
    # per shape against act_split + the split GEMM). One process, Llama block, graph µs with the route off (0) and on
    # (32), bf16 eager beside; which route each layer took. Prediction: the down projection takes the GEMV (30.8 vs
    # 29.3 + act_split(h)), gate/up keeps split: int8 75.0 -> ~72, fp8 77.2 -> ~74 at M = 17 and 32
    import copy

    from fused import dispatch
    base = make_block("llama", 4096, 14336, "cuda")
    models = {"int8 W8A16": fused.quantize(copy.deepcopy(base), fused.FusedInt8MLP(), blocks=True),
              "fp8 W8A16": fused.quantize(copy.deepcopy(base), fused.FusedFloat8MLP(weight_only=True), blocks=True)}
    with torch.no_grad():
        for M in (17, 32):
            x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
            row = [f"bf16 eager {gus(lambda: base(x)):.1f}"]
            for name, m in models.items():
                ref = None
                for bound in (0, 32):
                    dispatch.GEMV_ROUTE_MAX_M = bound
                    dispatch.stats.clear()
                    y = m(x)
                    paths = sorted({k[1] for k, v in dispatch.stats.items() if v})
                    ref = y if ref is None else ref
                    err = (y.float() - ref.float()).norm() / ref.float().norm()
                    row.append(f"{name} route {bound}: {gus(lambda: m(x)):.1f} ({', '.join(paths)}; rel diff {err:.1e})")
            p(f"gemvroute M={M}: " + "; ".join(row))
    from fused.kernels import tuning
    for k, v in tuning.timings.items():
        if "gemv_route" in k[0]:
            p("gemvroute timings", k[:3], v)

if "firstlayer" in what:
    # fifteenth session, prepared: fused.kernels.first_layer (act_quant(x) + the W8A8 gated GEMM + act_quant(h) in
    # one ticketed launch, one program per item) against the three launches it replaces, Llama gate/up, graph µs
    from fused.kernels.act_quant import act_quant
    from fused.kernels.first_layer import default_config, first_layer
    from fused.kernels.w8_gemm import w8_gemm
    from lowbit import quantize_weight

    for fmt in ("float8_e4m3", "int8"):
        fp8 = fmt != "int8"
        q, s = quantize_weight(torch.randn(2 * 14336, 4096, device="cuda"), fmt)
        for M in (128, 64, 256):
            x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
            rows = max(32, -(-M // 16) * 16)

            def three():
                xq, xs = act_quant(x, fp8=fp8)
                h = w8_gemm(xq, q, s, None, "silu", True, x_scale=xs, out_dtype=x.dtype)
                return act_quant(h, fp8=fp8, rows=rows)
            cfg = default_config(M)
            one = gus(lambda: first_layer(x, q, s, None, "silu", True, rows=rows, config=cfg))
            p(f"firstlayer {fmt} M={M}: three launches {gus(three):.1f}, one launch {one:.1f}")

if "rowwise" in what:
    # sixteenth session, prepared: fp8 products on cuBLAS with the scales inside the GEMM (dispatch.CUBLAS_FP8:
    # "rowwise" = torch._scaled_mm with [M, 1] x [1, N] scales, the CUTLASS rowwise kernel torchao's Float8 rowwise
    # config runs; "rowwise_fast" with use_fast_accum, torchao's default) against our unit-scale form. (1) the raw
    # GEMMs on the Llama shapes, graph µs; (2) the fp8 W8A8 block per form (routes re-timed), graph µs, the routes
    # taken, SQNR against the bf16 block; (3) torchao fp8 rowwise + compile beside. Prediction: the rowwise GEMMs
    # 5-10% faster at M=8192 (torchao's block 2417 vs our 2774 with the same structure), block 2774 -> ~2500
    import copy

    from fused import dispatch
    from lowbit import sqnr
    one = torch.ones((), device="cuda")
    form0, dispatch.CUBLAS_FP8_MIN_M = dispatch.CUBLAS_FP8, 0
    for M in (1024, 8192):
        for name, (N, K) in (("gate/up", (28672, 4096)), ("down", (4096, 14336))):
            a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
            b = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn)
            sa, sb = torch.rand(M, 1, device="cuda") + 0.5, torch.rand(1, N, device="cuda") + 0.5
            row = []
            for form, fn in (("unit", lambda: torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16)),
                             ("unit_fast", lambda: torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16,
                                                                    use_fast_accum=True)),
                             ("rowwise", lambda: torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16)),
                             ("rowwise_fast", lambda: torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16,
                                                                       use_fast_accum=True))):
                row.append(f"{form} {gus(fn):.1f}")
            p(f"rowwise GEMM M={M} {name} [{N}, {K}]: " + ", ".join(row))
            del a, b
    base = make_block("llama", 4096, 14336, "cuda")
    m = fused.quantize(copy.deepcopy(base), fused.FusedFloat8MLP(), blocks=True)
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow, quantize_
    tao = copy.deepcopy(base)
    quantize_(tao, Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()))
    tao = torch.compile(tao)
    with torch.no_grad():
        for M in (1024, 8192):
            x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
            want = base(x).float()
            row = []
            for form in ("unit", "rowwise", "rowwise_fast"):
                dispatch.CUBLAS_FP8 = form
                dispatch._dense_routes.clear()
                dispatch.epoch += 1  # drop the module's recordings: a replayed call would not re-time the routes
                m(x)  # the routes timed for this form
                dispatch.stats.clear()
                t = gus(lambda: m(x))
                paths = sorted({k[1] for k, v in dispatch.stats.items() if v})
                row.append(f"{form} {t:.1f} ({sqnr(want, m(x).float()):.1f} dB; {', '.join(paths)})")
            tao(x)
            row.append(f"torchao rowwise+compile {gus(lambda: tao(x)):.1f} ({sqnr(want, tao(x).float()):.1f} dB)")
            p(f"rowwise block M={M}: " + "; ".join(row))
    dispatch.CUBLAS_FP8 = form0

if "w8tma" in what:
    # seventeenth session, prepared: the persistent TMA tiles of the W8A8 GEMM (fused.kernels.w8a8_tma, FUSED_W8_TMA).
    # Per layer of the fp8 / int8 W8A8 Llama block at M = 1024 / 8192: the shipped w8_gemm pick against every TMA
    # candidate (graph µs of the GEMM alone, x quantized); then the block with the faster TMA tiles installed as the
    # picks (routes re-timed: the Triton "h out" route may then beat cuBLAS + epilogue_quant). Prediction: gate/up at
    # 8192 within 5% of cuBLAS's rowwise_fast GEMM (~1460 µs), the fp8 block 2434 -> ~2330 with the Triton route
    import copy

    from fused import dispatch
    from fused.kernels import tuning, w8a8_tma
    from fused.kernels.act_quant import act_quant
    from fused.kernels.w8_gemm import w8_gemm
    from lowbit import sqnr
    w8a8_tma.W8_TMA = True
    base = make_block("llama", 4096, 14336, "cuda")
    for name, qcfg in (("fp8", fused.FusedFloat8MLP()), ("int8", fused.FusedInt8MLP(weight_only=False))):
        m = fused.quantize(copy.deepcopy(base), qcfg, blocks=True)
        for M in (1024, 8192):
            x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                want = base(x).float()
                m(x)
                before = gus(lambda: m(x))
                paths0 = sorted({k[1] for k, v in dispatch.stats.items() if v})
            installed = []
            for layer, K_in, gated in ((m.gate_up, 4096, True), (m.down, 14336, False)):
                q, s = layer.qweight, layer.scale
                fp8 = q.dtype == torch.float8_e4m3fn
                N = q.shape[0] // (2 if gated else 1)
                xq, xs = act_quant(torch.randn(M, K_in, device="cuda", dtype=torch.bfloat16), fp8=fp8)
                act = "silu" if gated else "none"
                fn = lambda c: w8_gemm(xq, q, s, None, act, gated, x_scale=xs, out_dtype=torch.bfloat16,  # noqa: E731
                                       config=c)
                key = (tuning.m_bucket(M), N, K_in, gated, True, q.dtype)
                pick = tuning.known("w8_gemm", key)
                if pick is None:
                    p(f"w8tma {name} M={M}: no w8_gemm pick for {key}")
                    continue
                y0 = fn(pick)
                rows = [(gus(lambda: fn(pick)), "pick", pick)]
                for c in w8a8_tma.candidates(M, N, K_in, gated):
                    rows.append(timed_row(lambda c=c: fn(c), y0, c))
                rows.sort(key=lambda r: r[0])
                p(f"w8tma {name} M={M} {'gate/up' if gated else 'down'}:")
                for t, what_, c in rows:
                    p(f"      {t:.1f} {what_} {c}")
                if rows[0][2].get("TMA"):
                    tuning._cache[("w8_gemm",) + key] = rows[0][2]
                    installed.append(("gate/up" if gated else "down", rows[0][2]))
            if installed:
                dispatch._dense_routes.clear()
                dispatch.epoch += 1  # drop the module's recordings: the routes are timed again
                with torch.no_grad():
                    m(x)
                    dispatch.stats.clear()
                    after = gus(lambda: m(x))
                    paths = sorted({k[1] for k, v in dispatch.stats.items() if v})
                    db = sqnr(want, m(x).float())
                p(f"w8tma block {name} M={M}: {before:.1f} ({', '.join(paths0)}) -> {after:.1f} with TMA picks "
                  f"{installed} ({', '.join(paths)}; {db:.1f} dB)")
            else:
                p(f"w8tma block {name} M={M}: {before:.1f}, no TMA tile faster than the pick")

if "stgeq" in what:
    # seventeenth session: test_gemv_staged_candidates_cuda failed on the H200 (both formats; message cut). Per case
    # and staged candidate: bits equal to the plain twin?, max |diff|, SQNR to the plain twin and to the reference
    from fused.kernels import w8a16_gemv as gv
    from lowbit import quantize_weight, sqnr
    from fused.reference import gated_ref, linear_ref
    gv.GEMV_STAGES = True
    for fmt in ("int8", "float8_e4m3"):
        for gated, (N, K) in ((True, (14336, 4096)), (False, (4096, 14336)), (True, (100, 520))):
            R = 2 * N if gated else N
            q, s = quantize_weight(torch.randn(R, K, device="cuda"), fmt)
            b = torch.randn(R, device="cuda")
            x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
            act = "silu" if gated else "gelu_tanh"
            ref = (gated_ref if gated else linear_ref)(x, q, s, b, act)
            for cfg in [c for c in gv._candidates(1, N, K, gated, int8=fmt == "int8") if c.get("STAGES", 1) > 1]:
                plain = {k: v for k, v in cfg.items() if k != "STAGES"}
                try:
                    got = gv.w8a16_gemv(x, q, s, b, act, gated, config=cfg, out=torch.full_like(ref, float("nan")))
                    want = gv.w8a16_gemv(x, q, s, b, act, gated, config=plain)
                except Exception as e:  # noqa: BLE001
                    p(f"stgeq {fmt} {N}x{K} {cfg}: {type(e).__name__} {str(e)[:100]}")
                    continue
                d = (got.float() - want.float()).abs()
                p(f"stgeq {fmt} {'g' if gated else 'l'} {N}x{K} {cfg}: equal {torch.equal(got, want)} "
                  f"nan {int(got.isnan().sum())} maxdiff {d.nan_to_num(1e9).max().item():.3g} "
                  f"diffs {int((d != 0).sum())}/{d.numel()} sqnr(plain) {sqnr(want.float(), got.float()):.1f} "
                  f"sqnr(ref) {sqnr(ref.float(), got.float()):.1f} plain-sqnr(ref) {sqnr(ref.float(), want.float()):.1f}")

if "ncu24" in what:
    # eighteenth session, for the next: run under ncu. The 2:4 decode GEMV's gate/up pick (16x512, 4 warps, 4 stages)
    # streams 1.75 TB/s where the dense 1-row GEMV on the same loop shape reaches ~2.7: issue-bound (the per-value
    # select) or latency-bound? More warps or stages did not move it (s24stages). The shipped picks, no tuning
    # launches: int8 2:4 gate/up and down, then the dense int8 gate/up pick for comparison; 3 launches each
    import copy

    from fused.kernels import sparse24_gemv as sg
    from fused.kernels import tuning
    from fused.kernels import w8a16_gemv as gv
    base = make_block("llama", 4096, 14336, "cuda")
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    xh = torch.randn(1, 14336, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        ms = fused.quantize(copy.deepcopy(base), fused.FusedInt8MLP(sparsity="2:4"), blocks=True)
        md = fused.quantize(copy.deepcopy(base), fused.FusedInt8MLP(), blocks=True)
        for layer, xin, gated in ((ms.gate_up, x, True), (ms.down, xh, False)):
            N, K = layer.values.shape[0] // (2 if gated else 1), 2 * layer.values.shape[1]
            cfg = tuning.known("sparse24_gemv", (1, N, K, gated, torch.int8, "tiled"))
            print("ncu24 2:4", "gate/up" if gated else "down", cfg, flush=True)
            for _ in range(3):
                sg.sparse24_gemv(xin, layer.values, layer.meta, layer.scale, None, "silu" if gated else "none",
                                 gated, config=cfg)
        cfg = tuning.known("w8a16_gemv", (1, 14336, 4096, True, torch.int8))
        print("ncu24 dense gate/up", cfg, flush=True)
        for _ in range(3):
            gv.w8a16_gemv(x, md.gate_up.qweight, md.gate_up.scale, None, "silu", True, config=cfg)
        torch.cuda.synchronize()

if "l2pf" in what:
    # nineteenth session, for the next: does prefetching the down projection's weights into L2 while the gate/up GEMM
    # runs pay at M = 16..1024? At M=128 the fp8 gate/up GEMM leaves DRAM ~40% idle (ncu128: 59%) and the down GEMM
    # (cuBLAS, 29.8 µs for 58.7 MB) then streams at ~2 TB/s. Before each block a small kernel issues
    # cp.async.bulk.prefetch.L2 (evict_last policy, so gate/up's normal-priority stream does not push the lines out)
    # for the first FRAC of the block's down weights. Honest setup: three blocks with their own weights in one CUDA
    # graph (x -> A -> B -> C), so one block's lines are gone (displaced by the others' prefetches) when it runs
    # again; µs per block = graph µs / 3. Prediction: fp8 W8A8 M=128 75.5 -> ~68-70 at FRAC 0.5; at M=16 (DRAM-bound)
    # no gain; if evict_last does not protect the lines, no gain anywhere
    import copy

    from l2_prefetch import prefetch, set_persisting_l2

    base = make_block("llama", 4096, 14336, "cuda")
    for name, qcfg in (("fp8 W8A8", fused.FusedFloat8MLP(weight_only=False)),
                       ("int8 W8A8", fused.FusedInt8MLP(weight_only=False))):
        blocks = [fused.quantize(copy.deepcopy(base), qcfg, blocks=True) for _ in range(3)]
        for persist in (0, 64 << 20):  # the driver's default set-aside, then its maximum (clamped)
            held = set_persisting_l2(persist)
            for M in (16, 128, 1024):  # buckets with shipped picks (no tuning in this call)
                x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
                with torch.no_grad():
                    def run(frac):
                        h = x
                        for b in blocks:
                            prefetch(b.down.qweight, frac)
                            h = b(h)
                        return h
                    want = run(0.0)
                    for frac in (0.0, 0.25, 0.5, 0.75):
                        same = torch.equal(run(frac), want)
                        p(f"l2pf {name} persisting L2 {held >> 20} MiB M={M} frac {frac:.2f}: "
                          f"{gus(lambda: run(frac)) / 3:7.1f} µs per block{'' if same else ' OUTPUT DIFFERS'}")
        set_persisting_l2(0)
        del blocks
        torch.cuda.empty_cache()

def s24_layers(label, qcfg, variants):
    """The Llama 2:4 layers at M=1 (gate/up, down) alone, graph µs: the shipped pick, then each config of
    variants(pick, N, K, gated), tagged "=" where bit-equal to the pick, else its SQNR against it."""
    import copy

    from fused.kernels import sparse24_gemv as sg
    from fused.kernels import tuning
    from lowbit.metrics import sqnr
    base = make_block("llama", 4096, 14336, "cuda")
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    xh = torch.randn(1, 14336, device="cuda", dtype=torch.bfloat16)
    ms = fused.quantize(copy.deepcopy(base), qcfg, blocks=True)
    with torch.no_grad():
        for layer, xin, gated in ((ms.gate_up, x, True), (ms.down, xh, False)):
            N, K = layer.values.shape[0] // (2 if gated else 1), 2 * layer.values.shape[1]
            pick = tuning.known("sparse24_gemv", (1, N, K, gated, layer.values.dtype, "tiled"))
            if pick is None:
                p(f"{label}: no shipped pick for {(N, K, gated)}")
                continue
            fn = lambda c: sg.sparse24_gemv(xin, layer.values, layer.meta, layer.scale, None,  # noqa: E731
                                            "silu" if gated else "none", gated, config=c)
            want = fn(pick)
            rows = [(gus(lambda: fn(pick)), "pick", pick)]
            for c in variants(pick, N, K, gated):
                try:
                    y = fn(c)
                except Exception as e:  # noqa: BLE001
                    rows.append((float("inf"), f"failed {str(e)[:60]}", c))
                    continue
                tag = "=" if torch.equal(y, want) else f"{sqnr(want.float(), y.float()):.0f}dB"
                rows.append((gus(lambda: fn(c)), tag, c))
            for t, tag, c in sorted(rows, key=lambda r: r[0]):
                p(f"{label} {'gate/up' if gated else 'down'} {t:7.1f} {tag} {c}")
    del ms
    torch.cuda.empty_cache()


if "s24quad" in what:
    # nineteenth session, for the next: the 2:4 decode GEMV's "quad" form (one asm block per meta byte: PRMT
    # selectors, widening, 4 FMAs; sm_90 int8 gate/up 16x512 4 stages 399 -> 275 instructions per iteration, 96 -> 64
    # registers) against the shipped vsel picks, int8 and fp8 values
    from fused.kernels import sparse24_gemv as sg
    for name, qcfg in (("int8", fused.FusedInt8MLP(sparsity="2:4")), ("fp8", fused.FusedFloat8MLP(sparsity="2:4"))):
        s24_layers(f"s24quad {name}", qcfg,
                   lambda pick, N, K, gated: [c for c in sg._candidates(1, N, K, gated) if c["MODE"] == "quad"])

if "quadtiled" in what:
    # twentieth session: quad24 found the quad form wrong (SQNR -1 dB) at 16-row tiles on tiled meta read as
    # contiguous runs (TILED=2), right at 32 rows and on row-major meta. Which part: the asm against its Triton twin
    # compiled for the GPU, the same tile with the meta as byte gathers (TILED=1), and 32 rows, each vs the reference
    from fused.kernels import sparse24_gemv as sg
    from fused.kernels.sparse24_gemv import _cfg
    from lowbit.metrics import sqnr
    from sparsity.packing import pack_24, tile_meta
    from sparsity.masks import magnitude_mask_24
    from lowbit.quant import quantize_weight
    from fused.reference import sparse24_gated_ref
    torch.manual_seed(0)
    N, K = 1024, 2048
    w = torch.randn(2 * N, K, device="cuda")
    q, s = quantize_weight(w * magnitude_mask_24(w.abs()), "int8")
    v, m = pack_24(q)
    x = torch.randn(1, K, dtype=torch.bfloat16, device="cuda")
    ref = sparse24_gated_ref(x, v, m, s, None, "silu")
    orig_mode, orig_interp = sg._tiled_mode, sg.INTERPRET
    for bn in (16, 32):
        for meta_form, tmode in (("rows", None), ("runs", 2), ("gathers", 1)):
            for asm in (True, False):
                mm = m if meta_form == "rows" else tile_meta(m)
                sg._tiled_mode = orig_mode if tmode is None else (lambda *a, t=tmode: t)
                sg.INTERPRET = not asm
                cfg = dict(_cfg("quad", 1, bn, 512, 4, 4), SPLIT_K=1)
                y = sg.sparse24_gemv(x, v, mm, s, None, "silu", True, config=cfg)
                p(f"quadtiled bn={bn} meta={meta_form} {'asm' if asm else 'twin'}: {sqnr(ref.float(), y.float()):.1f} dB")
    sg._tiled_mode, sg.INTERPRET = orig_mode, orig_interp

if "q16split" in what:
    # twentieth session, for the next (with FUSED_S24_QUAD16_RUNS=1): the 16-row quad tiles with other K splits. The
    # down layer at SPLIT_K 2 is 512 programs for 1056 slots (64 registers: 8 per SM), half a wave; gate/up at 1 is
    # 896. Prediction: down SPLIT_K 4 (1024 programs) ~10% under SPLIT_K 2 if occupancy limits it; gate/up no gain
    def q16_splits(pick, N, K, gated):
        splits = (1, 2) if gated else (2, 4, 8)
        return [dict(MODE="quad", BLOCK_M=1, BLOCK_N=16, BLOCK_K=512, num_warps=4, STAGES=st, SPLIT_K=sp)
                for st in (3, 4) for sp in splits]
    s24_layers("q16split int8", fused.FusedInt8MLP(sparsity="2:4"), q16_splits)

if "s24wave" in what:
    # nineteenth session (measured: not the wave): ncu24 showed the 2:4 gate/up pick (16x512, 4 warps, 4 stages, 96
    # registers) as 896 CTAs at 5 per SM (register-limited): 1.36 waves, and the down pick (512 CTAs, 78 registers)
    # at 21% occupancy. The same tiles with a register cap (7 / 8 CTAs per SM: one wave) and more splits
    def wave_variants(pick, N, K, gated):
        tries = [dict(pick, maxnreg=r) for r in (80, 72, 64)]
        if gated:
            return tries + [dict(pick, SPLIT_K=2), dict(pick, SPLIT_K=2, maxnreg=72)]
        return tries + [dict(pick, SPLIT_K=s) for s in (4, 8)] + [dict(pick, SPLIT_K=4, maxnreg=64)]
    s24_layers("s24wave", fused.FusedInt8MLP(sparsity="2:4"), wave_variants)

if "staged" in what:
    # sixteenth session, prepared: the decode GEMVs' pipelined K loops (STAGES). Per M=1 layer of the Llama block
    # (dense int8 / fp8, int8 2:4): the config the tuner takes (shipped pick) against the same tile with STAGES 2 / 3
    # / 4 and the new staged candidates, graph µs of the layer alone (L2 warm: a lower bound), bits checked
    import copy

    from fused.kernels import sparse24_gemv as sg
    from fused.kernels import tuning
    from fused.kernels import w8a16_gemv as gv
    base = make_block("llama", 4096, 14336, "cuda")
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    xh = torch.randn(1, 14336, device="cuda", dtype=torch.bfloat16)
    for name, cfg in (("int8", fused.FusedInt8MLP()), ("fp8", fused.FusedFloat8MLP(weight_only=True)),
                      ("int8 2:4", fused.FusedInt8MLP(sparsity="2:4"))):
        m = fused.quantize(copy.deepcopy(base), cfg, blocks=True)
        with torch.no_grad():
            m(x)  # the tuner's picks for both layers
        for layer, xin, gated in ((m.gate_up, x, True), (m.down, xh, False)):
            sparse = hasattr(layer, "values")
            if sparse:
                fn = lambda c: sg.sparse24_gemv(xin, layer.values, layer.meta, layer.scale, None,  # noqa: E731
                                                "silu" if gated else "none", gated, config=c)
                key = [k for k in tuning.picks if k[0] == "sparse24_gemv" and k[1] == 1 and k[4] == gated]
                N, K = layer.values.shape[0] // (2 if gated else 1), 2 * layer.values.shape[1]
                extra = [c for c in sg._candidates(1, N, K, gated) if c.get("STAGES", 1) > 1]
            else:
                fn = lambda c: gv.w8a16_gemv(xin, layer.qweight, layer.scale, None,  # noqa: E731
                                             "silu" if gated else "none", gated, config=c)
                key = [k for k in tuning.picks if k[0] == "w8a16_gemv" and k[1] == 1 and k[4] == gated
                       and k[5] == layer.qweight.dtype]
                N, K = layer.qweight.shape[0] // (2 if gated else 1), layer.qweight.shape[1]
                extra = [c for c in gv._candidates(1, N, K, gated, int8=layer.qweight.dtype == torch.int8)
                         if c.get("STAGES", 1) > 1]
            pick = tuning.picks[key[0]] if key else None
            if pick is None:
                p(f"staged {name} {'gate/up' if gated else 'down'}: no pick found in {list(tuning.picks)[:4]}")
                continue
            want = fn(pick)
            rows = [(gus(lambda: fn(pick)), "pick", pick)]
            for c in [dict(pick, STAGES=s) for s in (2, 3, 4)] + extra:
                try:
                    y = fn(c)
                except Exception as e:  # noqa: BLE001
                    rows.append((float("inf"), f"failed {str(e)[:60]}", c))
                    continue
                same = "=" if (dict(c, STAGES=1) == dict(pick, STAGES=1)) and torch.equal(y, want) else " "
                rows.append((gus(lambda: fn(c)), same, c))
            rows.sort(key=lambda r: r[0])
            p(f"staged {name} {'gate/up' if gated else 'down'}: pick {rows[[r[1] for r in rows].index('pick')][0]:.1f} µs")
            for t, tag, c in rows[:5]:
                p(f"   {t:7.1f} {tag} {c}")
        del m
        torch.cuda.empty_cache()

if "mmaprobe" in what:
    # twenty-first session (prepared without a GPU): where the tensor cores put sparse24_mma's lane registers, should
    # its cuda test fail. One 16-row x 64-column step (N = 64, K = 64, one warp), int8, one x plane, x[k] known:
    # (1) A: one non-zero packed value per call at (row r, packed column c), positions (0, 1) in every group: y names
    # the row and, through x[k] = k + 1, the K column it met; expected row r, k = 4·(c // 2) + c % 2.
    # (2) metadata: every kept value 1, one group (r, q) switched to positions (2, 3): the row whose y moves and the
    # size of the move (x[4q + 2] = q + 1, the rest 0) name the group the tensor core applied it to; expected (r, q).
    from fused.kernels.sparse24_mma import sparse24_mma
    from sparsity.packing import tile_meta
    N, K = 64, 128
    cfg = dict(W=1, SPLIT_K=1, num_warps=1)
    ones = torch.ones(N, device="cuda")
    meta0 = torch.full((N, K // 8), 0x44, dtype=torch.uint8, device="cuda")
    kk = torch.arange(K, device="cuda")
    xk = torch.where(kk < 64, kk + 1, 63 - kk).to(torch.int8).reshape(1, 1, K)  # distinct, non-zero int8
    bad = []
    for r in range(16):
        for c in range(K // 2):
            v = torch.zeros(N, K // 2, dtype=torch.int8, device="cuda")
            v[r, c] = 1
            y = sparse24_mma(xk, torch.ones(1, device="cuda"), v, tile_meta(meta0), ones, out_dtype=torch.float32,
                             config=cfg)[0]
            nz = y.nonzero().flatten().tolist()
            got = [(i, int(y[i].item()) - 1 if y[i] > 0 else 63 - int(y[i].item())) for i in nz]
            want = [(r, 4 * (c // 2) + c % 2)]
            if got != want:
                bad.append((r, c, got, want))
    p(f"mmaprobe A: {len(bad)} of {16 * K // 2} packed positions land elsewhere; first: {bad[:6]}")
    xr = torch.where(kk % 4 == 2, kk // 4 + 1, 0).to(torch.int8)  # group q moved to (2, 3): y changes by q + 1
    base_v = torch.ones(N, K // 2, dtype=torch.int8, device="cuda")
    y0 = sparse24_mma(xr.reshape(1, 1, K).contiguous(), torch.ones(1, device="cuda"), base_v, tile_meta(meta0), ones,
                      out_dtype=torch.float32, config=cfg)[0]
    deltas = {q + 1: q for q in range(K // 4)}
    bad = []
    for r in range(16):
        for q in range(K // 4):
            m = meta0.clone()
            m[r, q // 2] = 0xE4 if q % 2 else 0x4E
            y = sparse24_mma(xr.reshape(1, 1, K).contiguous(), torch.ones(1, device="cuda"), base_v, tile_meta(m),
                             ones, out_dtype=torch.float32, config=cfg)[0]
            moved = (y - y0).nonzero().flatten().tolist()
            got = [(i, deltas.get(int((y - y0)[i].item()), "?")) for i in moved]
            if got != [(r, q)]:
                bad.append((r, q, got))
    p(f"mmaprobe meta: {len(bad)} of {16 * K // 4} groups applied elsewhere; first: {bad[:12]}")

if "mma24" in what:
    # twenty-first session (prepared without a GPU), after the mma cuda tests: the Llama 2:4 layers at M = 1 and 16,
    # graph µs, act_split + sparse24_mma for each candidate against the GEMV route's pick (sparse24_gemv, tuned) and
    # act_split alone. Prediction: gate/up 73 MB at ~3.3 TB/s + ~3 µs ~ 25 µs (quad 36.6 at M=1), down ~15 (22.3);
    # at M=16 the same (the product is free on the tensor cores) against cuSPARSELt's 37.8 for gate/up
    from fused.kernels import sparse24_mma as sm
    from fused.kernels.act_split import act_split
    from fused.kernels.sparse24_gemv import sparse24_gemv
    from fused.sparse_modules import FusedSparseGatedLinear, FusedSparseLinear
    torch.manual_seed(0)
    for fmt in os.environ.get("MMA24_FMTS", "int8,float8_e4m3").split(","):
        gu = FusedSparseGatedLinear.from_float(torch.randn(2 * 14336, 4096, device="cuda") * 4096 ** -0.5, None,
                                               fmt=fmt, dynamic=False)
        dn = FusedSparseLinear.from_float(torch.randn(4096, 14336, device="cuda") * 14336 ** -0.5, None, fmt=fmt,
                                          dynamic=False)
        for M in [int(m) for m in os.environ.get("MMA24_MS", "1,16").split(",")]:
            for name, layer, gated, K in (("gate/up", gu, True, 4096), ("down", dn, False, 14336)):
                x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
                act = "silu" if gated else "none"
                N = layer.values.shape[0] // (2 if gated else 1)
                ref = sparse24_gemv(x, layer.values, layer.meta, layer.scale, None, act, gated=gated)
                rows = [(gus(lambda: sparse24_gemv(x, layer.values, layer.meta, layer.scale, None, act,  # noqa: B023
                                                   gated=gated)), "sparse24_gemv pick", "")]
                rows.append((gus(lambda: act_split(x, fp8=fmt != "int8")), "act_split alone", ""))  # noqa: B023
                cands = sm._candidates(M, N, K, gated)
                for c in cands if fmt == "int8" else cands[:4]:
                    for pdl in (False, True) if os.environ.get("MMA24_NOPDL") == "1" else (True,):  # twenty-third
                        # session: mma a programmatic dependent of act_split (~1 µs per layer; the route's form)
                        def run(c=c, pdl=pdl):
                            q, s = act_split(x, fp8=fmt != "int8", pdl=pdl)  # noqa: B023
                            return sm.sparse24_mma(q, s, layer.values, layer.meta, layer.scale, None, act,  # noqa: B023
                                                   gated, config=c, pdl=pdl)  # noqa: B023
                        rows.append(timed_row(run, ref, c, "mma pdl " if pdl else "mma "))
                    if M == 1 and os.environ.get("MMA24_X") == "1":  # the planes made inside (no act_split launch)
                        rows.append(timed_row(lambda c=c: sm.sparse24_mma_x(  # noqa: B023
                            x, layer.values, layer.meta, layer.scale, None, act, gated, config=c), ref, c, "mma_x "))
                if M == 1:  # the mma kernel alone on planes made once (what act_split adds in a graph, by difference)
                    q1, s1 = act_split(x, fp8=fmt != "int8")
                    rows.append(timed_row(lambda: sm.sparse24_mma(q1, s1, layer.values, layer.meta,  # noqa: B023
                                                                  layer.scale, None, act, gated, config=cands[0]),
                                          ref, cands[0], "mma kernel alone "))
                rows.sort(key=lambda r: r[0])
                p(f"mma24 {fmt} M={M} {name}:")
                # the 10 fastest, the references, and each family's best (twenty-fourth session: PFD and STAGES
                # all missed the top 10 and their times were not shown)
                fams = [next((r for r in rows[10:] if f in str(r[2])), None) for f in ("'PFD'", "'STAGES'")]
                for t, tag, c in rows[:10] + [r for r in rows[10:] if "sparse24_gemv" in r[1] or "alone" in r[1]
                                              or r in fams]:
                    p(f"   {t:7.1f} {tag} {c}")
        del gu, dn
        torch.cuda.empty_cache()

if "ncumma" in what:
    # twenty-first session, for after mma24: run under ncu (h200_next ncumma). sparse24_mma's default config on the
    # Llama int8 2:4 gate/up and down at M = 1, 3 launches each: is the loop at the DRAM roofline, latency-bound
    # (stalls on the cp.async waits) or issue-bound? Its SASS: 113 / 91 instructions per thread and step
    from fused.kernels import sparse24_mma as sm
    from fused.kernels.act_split import act_split
    from fused.sparse_modules import FusedSparseGatedLinear, FusedSparseLinear
    gu = FusedSparseGatedLinear.from_float(torch.randn(2 * 14336, 4096, device="cuda") * 4096 ** -0.5, None,
                                           fmt="int8", dynamic=False)
    dn = FusedSparseLinear.from_float(torch.randn(4096, 14336, device="cuda") * 14336 ** -0.5, None, fmt="int8",
                                      dynamic=False)
    for layer, K, gated in ((gu, 4096, True), (dn, 14336, False)):
        q, s = act_split(torch.randn(1, K, device="cuda", dtype=torch.bfloat16))
        N = layer.values.shape[0] // (2 if gated else 1)
        # the shipped pick (tuned_h200.py; PAIRS: two planes at M=1), as the route runs it
        from fused.kernels.tuning import _shipped
        cfg = _shipped("sparse24_mma", (1, N, K, gated, 2, torch.int8, "pairs")) or sm._candidates(1, N, K, gated)[0]
        print("ncumma", "gate/up" if gated else "down", cfg, flush=True)
        for _ in range(3):
            sm.sparse24_mma(q, s, layer.values, layer.meta, layer.scale, None, "silu" if gated else "none", gated,
                            config=cfg)
    torch.cuda.synchronize()
