"""The interpreter's bounds check (tests/bounds.py, on for every test by conftest): it must catch an active
lane past a tensor's storage, and let masked-off lanes and lanes inside a view's storage through."""
import os

import pytest
import torch

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter only")


def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def k(x_ptr, y_ptr, n, EXTRA: tl.constexpr, MASKED: tl.constexpr, ATOMIC: tl.constexpr):
        o = tl.arange(0, 16)
        if MASKED:
            v = tl.load(x_ptr + o, mask=o < n + EXTRA, other=0.0)
        else:
            v = tl.load(x_ptr + o)
        if ATOMIC:
            tl.atomic_add(y_ptr + o, v, mask=o < n + EXTRA)
        else:
            tl.store(y_ptr + o, v, mask=o < n + EXTRA)

    return k


def test_bounds_check_catches_and_passes():
    """No explicit context: this also shows conftest's autouse fixture is on."""
    k = _kernel()
    y = torch.zeros(10)
    k[(1,)](torch.randn(64)[:10], y, 10, 0, True, False)  # in bounds
    k[(1,)](torch.randn(64)[:10], y, 10, 0, False, False)  # 16 lanes of a 10-view: inside its 64 storage
    assert y.abs().sum() > 0  # the in-bounds launches ran
    x = torch.randn(10)
    for xs, ys, extra, masked, atomic in ((x, y, 1, True, False),  # one load lane past x
                                          (x, torch.zeros(16), 0, False, False),  # unmasked load past x
                                          (torch.randn(16), y, 1, True, True)):  # one atomic lane past y
        with pytest.raises(Exception, match="OutOfBounds.*outside every tensor argument"):
            k[(1,)](xs, ys, 10, extra, masked, atomic)


def test_narrow_mlp_every_config_in_bounds():
    """The narrow MLP's candidates on the test architectures (a GPU run of the 8-layer one faulted on
    2026-12-01; under the interpreter no lane leaves its buffers: the fault was a wgmma miscompile of the
    N-major weight layout, see fused.kernels.narrow_mlp)."""
    from fused.kernels.narrow_mlp import candidates, narrow_mlp, weight_smem_bytes
    from fused.narrow import FusedNarrowMLP, padded_width
    from test_narrow_mlp import ARCHS, make_seq

    for dims, acts in (ARCHS["8-layers"], ARCHS["3-16-37-5"]):
        mod = FusedNarrowMLP.from_module(make_seq(dims, acts), "fp16")
        x = torch.randn(300, dims[0] + 3, dtype=torch.float16)[:, 1:dims[0] + 1]  # strided rows
        pads = [padded_width(d) for d in dims]
        for cfg in candidates(max(pads), weight_smem_bytes(pads)):
            narrow_mlp(x, mod.weights, mod.params, mod.dims, mod.acts, config=cfg)
