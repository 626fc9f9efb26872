"""`fused.explain(model)`: what was converted, into what format, which path each op takes, bytes saved."""
from __future__ import annotations

import textwrap
import warnings

import torch
from torch import nn

from fused import cpu, cpu_isa, cpu_narrow, dispatch
from fused.kernels import tuning
from fused.modules import FusedGatedLinear, FusedLinear, FusedGatedMLP, FusedMLP
from fused.narrow import FusedNarrowMLP
from fused.sparse_modules import FusedSparseGatedLinear, FusedSparseLinear

_OPS = (FusedLinear, FusedGatedLinear, FusedSparseLinear, FusedSparseGatedLinear, FusedNarrowMLP)
_BLOCKS = (FusedMLP, FusedGatedMLP)


def converted_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in model.named_modules() if isinstance(m, _OPS)]


def explain(model: nn.Module, device: torch.device | str | None = None, print_table: bool = True) -> "Explanation":
    """One row per fused op: fqn, kind, format, mode, activation, the path it takes on ``device``
    (default: where its weights are), bytes before/after. A layer of a block that can run as one op
    (FusedGatedMLP / FusedMLP with dense 8-bit layers) also carries the block's path: "block_path" /
    "block_why" (None otherwise; e.g. "triton:decode_block|per_layer" on CUDA: the whole block in one
    launch at small M, each layer's own path above). Warns when nothing is converted."""
    rows = []
    blocks = {n: m for n, m in model.named_modules() if isinstance(m, _BLOCKS)}
    for name, mod in converted_modules(model):
        dev = torch.device(device) if device is not None else next(mod.buffers()).device
        dense = hasattr(mod, "qweight")
        k = mod.qweight.shape[1] if dense else 2 * mod.values.shape[1] if hasattr(mod, "values") else None
        n = mod.qweight.shape[0] if dense else None
        path, why = dispatch.plan(mod.op_name, mod.fmt, mod.dynamic, dev, k=k, n=n,
                                  **(dispatch.cpu_weight_facts(dev, mod.qweight) if dense else {}))
        parent = name.rsplit(".", 1)[0] if "." in name else ""
        block_path = block_why = None
        if parent in blocks and blocks[parent].block_fusable():
            block_path, block_why = dispatch.plan("mlp_block", mod.fmt, mod.dynamic, dev)
        routes = None
        if not dense and hasattr(mod, "values"):  # a 2:4 layer: the routes its shape took so far, per M bucket
            picks = dispatch.sparse_route_picks(mod.op_name, mod.values, mod.dynamic)
            routes = ", ".join(f"M~{k[0]}{f' [{k[-1]}]' if k[-1] else ''}: {e}" + ("" if g == e else f" (graph: {g})")
                               for k, (e, g) in sorted(picks.items(), key=lambda kv: (kv[0][0], kv[0][-1]))) or None
        elif dense:  # cuBLAS or Triton under CUDA-graph capture: W8A8 above the GEMV range, W8A16 from WIDEN_MIN_M
            picks = {k: g for k, g in dispatch.dense_route_picks(mod.op_name, mod.qweight).items()
                     if (k[-1] in ("w8a16", "gemv", "ws mid")) != mod.dynamic}  # W8A8 picks are not a weight-only layer's
            routes = ", ".join(f"M~{k[0]}{f' [{k[-1]}]' if k[-1] else ''}: graph {g}"
                               for k, g in sorted(picks.items(), key=lambda kv: (kv[0][0], kv[0][-1]))) or None
        rows.append({
            "module": name,
            "block": parent if parent in blocks else None,
            "op": mod.op_name,
            "format": mod.fmt + (" 2:4" if getattr(mod, "sparsity", None) else ""),
            # 2:4 meta in cuSPARSELt's tiles, one buffer with the values for every route ("tiled"), or row-major
            "meta": ("tiled" if mod.tiled_meta else "row-major") if hasattr(mod, "tiled_meta") else None,
            "mode": "W8A8 dynamic" if mod.dynamic else "weight-only",
            "act": mod.act,
            "device": str(dev),
            "path": path,
            "why": why,
            "routes": routes,
            "block_path": block_path,
            "block_why": block_why,
            "bytes_before": mod.source_bytes,
            # + derived copies: the CPU path's scales/bias in the activation dtype and its oneDNN copy of the weight,
            # the 2:4 cuSPARSELt route's compressed weight, the CPU path's fp32 layers of a narrow MLP
            "bytes_after": mod.weight_bytes() + (cpu.cached_bytes(mod.qweight, mod.scale, mod.bias) if dense
                                                 else dispatch.cslt_cached_bytes(mod.values) if hasattr(mod, "values")
                                                 else cpu_narrow.narrow_cached_bytes(mod.weights)),
        })
    if not rows:
        warnings.warn(f"fused.explain: {type(model).__name__} holds no converted module", stacklevel=2)
    rows = Explanation(rows)
    if print_table:
        print(format_table(rows))
        if any(r["device"] == "cpu" for r in rows):
            print(cpu_isa.summary())
        replayed, refused, graphed = dispatch.replay_status(model)
        if replayed or refused or graphed:
            print(f"eager CUDA calls: {replayed} input signature(s) replayed from recorded launches"
                  + (f", {graphed} from CUDA graphs of the module (graph picks that a recording cannot replay)"
                     if graphed else "")
                  + "".join(f"\n  {m}: {why}" for m, why in dict(refused).items()))
        for (kind, *key), refused in dispatch.route_refusals.items():  # wrong outputs left out of route timings
            print(f"route {kind} {tuple(key)}: " + "; ".join(f"{n} left out ({why})" for n, why in refused))
        for (kernel, *key), fails in tuning.failures.items():  # skipped while tuning: not silent
            print(f"tuning {kernel} {tuple(key)}: {len(fails)} candidate(s) failed and were skipped, first "
                  f"{fails[0][0]}: {fails[0][1][:160]}")
    return rows


