"""Kernel launches without Triton's per-call Python path.

``fn[grid](*args, **kw)`` runs JITFunction.run on every call: argument binding, specialization, cache-key
hashing, grid canonicalisation: ~20 µs of host time on triton 3.6, as much as a decode GEMV's GPU time.
`launch_kernel` pays that once per call signature. Its key is finer than Triton's specialization: each
tensor's dtype and 16-byte alignment, every int's exact value (Triton specializes ints on == 1, on
divisibility by 16 and on width), the constexprs and launch options. It keeps the CompiledKernel that the
first, ordinary launch returns and then calls its launcher directly. Exact ints mean one entry per layer
shape and M: a few dozen per model, each a new key paying one ordinary launch.
Convention: runtime arguments positional, constexprs and launch options (num_warps, ...) as keywords.
``compile_env``: environment variables set while Triton's own path runs (it compiles there), e.g. the
narrow MLP's DISABLE_MMA_V3 (see fused.kernels.narrow_mlp); Triton's disk cache keys on them.
Off under the interpreter, with launch.ENABLED = 0, and while a Triton launch hook is installed.
"""
from __future__ import annotations

import math
import os

import torch

from fused.kernels import INTERPRET

ENABLED = not INTERPRET
_cache: dict = {}
# launches through Triton's own path ("jit": first call of a key, or a hook installed) vs the cache; also the 2:4
# decode launches whose "quad" pick met an x it cannot read as words (fp32, unaligned) and ran as "vsel"
counts = {"jit": 0, "cached": 0, "replayed": 0, "graph_replayed": 0, "quad_as_vsel": 0}
_Tensor = torch.Tensor


def _key(args) -> tuple:
    # (type, value) for non-tensors: True and 1 hash alike but specialize differently
    return tuple([(a.dtype, a.data_ptr() % 16 == 0) if isinstance(a, _Tensor) else (type(a), a) for a in args])


class _Env:
    """Set environment variables for the duration of a with-block, restoring what was there."""

    def __init__(self, env: dict | None):
        self.env, self.old = env or {}, {}

    def __enter__(self):
        for k, v in self.env.items():
            self.old[k] = os.environ.get(k)
            os.environ[k] = v

    def __exit__(self, *exc):
        for k, v in self.old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _triton_launch(fn, grid: tuple, args: tuple, kw: dict, compile_env: dict | None):
    # Triton's own compile-and-launch. Whether a kernel needs global scratch (a TMA descriptor made on the device) is
    # known only once it is compiled, inside this launch, so the allocator must be there before
    ensure_scratch_allocator()
    with _Env(compile_env):
        return fn[grid](*args, **kw)


def launch_kernel(fn, grid: tuple, *args, compile_env: dict | None = None, **kw) -> None:
    """``fn[grid](*args, **kw)``, through the cached launcher after the first call of a signature."""
    if not ENABLED:
        _triton_launch(fn, grid, args, kw, compile_env)
        return
    dev = args[0].get_device()
    key = (fn, dev, _key(args), tuple(kw.items()))
    try:
        hit = _cache.get(key)
    except TypeError:
        # an unhashable argument, e.g. a host TMA descriptor (Triton's own binder expands it; it holds a tensor's
        # address, so a replay would reuse it): Triton's path, not recorded. Our kernels make theirs on the device.
        _triton_launch(fn, grid, args, kw, compile_env)
        if _rec is not None:
            _rec.ok = False
        return
    if hit is None or _hooked():
        counts["jit"] += 1
        compiled = _triton_launch(fn, grid, args, kw, compile_env)
        if hit is None and compiled is not None:
            # constexpr params after the positional ones, in signature order (the launcher takes them all)
            tail = tuple(kw[p.name] if p.name in kw else p.default for p in fn.params[len(args):])
            _cache[key] = hit = (compiled, tail, _needs_scratch(compiled))
        if _rec is not None:
            if hit is None or _hooked():
                _rec.ok = False
            else:
                _rec.add(hit[0], hit[1], grid, args)
        return
    counts["cached"] += 1
    k, tail, scratch = hit
    if scratch:
        ensure_scratch_allocator()
    if _rec is not None:
        _rec.add(k, tail, grid, args)
    g = grid + (1, 1)
    k.run(g[0], g[1], g[2], torch._C._cuda_getCurrentRawStream(dev), k.function, k.packed_metadata,
          None, None, None, *args, *tail)


