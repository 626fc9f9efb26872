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


# The slowest interpreter and sm_90-compile tests (5-45 s each on a 2-core CPU): marked slow, so the README's test
# command (-m "not slow") stays under 8 minutes there; .ci/run runs them in a step of their own after it.
SLOW = ("for_sm90", "test_w8a16_split_candidate_matches_reference", "test_w8_mma_matches_reference",
        "test_tma_tiles_equal_w8_gemm_interpreted", "test_demo_prints_the_table", "test_read_rows_matches_reference",
        "block_handoff_matches_the_two_layers", "test_cublas_fp8_rowwise", "test_chain_shapes_views_and_splits",
        "test_mma_pairs_equal_plane_sets", "test_gemv_loop_variants_interpreted", "test_split_gemm_compiles")


def pytest_collection_modifyitems(config, items):
    slow = pytest.mark.slow
    for item in items:
        if any(s in item.name for s in SLOW):
            item.add_marker(slow)
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
