"""The 8-bit formats: storage dtype and the largest representable magnitude used for scaling."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Format:
    name: str
    dtype: torch.dtype
    qmax: float  # scale = absmax / qmax
    integer: bool  # round-to-nearest before the cast (int8) or let the cast round (fp8)

    def __str__(self) -> str:
        return self.name


INT8 = Format("int8", torch.int8, 127.0, True)
FLOAT8_E4M3 = Format("float8_e4m3", torch.float8_e4m3fn, 448.0, False)
FORMATS = {f.name: f for f in (INT8, FLOAT8_E4M3)}


def get_format(fmt: str | Format) -> Format:
    if isinstance(fmt, Format):
        return fmt
    try:
        return FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; expected one of {sorted(FORMATS)}") from None
