"""Error-vs-time plots (matplotlib, imported only when a plot is drawn): the sweep's and the demo's Pareto plots."""
from __future__ import annotations

import math
from pathlib import Path


def pareto_front(points: list[dict]) -> list[dict]:
    """Points not beaten on both time and error by another point, in order of time."""
    front, best = [], math.inf
    for p in sorted(points, key=lambda p: (p["ms"], p["error"])):
        if p["error"] < best:
            front.append(p)
            best = p["error"]
    return front


def plot_pareto(points: list[dict], path: str | Path, title: str, ylabel: str, xlabel: str = "ms / forward",
                reference: tuple | None = None, note: str | None = None, targets=()) -> Path:
    """Error (log) vs time, one marker per config with area ∝ ``mib``, the Pareto front as a line.
    ``points``: dicts with label, ms, error, mib. ``reference``: (label, ms[, mib]) drawn as a vertical line
    (its error is 0, off a log axis); its mib, when given, sets the marker scale. ``targets``: (error, label)
    horizontal lines."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 6), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    pos = [p["error"] for p in points if p["error"] and p["error"] > 0 and math.isfinite(p["error"])]
    floor = min(pos) / 3 if pos else 1e-6
    # marker area relative to the largest model, the reference included (so 8-bit shows as half of bf16)
    max_mib = max([p["mib"] for p in points] + ([reference[2]] if reference and len(reference) > 2 else []) + [1e-9])
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
              "#bcbd22", "#17becf"]
    by_error = sorted(range(len(points)), key=lambda i: points[i]["error"])
    for i, p in enumerate(points):
        err = p["error"] if p["error"] and p["error"] > 0 else floor
        ax.scatter([p["ms"]], [err], s=60 + 900 * p["mib"] / max_mib, alpha=0.55,
                   color=colors[i % len(colors)], edgecolors="black", linewidths=0.8, zorder=3,
                   label=f'{p["label"]}  ({p["mib"]:.1f} MiB)')
        # neighbours in error get labels above / below alternately, so close points stay readable
        dy = 8 if by_error.index(i) % 2 else -14
        ax.annotate(p["label"], (p["ms"], err), textcoords="offset points", xytext=(10, dy), fontsize=9, zorder=4)
    front = pareto_front([dict(p, error=p["error"] if p["error"] and p["error"] > 0 else floor) for p in points])
    if len(front) > 1:
        ax.plot([p["ms"] for p in front], [p["error"] for p in front], "--", color="gray", lw=1, zorder=2,
                label="Pareto front")
    for err, text in targets:
        ax.axhline(err, color="tab:green", lw=0.8, ls="-.", alpha=0.6, zorder=1)
        ax.annotate(text, (0, err), xycoords=("axes fraction", "data"), xytext=(4, 2), textcoords="offset points",
                    fontsize=7, color="tab:green")
    if reference is not None:
        ax.axvline(reference[1], color="black", lw=1, ls=":", zorder=1, label=f"{reference[0]}: {reference[1]:.1f} ms")
    if pos:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=11)
    ax.grid(True, which="both", alpha=0.3)
    xs = [p["ms"] for p in points] + ([reference[1]] if reference else [])
    if xs:
        ax.set_xlim(0, max(xs) * 1.3)
    leg = ax.legend(fontsize=8, loc="best", markerscale=0.5)
    for h in leg.legend_handles:
        if hasattr(h, "set_sizes"):
            h.set_sizes([40])
    if note:
        fig.text(0.01, 0.01, note, fontsize=8, color="dimgray")
    fig.tight_layout(rect=(0, 0.03 if note else 0, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


# ------------------------------------------------------------------------------------------------ sweep
