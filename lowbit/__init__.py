"""lowbit: 8-bit number formats in pure torch (no kernels).

Symmetric int8 and float8 e4m3 with per-output-channel weight scales and per-token dynamic activation
scales. Everything here is the numeric definition that the kernels in `fused` must reproduce.
"""
from lowbit.formats import FORMATS, Format, get_format
from lowbit.quant import (
    QuantizedWeight,
    dequantize,
    dequantize_activation_grouped,
    quantize_activation,
    quantize_activation_grouped,
    quantize_weight,
)
from lowbit.metrics import sqnr

__all__ = [
    "FORMATS",
    "Format",
    "QuantizedWeight",
    "dequantize",
    "dequantize_activation_grouped",
    "get_format",
    "quantize_activation",
    "quantize_activation_grouped",
    "quantize_weight",
    "sqnr",
]
