"""Print a bench.json's kernel picks as fused/kernels/tuned_h200.py entries (the ones not shipped yet, or all).

usage: python .ci/picks_to_tuned.py BENCH_JSON [--all] [--match SUBSTRING]
"""
import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from fused.kernels.tuned_h200 import TUNED  # noqa: E402

KERNELS = ("w8_gemm", "w8a16_gemv", "sparse24_gemv", "sparse24_linear", "sparse24_mma", "epilogue_quant", "unpack24",
           "narrow_mlp")


class _Dtypes:  # `torch.int8` in a key string -> "torch.int8"
    def __getattr__(self, name):
        return f"torch.{name}"


def entries(path: str, every: bool = False, match: str = "") -> list[str]:
    tuned = json.load(open(path))["tuned"]
    out = []
    for k, cfg in tuned.items():
        key = eval(k, {"torch": _Dtypes()})  # noqa: S307 (our own bench output)
        if key[0] not in KERNELS or match not in k:
            continue
        key = tuple(str(v) for v in key)
        if every or TUNED.get(key) != cfg:
            out.append(f"    {key!r}: {cfg!r},")
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("bench_json")
    p.add_argument("--all", action="store_true", help="also the picks that equal the shipped entry")
    p.add_argument("--match", default="", help="only keys whose text contains this")
    a = p.parse_args()
    print("\n".join(entries(a.bench_json, a.all, a.match)))
