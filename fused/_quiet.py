"""Import torchao without its log lines about its own optional extensions.

torchao's import logs "Failed to load .../_C_mxfp8...so" (its CUDA-only kernels, absent on a CPU install or another
CUDA version) and, through torch's pytree, a deprecation warning about its own ``KernelPreference`` enum. Neither
concerns this package (it calls none of those kernels), and both would greet every ``import fused``; their loggers
are raised to ERROR for the duration of torchao's import only, so anything else they log later still shows.
"""
from __future__ import annotations

import logging
import sys

_LOGGERS = ("torchao", "torch.utils._pytree")


def quiet_torchao_import() -> None:
    if "torchao" in sys.modules:
        return
    loggers = [logging.getLogger(name) for name in _LOGGERS]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.setLevel(logging.ERROR)
    try:
        import torchao  # noqa: F401
        import torchao.quantization  # noqa: F401
    finally:
        for log, level in zip(loggers, levels):
            log.setLevel(level)
