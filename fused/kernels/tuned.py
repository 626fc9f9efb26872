"""Shipped kernel picks as data: one JSON file per GPU class (`fused/data/tuned_<name>.json`), read on first use.

Each entry: ``key`` = (kernel, M bucket, N, K, ...) with every value as a string, as `tuning.pick` looks it up, and
``config``, the launch config. `merge` folds the picks of a `python -m fused bench` run (its bench.json) into a
table: ``python -m fused tuned bench_out/bench.json`` regenerates the shipped one on the GPU it is for.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"


def path(name: str = "h200") -> Path:
    return DATA / f"tuned_{name}.json"


@functools.cache
def table(name: str = "h200") -> dict[tuple[str, ...], dict]:
    """key -> config of the shipped table ``name`` (read once per process)."""
    with open(path(name)) as f:
        doc = json.load(f)
    return {tuple(e["key"]): e["config"] for e in doc["entries"]}


def write(entries: dict[tuple[str, ...], dict], target: Path, about: dict) -> None:
    """The table as JSON, one entry per line, sorted by key (diffs stay readable)."""
    rows = [json.dumps({"key": list(k), "config": v}, sort_keys=True) for k, v in sorted(entries.items())]
    head = ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in about.items())
    with open(target, "w") as f:
        f.write("{\n" + head + ',\n "entries": [\n  ' + ",\n  ".join(rows) + "\n ]}\n")


def merge(bench_json: str | Path, name: str = "h200", target: Path | None = None) -> int:
    """Fold the picks of a bench run (bench.json's "picks": [{"key": [...], "config": {...}}]) into table ``name``
    (written to ``target``, default the shipped file); a pick replaces the entry of its key. Returns the picks
    merged."""
    with open(bench_json) as f:
        picks = json.load(f).get("picks")
    if picks is None:
        raise ValueError(f"{bench_json}: no 'picks' (written by `python -m fused bench` on a GPU)")
    src = path(name)
    with open(src) as f:
        doc = json.load(f)
    entries = {tuple(e["key"]): e["config"] for e in doc["entries"]}
    for p in picks:
        entries[tuple(str(k) for k in p["key"])] = p["config"]
    write(entries, Path(target) if target is not None else src,
          {k: v for k, v in doc.items() if k != "entries"})
    table.cache_clear()
    return len(picks)