class Explanation(list):
    """`explain`'s rows (one dict per fused op); shown as their table, so a REPL prints it once, readable."""

    def __repr__(self) -> str:
        return format_table(self)


def format_table(rows: list[dict], width: int = 118) -> str:
    """The rows as a table with one short path per op; each distinct reason once below it, numbered and wrapped."""
    head = ["module", "op", "format", "mode", "act", "path", "KiB before", "KiB after"]
    lines, shown, notes = [head], set(), {}

    def note(text: str) -> str:
        return f"[{notes.setdefault(text, len(notes) + 1)}]"
    for r in rows:
        if r.get("block_path") is not None and r["block"] not in shown:  # the block's line, above its layers
            shown.add(r["block"])
            lines.append([r["block"], "mlp_block", "", "", "", f'{r["block_path"]} {note(r["block_why"])}', "", ""])
        why = r["why"] + (f'; routes so far: {r["routes"]}' if r.get("routes") else "")
        fmt = r["format"] + (" (tiled meta)" if r.get("meta") == "tiled" else "")
        lines.append([r["module"], r["op"], fmt, r["mode"], r["act"], f'{r["path"]} {note(why)}',
                      f'{r["bytes_before"] / 1024:.1f}', f'{r["bytes_after"] / 1024:.1f}'])
    before = sum(r["bytes_before"] for r in rows)
    after = sum(r["bytes_after"] for r in rows)
    lines.append(["TOTAL", "", "", "", "", f"{len(rows)} fused ops", f"{before / 1024:.1f}", f"{after / 1024:.1f}"])
    widths = [max(len(str(l[i])) for l in lines) for i in range(len(head))]
    table = ["  ".join(str(c).ljust(w) for c, w in zip(l, widths)).rstrip() for l in lines]
    for text, i in notes.items():
        table.append(textwrap.fill(text, width, initial_indent=f"[{i}] ", subsequent_indent=" " * (len(str(i)) + 3)))
    return "\n".join(table)
