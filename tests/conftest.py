"""Test harness: on a machine without an NVIDIA GPU, Triton kernels run in Triton's CPU interpreter.

TRITON_INTERPRET must be set before triton is first imported, hence here, before anything else.
"""
import os

if not os.path.exists("/dev/nvidiactl"):
    os.environ.setdefault("TRITON_INTERPRET", "1")
# tests use the heuristic kernel configs: timing every candidate for every test shape costs minutes
os.environ.setdefault("FUSED_TUNE", "0")

import pytest  # noqa: E402
import torch  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (runs on the H200)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture(autouse=True)
def _bounds():
    """Under the interpreter every kernel launch of every test is bounds-checked (tests/bounds.py): an
    active lane outside the launch's tensor arguments fails the test (on the GPU: an illegal address)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        yield
        return
    from bounds import checked_bounds

    with checked_bounds():
        yield



@pytest.fixture
def poisoned(monkeypatch):
    """torch.empty starts floats as NaN and integers (int8 / fp8 bytes included) as 77: an element a kernel never
    writes shows up in a bit-for-bit comparison."""
    real = torch.empty

    def empty(*a, **k):
        t = real(*a, **k)
        if t.numel():
            t.view(torch.uint8).fill_(77) if t.element_size() == 1 else t.fill_(float("nan") if t.is_floating_point()
                                                                                  else 77)
        return t
    monkeypatch.setattr(torch, "empty", empty)
