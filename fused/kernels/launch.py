"""Kernel launches without Triton's per-call Python path.

``fn[grid](*args, **kw)`` runs JITFunction.run on every call: argument binding, specialization, cache-key
hashing, grid canonicalisation: ~20 µs of host time on triton 3.6, as much as a decode GEMV's GPU time.
`launch_kernel` pays that once per specialization. It keys each call on what Triton specializes on (tensor dtype
and 16-byte alignment; for ints: == 1, divisible by 16, 32- or 64-bit; constexpr values, launch options),
keeps the CompiledKernel that the first, ordinary launch returns, and from then on calls its launcher
directly. Convention: runtime arguments positional, constexprs and launch options (num_warps, ...) as
keywords. Off under the interpreter, with FUSED_FAST_LAUNCH=0, and while a Triton launch hook is set.
"""
from __future__ import annotations

import os

import torch

from fused.kernels import INTERPRET

ENABLED = not INTERPRET and os.environ.get("FUSED_FAST_LAUNCH", "1") != "0"
_cache: dict = {}
_I32 = 2 ** 31
# launches through Triton's own path ("jit": first call of a specialization, or a hook set) vs the cache
counts = {"jit": 0, "cached": 0}


def _spec(v):
    if isinstance(v, torch.Tensor):
        return v.dtype, v.data_ptr() % 16 == 0
    t = type(v)
    if t is int:
        return v == 1, v % 16 == 0, -_I32 <= v < _I32
    if t is float:
        return t
    return t, v  # bool, None


def launch_kernel(fn, grid: tuple, *args, **kw) -> None:
    """``fn[grid](*args, **kw)``, through the cached launcher after the first call of a specialization."""
    if not ENABLED:
        fn[grid](*args, **kw)
        return
    dev = args[0].get_device()
    key = (fn, dev, tuple([_spec(a) for a in args]), tuple(kw.items()))
    hit = _cache.get(key)
    if hit is None or _hooked():
        counts["jit"] += 1
        compiled = fn[grid](*args, **kw)
        if hit is None and compiled is not None:
            # constexpr params after the positional ones, in signature order (the launcher takes them all)
            tail = tuple(kw[p.name] if p.name in kw else p.default for p in fn.params[len(args):])
            _cache[key] = (compiled, tail)
        return
    counts["cached"] += 1
    k, tail = hit
    g = grid + (1, 1)
    k.run(g[0], g[1], g[2], torch._C._cuda_getCurrentRawStream(dev), k.function, k.packed_metadata,
          None, None, None, *args, *tail)


_knobs = None


def _hooked() -> bool:
    global _knobs
    if _knobs is None:
        from triton import knobs as _k

        _knobs = _k.runtime
    return _knobs.launch_enter_hook is not None or _knobs.launch_exit_hook is not None
