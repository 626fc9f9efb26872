"""Kernel launches without Triton's per-call Python path.

``fn[grid](*args, **kw)`` runs JITFunction.run on every call: argument binding, specialization, cache-key
hashing, grid canonicalisation: ~20 µs of host time on triton 3.6, as much as a decode GEMV's GPU time.
`launch_kernel` pays that once per call signature. Its key is finer than Triton's specialization: each
tensor's dtype and 16-byte alignment, every int's exact value (Triton specializes ints on == 1, on
divisibility by 16 and on width), the constexprs and launch options. It keeps the CompiledKernel that the
first, ordinary launch returns and then calls its launcher directly. Exact ints mean one entry per layer
shape and M: a few dozen per model, each a new key paying one ordinary launch.
Convention: runtime arguments positional, constexprs and launch options (num_warps, ...) as keywords.
Off under the interpreter, with FUSED_FAST_LAUNCH=0, and while a Triton launch hook is installed.
"""
from __future__ import annotations

import os

import torch

from fused.kernels import INTERPRET

ENABLED = not INTERPRET and os.environ.get("FUSED_FAST_LAUNCH", "1") != "0"
_cache: dict = {}
# launches through Triton's own path ("jit": first call of a key, or a hook installed) vs the cache
counts = {"jit": 0, "cached": 0}
_Tensor = torch.Tensor


def _key(args) -> tuple:
    # (type, value) for non-tensors: True and 1 hash alike but specialize differently
    return tuple([(a.dtype, a.data_ptr() % 16 == 0) if isinstance(a, _Tensor) else (type(a), a) for a in args])


def launch_kernel(fn, grid: tuple, *args, **kw) -> None:
    """``fn[grid](*args, **kw)``, through the cached launcher after the first call of a signature."""
    if not ENABLED:
        fn[grid](*args, **kw)
        return
    dev = args[0].get_device()
    key = (fn, dev, _key(args), tuple(kw.items()))
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


def _installed(hook) -> bool:
    # triton >= 3.5 keeps an (empty) HookChain where older versions keep None
    return hook is not None and (len(hook.calls) > 0 if hasattr(hook, "calls") else True)


def _hooked() -> bool:
    global _knobs
    if _knobs is None:
        from triton import knobs as _k

        _knobs = _k.runtime
    return _installed(_knobs.launch_enter_hook) or _installed(_knobs.launch_exit_hook)
