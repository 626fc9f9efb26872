"""torch.library custom ops wrapping the dispatch: what torch.compile and torch.export see.

Opaque ``custom_op``s (not ``triton_op``): the M-dependent kernel choice happens at run time inside the
op, so a compiled graph never specialises on M and never recompiles across batch sizes.
Inference only: a backward through them raises (never a silently wrong gradient).
"""
from __future__ import annotations

from typing import List, Optional

import torch
from torch import Tensor

from fused import dispatch


@torch.library.custom_op("fusedmlp::linear", mutates_args=())
def linear(x: Tensor, qweight: Tensor, wscale: Tensor, bias: Optional[Tensor], act: str, dynamic: bool) -> Tensor:
    return dispatch.linear(x, qweight, wscale, bias, act, dynamic)


@linear.register_fake
def _linear_fake(x, qweight, wscale, bias, act, dynamic):
    return x.new_empty(*x.shape[:-1], qweight.shape[0])


@torch.library.custom_op("fusedmlp::gated", mutates_args=())
def gated(x: Tensor, qweight: Tensor, wscale: Tensor, bias: Optional[Tensor], act: str, dynamic: bool) -> Tensor:
    return dispatch.gated(x, qweight, wscale, bias, act, dynamic)


@gated.register_fake
def _gated_fake(x, qweight, wscale, bias, act, dynamic):
    return x.new_empty(*x.shape[:-1], qweight.shape[0] // 2)


@torch.library.custom_op("fusedmlp::gated_pair", mutates_args=())
def gated_pair(x: Tensor, wg: Tensor, sg: Tensor, bg: Optional[Tensor], wu: Tensor, su: Tensor, bu: Optional[Tensor],
               act: str, dynamic: bool) -> Tensor:
    """``gated`` with gate and up in separate tensors: what fused.compile_passes makes of per-Linear modules."""
    return dispatch.gated_pair(x, wg, sg, bg, wu, su, bu, act, dynamic)


@gated_pair.register_fake
def _gated_pair_fake(x, wg, sg, bg, wu, su, bu, act, dynamic):
    return x.new_empty(*x.shape[:-1], wg.shape[0])


@torch.library.custom_op("fusedmlp::sparse24_linear", mutates_args=())
def sparse24_linear(x: Tensor, values: Tensor, meta: Tensor, wscale: Optional[Tensor], bias: Optional[Tensor],
                    act: str, dynamic: bool) -> Tensor:
    return dispatch.sparse24_linear(x, values, meta, wscale, bias, act, dynamic)


@sparse24_linear.register_fake
def _sparse24_linear_fake(x, values, meta, wscale, bias, act, dynamic):
    return x.new_empty(*x.shape[:-1], values.shape[0])


@torch.library.custom_op("fusedmlp::sparse24_gated", mutates_args=())
def sparse24_gated(x: Tensor, values: Tensor, meta: Tensor, wscale: Optional[Tensor], bias: Optional[Tensor],
                   act: str, dynamic: bool) -> Tensor:
    return dispatch.sparse24_gated(x, values, meta, wscale, bias, act, dynamic)


@sparse24_gated.register_fake
def _sparse24_gated_fake(x, values, meta, wscale, bias, act, dynamic):
    return x.new_empty(*x.shape[:-1], values.shape[0] // 2)


@torch.library.custom_op("fusedmlp::narrow_mlp", mutates_args=())
def narrow_mlp(x: Tensor, weights: Tensor, params: Tensor, dims: List[int], acts: str) -> Tensor:
    """A whole narrow MLP in one op: packed weights/params (fused.narrow.pack_narrow), real widths
    ``dims`` [K_in, N_1, ..., N_L] and the activations, one per layer, comma-joined ("relu,relu,none":
    the schema has no list of strings)."""
    return dispatch.narrow_mlp(x, weights, params, dims, acts.split(","))


@narrow_mlp.register_fake
def _narrow_mlp_fake(x, weights, params, dims, acts):
    return x.new_empty(*x.shape[:-1], dims[-1])


@torch.library.custom_op("fusedmlp::mlp_block", mutates_args=())
def mlp_block(x: Tensor, w1: Tensor, s1: Tensor, b1: Optional[Tensor], w2: Tensor, s2: Tensor, b2: Optional[Tensor],
              act: str, gated: bool, dynamic: bool, smooth1: Optional[Tensor], smooth2: Optional[Tensor]) -> Tensor:
    """A whole FusedGatedMLP (gated, w1 = stacked gate/up) or FusedMLP (fc1-act-fc2) block: one
    decode_block launch at small M on CUDA, the two layers' own paths otherwise (chosen at run time)."""
    return dispatch.mlp_block(x, w1, s1, b1, w2, s2, b2, act, gated, dynamic, smooth1, smooth2)


@mlp_block.register_fake
def _mlp_block_fake(x, w1, s1, b1, w2, s2, b2, act, gated, dynamic, smooth1, smooth2):
    return x.new_empty(*x.shape[:-1], w2.shape[0])


@torch.library.custom_op("fusedmlp::sparse24_mlp_block", mutates_args=())
def sparse24_mlp_block(x: Tensor, v1: Tensor, m1: Tensor, s1: Optional[Tensor], b1: Optional[Tensor], v2: Tensor,
                       m2: Tensor, s2: Optional[Tensor], b2: Optional[Tensor], act: str, gated: bool,
                       dynamic: bool) -> Tensor:
    """A whole 2:4 W8A8 block (packed layers): the two layers' own routes, h handed over quantized."""
    return dispatch.sparse24_mlp_block(x, v1, m1, s1, b1, v2, m2, s2, b2, act, gated, dynamic)


@sparse24_mlp_block.register_fake
def _sparse24_mlp_block_fake(x, v1, m1, s1, b1, v2, m2, s2, b2, act, gated, dynamic):
    return x.new_empty(*x.shape[:-1], v2.shape[0])


def _no_backward(ctx, grad):
    raise RuntimeError(
        "fusedmlp ops are inference-only: no backward. Run the converted model under torch.no_grad(), "
        "or train the unconverted model.")


for _op in (linear, gated, sparse24_linear, sparse24_gated, narrow_mlp, mlp_block, sparse24_mlp_block):
    _op.register_autograd(_no_backward)
gated_pair.register_autograd(_no_backward)
