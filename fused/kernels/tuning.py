"""Config choice for the kernels: tuned tables kept as data, a measured pick on first use otherwise.

No CUDA query and no tuning at import. On the first call for a new key on a GPU the candidates are timed
with triton.testing.do_bench (once, the fastest three twice more) and the winner is cached in-process (warm up
before capturing a CUDA graph). Under the interpreter, or with FUSED_TUNE=0 (tests), the first candidate, a
heuristic default, is taken. FUSED_RETUNE=1 ignores the shipped table (to measure new candidates against the old
picks); a comma list of kernel names ignores it for those kernels only.
"""
from __future__ import annotations

import os
import statistics

from fused.kernels import INTERPRET, tuned

# FUSED_RETUNE=1: every kernel; a comma list of kernel names (e.g. sparse24_gemv,w8a16_gemv): those only (a retune of
# every kernel at a new M compiles hundreds of candidates)
_RETUNE_ENV = os.environ.get("FUSED_RETUNE", "")
RETUNE = _RETUNE_ENV == "1"
RETUNE_KERNELS = frozenset(k for k in _RETUNE_ENV.split(",") if k and k != "1" and k != "0")


def retune(kernel: str) -> bool:
    """Whether ``kernel``'s shipped picks are to be timed against its candidates instead of taken."""
    return RETUNE or kernel in RETUNE_KERNELS


# the RETIME_TOP fastest candidates of the first pass are timed RETIME_ROUNDS times more, alternating their order, and
# the pick is the one with the lowest median (tuning.RETIME_ROUNDS = 0: one pass, as before the fortieth session)
RETIME_TOP = 3
RETIME_ROUNDS = 2

_cache: dict = {}
# (kernel, key) -> config for every pick made in this process: what `explain`/bench report
picks: dict = {}
# (kernel, key) -> [(µs, config), ...] for every candidate timed in this process
timings: dict = {}
# (kernel, key) -> [(config, "Error: message"), ...]: candidates that failed to compile or run while timed (the
# tuner skips them; `explain` and the bench JSON show them, so a kernel that stops compiling does not go unseen)
failures: dict = {}


def m_bucket(M: int) -> int:
    """Bucket M so tuning keys stay few: 1, 2, 4, 8, 16, 32, ... 4096, then 8192+."""
    b = 1
    while b < M and b < 8192:
        b *= 2
    return b


def known(kernel: str, key: tuple) -> dict | None:
    """The config ``pick`` would take for ``key`` without timing anything: this process's pick, else the shipped one
    (unless ``kernel`` is being retuned); None when neither exists. For kernels that must run another kernel's tile
    (split_gemm, first_layer: the same sums as act_split / act_quant + w8_gemm)."""
    cfg = _cache.get((kernel,) + key)
    if cfg is None and not retune(kernel):
        cfg = _shipped(kernel, key)
    return cfg


def _shipped(kernel: str, key: tuple) -> dict | None:
    # the shipped table keys its entries by the key's values as strings
    return tuned.table().get((kernel,) + tuple(str(k) for k in key))


def __getattr__(name: str):
    if name == "TUNED":  # the shipped table, read on first use (fused/data/tuned_h200.json)
        return tuned.table()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pick(kernel: str, key: tuple, candidates, launch) -> dict:
    """Return the config to use for ``key``. ``candidates()`` lists configs (called only on a cache
    miss: this is on every call's host path), ``launch(cfg)`` runs the kernel once with one."""
    full = (kernel,) + key
    cfg = _cache.get(full)
    if cfg is not None:
        return cfg
    candidates = candidates()
    tuned = _shipped(kernel, key)
    if retune(kernel) and tuned is not None:  # timed against the candidates, not taken as it is
        candidates = candidates + [tuned] * (tuned not in candidates)
        tuned = None
    if INTERPRET or len(candidates) == 1 or os.environ.get("FUSED_TUNE") == "0":
        cfg = candidates[0]
    elif tuned is not None:
        cfg = tuned
    else:
        from triton.testing import do_bench

        def bench(c):
            return do_bench(lambda: launch(c), warmup=5, rep=20, return_mode="median")

        times = {}  # candidate index -> its timings (ms)
        for i, c in enumerate(candidates):
            try:
                times[i] = [bench(c)]
            except Exception as e:  # a config that does not fit (shared memory, registers) is skipped, and recorded
                failures.setdefault(full, []).append((c, f"{type(e).__name__}: {str(e).strip()[-300:]}"))
        if not times:
            cfg0, err = failures[full][0]
            raise RuntimeError(f"{kernel}: no candidate config runs for key {key}; the first, {cfg0}, failed with "
                               f"{err}")
        # the fastest few again, in alternating order, each ranked by the median of its timings: one pass in sequence
        # ranks them by what the GPU's clocks and caches did during each one's 20 ms too (the same shipped pick took
        # 40.3 and 47.1 µs in two sessions' tuner runs on the H200)
        top = sorted(times, key=lambda i: times[i][0])[:RETIME_TOP]
        for r in range(RETIME_ROUNDS if len(top) > 1 else 0):
            for i in top[::-1] if r % 2 == 0 else top:
                times[i].append(bench(candidates[i]))
        mid = {i: statistics.median(ts) for i, ts in times.items()}
        for i in times:
            timings.setdefault(full, []).append((round(mid[i] * 1e3, 2), candidates[i]))
        cfg = candidates[min(top, key=lambda i: mid[i])]
    _cache[full] = cfg
    picks[full] = cfg
    return cfg