_knobs = None


def _needs_scratch(compiled) -> bool:
    # global scratch: e.g. a TMA descriptor made on the device; Triton's launcher allocates it per launch
    return getattr(getattr(compiled, "metadata", None), "global_scratch_size", 0) > 0


def _scratch(size: int, alignment: int, stream):
    return torch.empty(size, device="cuda", dtype=torch.int8)


def ensure_scratch_allocator() -> None:
    """Kernels with global scratch need Triton's allocator, which is per thread (a ContextVar): set ours (torch's
    caching allocator, so CUDA-graph captures take the graph's pool) in this thread unless one is set. Called
    before every launch of such a kernel, replays included: a module recorded in one thread may replay in another."""
    from triton.runtime import _allocation

    cur = _allocation._allocator.get() if hasattr(_allocation._allocator, "get") else _allocation._allocator
    if isinstance(cur, _allocation.NullAllocator):
        import triton

        triton.set_allocator(_scratch)


def _installed(hook) -> bool:
    # triton >= 3.5 keeps an (empty) HookChain where older versions keep None
    return hook is not None and (len(hook.calls) > 0 if hasattr(hook, "calls") else True)


def _hooked() -> bool:
    global _knobs
    if _knobs is None:
        from triton import knobs as _k

        _knobs = _k.runtime
    return _installed(_knobs.launch_enter_hook) or _installed(_knobs.launch_exit_hook)


# ------------------------------------------------------------------------------------------- replay
# An eager call of a converted module runs the same launches every time for the same input signature. The
# dispatch records them once (`record`) and re-issues them (`Replay`): the launcher calls and two torch.empty
# per call (the output, one buffer for the intermediates), none of the Python between them. Every tensor a
# recorded launch takes must be classified, else the call is not replayable: the call's input x, an output
# made by `empty` during the call (allocated afresh on replay), or a constant (the module's buffers, the
# `persistent` workspaces).
# A tensor made any other way (a torch op on the way, e.g. smoothing, a copying reshape, a cuBLAS or
# cuSPARSELt product, a CUDA graph's output) aborts the recording, so nothing that a replay would skip can go
# missing. The recording keeps every `empty` output alive until it stops: otherwise the caching allocator
# could hand a freed intermediate's address to such a tensor, which would then pass for that intermediate
# (a replay would skip the op that made it and read stale memory). Outputs from `empty` must be written only
# by kernels launched through `launch_kernel` (no torch op writes into them in place).
_rec = None
_persistent: set = set()


def empty(shape, *, device, dtype) -> torch.Tensor:
    """torch.empty for a launcher's output (registered with the recording, if one is being made)."""
    t = torch.empty(shape, device=device, dtype=dtype)
    if _rec is not None:
        _rec.alloc(t)
    return t


def persistent(new: tuple, old: tuple | None = None) -> None:
    """Register long-lived workspaces (split-K partials, counters) that recordings may take as constants;
    ``old``: the workspaces these replace (their memory may now go to anything else)."""
    if old is not None:
        _persistent.difference_update(t.data_ptr() for t in old)
    _persistent.update(t.data_ptr() for t in new)


