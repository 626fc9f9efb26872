"""The cached launcher (fused.kernels.launch): same results as Triton's own launch path, and a new
compilation whenever Triton would specialize differently (alignment, ints equal to 1 or divisible by 16)."""
import pytest
import torch

from fused.kernels import launch
from fused.reference import gated_ref, linear_ref
from lowbit import quantize_weight, sqnr


def test_key_separates_what_triton_specializes_on():
    a = torch.empty(64, dtype=torch.int8)
    k = launch._key
    assert k([a[0:]]) != k([a[1:]])  # 16-byte aligned vs not
    assert k([a]) != k([a.view(torch.uint8)])
    assert k([1]) != k([2]) != k([16]) != k([17])
    assert k([2 ** 31]) != k([2 ** 31 - 16])  # i64 vs i32
    assert k([True]) != k([1])
    assert k([None]) != k([0])
    assert k([a, 3]) == k([a[0:], 3])  # same alignment, same value: same launcher


def test_hook_detection():
    class Chain:
        def __init__(self, calls):
            self.calls = calls

    assert not launch._installed(None) and not launch._installed(Chain([]))
    assert launch._installed(Chain([print])) and launch._installed(print)


def _case(M, N, K, fmt="int8", device="cuda"):
    w = torch.randn(N, K, device=device)
    q, s = quantize_weight(w, fmt)
    x = torch.randn(M, K, device=device, dtype=torch.bfloat16)
    return x, q, s


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
def test_cached_launch_matches_jit_launch(fmt, monkeypatch):
    from fused.kernels.w8_gemm import w8_gemm
    from fused.kernels.w8a16_gemv import w8a16_gemv

    assert launch.ENABLED
    for M, fn in ((1, w8a16_gemv), (5, w8a16_gemv), (300, w8_gemm)):
        x, q, s = _case(M, 2 * 96, 272, fmt)
        first = fn(x, q, s, None, "silu", True)  # compiles, or a cache hit from an earlier test
        second = fn(x, q, s, None, "silu", True)  # the cached launcher
        monkeypatch.setattr(launch, "ENABLED", False)
        slow = fn(x, q, s, None, "silu", True)  # Triton's own launch path
        monkeypatch.setattr(launch, "ENABLED", True)
        assert torch.equal(first, second) and torch.equal(second, slow), M
        assert sqnr(gated_ref(x, q, s, None, "silu"), second) > 40


@pytest.mark.cuda
def test_cached_launch_respects_alignment_and_unit_strides():
    from fused.kernels.w8a16_gemv import w8a16_gemv

    x, q, s = _case(1, 80, 272)
    base = torch.randn(3, 274, device="cuda", dtype=torch.bfloat16)
    views = [x, base[:1, 1:273], base[:, 2:].t().contiguous().t()[:1, :272], base[1:2, :272]]
    for v in views * 2:  # twice: the second round runs from the cache
        y = w8a16_gemv(v, q, s, None, "gelu")
        assert sqnr(linear_ref(v, q, s, None, "gelu"), y) > 40, (v.stride(), v.data_ptr() % 16)
