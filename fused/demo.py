"""The embedded default model and the demo: convert it with each config, compare accuracy, size, speed."""
from __future__ import annotations

import copy
import time

import torch
from torch import nn

from lowbit import sqnr


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class LlamaMLP(nn.Module):
    """Same attribute names as transformers' LlamaMLP, so fused.is_mlp treats it alike."""

    def __init__(self, d, h):
        super().__init__()
        self.gate_proj = nn.Linear(d, h, bias=False)
        self.up_proj = nn.Linear(d, h, bias=False)
        self.down_proj = nn.Linear(h, d, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    """A layer holding an MLP block as ``.mlp``, as a decoder layer does: quantize_ replaces children,
    never the root, so a bare block is converted inside this."""

    def __init__(self, mlp: nn.Module):
        super().__init__()
        self.mlp = mlp

    def forward(self, x):
        return self.mlp(x)


class Block(nn.Module):
    def __init__(self, d, mlp):
        super().__init__()
        self.norm = RMSNorm(d)
        self.mlp = mlp

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class DemoModel(nn.Module):
    """A small Llama-shaped stack of pre-norm residual MLP blocks (gated SiLU) and one GPT-style
    GELU-tanh block, built in code from a fixed seed."""

    def __init__(self, d=512, h=1408, layers=4, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        blocks = [Block(d, LlamaMLP(d, h)) for _ in range(layers)]
        blocks.append(Block(d, nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))))
        self.blocks = nn.Sequential(*blocks)
        self.norm = RMSNorm(d)
        with torch.no_grad():
            for p in self.parameters():
                if p.dim() == 2:  # Llama-like init scale
                    p.copy_(torch.randn(p.shape, generator=g) * p.shape[1] ** -0.5)
                elif p.dim() == 1 and p.shape[0] != d:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.02)

    def forward(self, x):
        return self.norm(self.blocks(x))


def demo_configs():
    import fused

    return {
        "int8 W8A16 (per-Linear)": (fused.FusedInt8MLP(), False),
        "int8 W8A16 (blocks)": (fused.FusedInt8MLP(), True),
        "int8 W8A8 (blocks)": (fused.FusedInt8MLP(weight_only=False), True),
        "fp8 W8A8 (blocks)": (fused.FusedFloat8MLP(), True),
        "fp8 weight-only (blocks)": (fused.FusedFloat8MLP(weight_only=True), True),
    }


def time_forward(model, x, min_iters=15, min_seconds=0.3) -> float:
    """Median ms per forward (CUDA-synchronised on GPU), after 3 warm-up calls, over at least ``min_iters`` calls and
    ``min_seconds``: enough that two runs agree within ~10% on an idle machine."""
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    with torch.no_grad():
        for _ in range(3):
            model(x)
        times = []
        start = time.perf_counter()
        while len(times) < min_iters or time.perf_counter() - start < min_seconds:
            sync()
            t = time.perf_counter()
            model(x)
            sync()
            times.append((time.perf_counter() - t) * 1e3)
            if len(times) >= 1000:
                break
    times.sort()
    return times[len(times) // 2]


def weight_mib(model) -> float:
    """MiB of the weights (2-D tensors), scales and biases, plus the copies the CPU path derives and keeps from them
    (fused.cpu.cached_bytes: oneDNN's reordered int8 weights, cast scales), as `fused.explain` counts them."""
    from fused import cpu

    total = 0
    for m in model.modules():
        if isinstance(getattr(m, "qweight", None), torch.Tensor):
            total += cpu.cached_bytes(m.qweight, m.scale, m.bias)
        for name, t in list(m._parameters.items()) + list(m._buffers.items()):
            if cpu.packed_only(t):  # fused.pack_for_cpu's stand-in: its weight is the copy counted above
                total += t.untyped_storage().nbytes()
            elif t is not None and (t.dim() == 2):
                total += t.numel() * t.element_size()
            elif t is not None and name in ("scale", "bias"):
                total += t.numel() * t.element_size()
    return total / 2**20


def run_demo(device: str | None = None, tokens: int = 16, d=512, h=1408, layers=4) -> list[dict]:
    import fused

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    base = DemoModel(d, h, layers).to(device=device, dtype=torch.bfloat16).eval()
    x = torch.randn(tokens, d, device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        ref = base(x)
    # decode (1 token) beside the batch: on a CPU the int8 configs gain there, where a forward reads every weight for
    # one token; at 16 tokens this model's small weights (in cache) leave bf16's one oneDNN call per Linear ahead
    rows = [{"config": "bf16 (unconverted)", "weight_MiB": weight_mib(base), "sqnr_db": float("inf"),
             "ms": time_forward(base, x), "ms_1": time_forward(base, x[:1])}]
    # no fused.pack_for_cpu rows: every weight here is under fused.cpu.ONEDNN_MIN_BYTES, which it leaves plain
    for name, (cfg, blocks) in demo_configs().items():
        model = copy.deepcopy(base)
        fused.quantize(model, cfg, blocks=blocks)
        with torch.no_grad():
            out = model(x)
        rows.append({"config": name, "weight_MiB": weight_mib(model), "sqnr_db": sqnr(ref, out),
                     "ms": time_forward(model, x), "ms_1": time_forward(model, x[:1])})
    return rows


def format_rows(rows, device, tokens: int = 16) -> str:
    lines = [f"Demo model: 4 gated SiLU blocks + 1 GELU block (d 512), bf16, {tokens} tokens, on {device}",
             f"| config | weight MiB | SQNR vs bf16 (dB) | ms / forward ({tokens} tokens) | ms / forward (1 token) |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f'| {r["config"]} | {r["weight_MiB"]:.2f} | {r["sqnr_db"]:.1f} | {r["ms"]:.2f} '
                     f'| {r["ms_1"]:.2f} |')
    return "\n".join(lines)