class Recording:
    def __init__(self, x: torch.Tensor, constants):
        self.x_ptr, self.x_dtype = x.data_ptr(), x.dtype
        self.constants = {t.data_ptr() for t in constants} | _persistent
        self.allocs: list = []  # (shape, dtype) per output made by `empty`
        self.keep: list = []  # those outputs, alive while recording: no other tensor can take their addresses
        self.live: dict = {}  # data_ptr -> index into allocs (the latest allocation at that address)
        self.launches: list = []
        self.scratch = False  # a launch needs Triton's scratch allocator
        self.ok = True

    def alloc(self, t: torch.Tensor) -> None:
        if t.numel() == 0:
            self.ok = False  # no address to tell it by
        self.live[t.data_ptr()] = len(self.allocs)
        self.allocs.append((tuple(t.shape), t.dtype))
        self.keep.append(t)

    def add(self, compiled, tail: tuple, grid: tuple, args: tuple) -> None:
        template, subs = [], []
        for pos, a in enumerate(args):
            if isinstance(a, _Tensor):
                ptr = a.data_ptr()
                idx = self.live.get(ptr)
                if idx is not None:  # the launcher only takes the address: a dtype view needs nothing
                    subs.append((pos, idx))
                elif ptr == self.x_ptr:
                    subs.append((pos, -1))
                else:
                    if ptr not in self.constants:
                        self.ok = False
                    template.append(a)
                    continue
                a = None  # filled in per replay (and not kept alive by the recording)
            template.append(a)
        self.scratch = self.scratch or _needs_scratch(compiled)
        g = tuple(grid) + (1, 1)
        self.launches.append((compiled.run, g[0], g[1], g[2], compiled.function, compiled.packed_metadata,
                              template + list(tail), tuple(subs)))


class Replay:
    """The recorded launches of one call signature, re-issued on a new input. The call's output gets its own
    torch.empty; every intermediate (quantized activations, scales, the hidden layer) is carved out of ONE
    byte buffer and passed to the launcher as an address (Triton's launcher takes a pointer argument as an
    int): one allocation per call instead of one per intermediate (torch.empty costs several µs of host time
    each on the H200's host). Offsets are multiples of 512 bytes, as the caching allocator's own, so the
    16-byte alignment the kernels were specialised for holds. The buffer goes back to the caching allocator
    at the end of the call, stream-ordered like any tensor freed after its kernels were queued."""

    __slots__ = ("out_alloc", "offsets", "total", "launches", "out", "out_shape", "stats", "scratch")

    def __init__(self, rec: Recording, out: int, out_shape, stats):
        self.launches = tuple(rec.launches)
        self.scratch = rec.scratch
        self.out, self.out_shape, self.stats = out, out_shape, stats
        self.out_alloc = rec.allocs[out] if rec.allocs else None  # None: a recording with no launches
        offsets, total = [], 0
        for i, (shape, dtype) in enumerate(rec.allocs):
            offsets.append(total)
            if i != out:
                n = math.prod(shape) * dtype.itemsize
                total += -(-n // 512) * 512
        self.offsets, self.total = tuple(offsets), total

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        dev = x.device
        y = torch.empty(self.out_alloc[0], device=dev, dtype=self.out_alloc[1])
        if self.total:
            buf = torch.empty(self.total, device=dev, dtype=torch.uint8)  # noqa: F841 (alive until the return)
            base = buf.data_ptr()
            vals = [base + off for off in self.offsets]
        else:
            vals = [None] * len(self.offsets)
        vals[self.out] = y
        vals.append(x)  # index -1
        stream = torch._C._cuda_getCurrentRawStream(x.get_device())
        if self.scratch:
            ensure_scratch_allocator()
        for run, g0, g1, g2, function, meta, template, subs in self.launches:
            args = template.copy()
            for pos, idx in subs:
                args[pos] = vals[idx]
            run(g0, g1, g2, stream, function, meta, None, None, None, *args)
        counts["replayed"] += len(self.launches)
        return y if self.out_shape is None else y.view(self.out_shape)


def start_recording(x: torch.Tensor, constants) -> Recording:
    global _rec
    _rec = Recording(x, constants)
    return _rec


def stop_recording() -> None:
    global _rec
    _rec = None
