"""Triton kernels, one per file with its launcher. Importing this package does not import triton (a CPU-only install
may leave it out); importing a kernel's file does."""
import os

# Under TRITON_INTERPRET=1 (CPU tests), bf16 tl.dot operands come out wrong (numpy has no bf16), so the
# kernels take an fp32-operand dot there. Everything else (loads, masks, epilogues) runs as on the GPU.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


# The decode GEMVs' K loops software-pipelined by Triton (STAGES > 1: tiles streamed through shared memory by
# cp.async, a few steps ahead), offered to the tuners as extra M=1 candidates (w8a16_gemv, sparse24_gemv).
# H200, 2026-12-02 (seventeenth session, `bash .ci/h200_next.sh sixteenth3` / `seventeenth1`): the 2:4 vsel tile
# 16x512 went 53.5 -> 41.8 µs for gate/up and 32.0 -> 24.6 for down (layer alone, graph), the int8 2:4 W8A16 block
# at M=1 62.6 -> 59.4 (cuSPARSELt keeps gate/up in graphs, 38 µs); dense GEMVs 0-1.3 µs per layer. Every staged
# candidate matches its plain twin (bit for bit at 4 warps; at 8 warps 1-4 outputs of 14336 differ in the last bit:
# the pipelined loop's layout changes the cross-warp reduction order). fused.kernels.GEMV_STAGES = False: off.
GEMV_STAGES = True

# The L2 policy of the decode kernels' weight loads (each weight byte is read once per forward): "evict_first"
# makes the streamed lines each other's victims, so the stream does not evict what other kernels left in L2
# (activations, KV, dirty lines whose write-back would share the DRAM bus with the stream). H200, 2026-12-03
# (`bash .ci/h200_next.sh evict` / `evict2`): after do_bench's flush (256 MB zeroed: L2 left dirty) a pure read of
# the 117 MB gate/up weight took 37.5 µs normal, 34.0 evict_first (29.9 after a clean flush); int8 W8A16 block M=1
# 61.1-61.4 -> 59.5-59.9 (shipped picks, three runs each); with the GEMV retuned under it int8 58.8, fp8 W8A8 57.6
# (`evictfinal`). Loads through cp.async (STAGES) drop the hint. fused.kernels._W_EVICT = 0: off.
_W_EVICT = "evict_first"


def __getattr__(name: str):
    if name == "W_EVICT":  # a triton constexpr: made when a kernel file asks for it, so triton loads only then
        import triton.language as tl

        return tl.constexpr(_W_EVICT)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# Strict mode (FUSED_STRICT=1 at start, or fused.dispatch.set_strict): a CUDA call that would take a slower
# fallback raises instead. One flag, here, so the dispatch and the kernels' launchers read the same one.
_strict = os.environ.get("FUSED_STRICT") == "1"


def strict() -> bool:
    return _strict


def set_strict(on: bool = True) -> None:
    global _strict
    _strict = bool(on)


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


_sms: dict = {}


def sm_count(device) -> int:
    """Streaming multiprocessors of a CUDA device, queried once per device (for persistent grids)."""
    import torch

    idx = device.index if device.index is not None else torch.cuda.current_device()
    n = _sms.get(idx)
    if n is None:
        n = _sms[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return n


def up_operands(qweight, wscale, bias, gated: bool, up):
    """(N, up weight, up scale, up bias, first up row) for the gated kernels, which read the up projection
    at ``wu[u_row0 + n]``, ``su[u_row0 + n]``, ``bu[u_row0 + n]``.

    ``up`` None: the stacked layout, gate rows [0, N) and up rows [N, 2N) of one tensor (u_row0 = N; the same
    tensors are passed again, no slicing on the eager hot path). ``up`` = (qweight, scale, bias): the up
    projection in tensors of its own, shaped like the gate's (u_row0 = 0): what `fused.compile_passes`
    makes of two per-Linear modules, with no copy of either weight. Not gated: dummies (never read)."""
    R = qweight.shape[0]
    if up is None:
        if not gated:
            return R, qweight, wscale, bias, 0
        return R // 2, qweight, wscale, bias, R // 2
    if not gated:
        raise ValueError("up weights given for a non-gated launch")
    wu, su, bu = up
    if wu.shape != qweight.shape or wu.dtype != qweight.dtype or su.shape != wscale.shape:
        raise ValueError(f"gate and up weights differ: {qweight.dtype} {tuple(qweight.shape)} / scale "
                         f"{tuple(wscale.shape)} vs {wu.dtype} {tuple(wu.shape)} / scale {tuple(su.shape)}")
    if (bias is None) != (bu is None):
        raise ValueError("gate and up projections must both have a bias or both have none")
    return R, wu, su, bu, 0
