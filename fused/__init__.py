"""fused: fused quantized MLP kernels, their torch.library ops, modules, torchao configs and the CLI.

    from torchao.quantization import quantize_
    import fused
    quantize_(model, fused.FusedInt8MLP())                          # every nn.Linear
    quantize_(model, fused.FusedInt8MLP(), filter_fn=fused.is_mlp)  # whole MLP blocks
    fused.explain(model)
    quantize_(model, fused.FusedInt8MLP(sparsity="2:4"))           # 2:4 packed (magnitude-pruned)
    quantize_(model, fused.FusedNarrowMLPConfig("fp16"), filter_fn=fused.is_narrow_mlp)  # one launch
    fused.profile(model, x)                                         # launches, time, idle, memory, paths
    s = fused.calibrate_smoothing(model, batches)                   # SmoothQuant factors for W8A8
    quantize_(model, fused.FusedInt8MLP(weight_only=False, smoothing=s))
    h = fused.calibrate_gptq(model, batches)                        # GPTQ rounding (fp8 gains most)
    quantize_(model, fused.FusedFloat8MLP(gptq=h))
    fused.save(model, "model.safetensors"); fused.load("model.safetensors", converted_model)
"""
from fused._quiet import quiet_torchao_import

quiet_torchao_import()  # torchao's import logs about its CUDA-only extensions: not ours to show on every import

from fused.configs import FusedBF16MLP, FusedFloat8MLP, FusedInt8MLP, is_mlp, mlp_kind, quantize
from fused.checkpoint import load, save
from fused.gptq import calibrate_gptq
from fused.smoothing import calibrate_smoothing
from fused.explain import explain
from fused.modules import FusedGatedLinear, FusedGatedMLP, FusedLinear, FusedMLP, pack_for_cpu
from fused.narrow import FusedNarrowMLP, FusedNarrowMLPConfig, is_narrow_mlp
from fused.sparse_modules import FusedSparseGatedLinear, FusedSparseLinear
from fused.profile import profile  # the function hides the submodule; it carries .compare, .before_after
from fused import ops  # noqa: F401  (registers the torch.library ops)
from fused import compile_passes

compile_passes.install()  # torch.compile: activations and gate/up pairs of per-Linear modules into our ops

__version__ = "0.1.0"

__all__ = [
    "FusedBF16MLP",
    "FusedFloat8MLP",
    "FusedGatedLinear",
    "FusedGatedMLP",
    "FusedInt8MLP",
    "FusedLinear",
    "FusedMLP",
    "FusedNarrowMLP",
    "FusedNarrowMLPConfig",
    "FusedSparseGatedLinear",
    "FusedSparseLinear",
    "calibrate_gptq",
    "calibrate_smoothing",
    "explain",
    "is_mlp",
    "is_narrow_mlp",
    "load",
    "mlp_kind",
    "pack_for_cpu",
    "profile",
    "quantize",
    "save",
]
