"""torch.library custom ops wrapping the dispatch: what torch.compile and torch.export see.

Opaque ``custom_op``s (not ``triton_op``): the M-dependent kernel choice happens at run time inside the
op, so a compiled graph never specialises on M and never recompiles across batch sizes.
Inference only: a backward through them raises (never a silently wrong gradient).
"""
from __future__ import annotations

from typing import Optional

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


def _no_backward(ctx, grad):
    raise RuntimeError(
        "fusedmlp ops are inference-only: no backward. Run the converted model under torch.no_grad(), "
        "or train the unconverted model.")


for _op in (linear, gated, sparse24_linear, sparse24_gated):
    _op.register_autograd(_no_backward)
