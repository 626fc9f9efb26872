"""The read-floor kernel (fused.kernels.read_floor): every word read, against the reference, on odd shapes."""
import pytest
import torch

from fused.kernels.read_floor import CONFIGS, read_rows, read_rows_ref


@pytest.mark.parametrize("R, C", [(1, 1), (3, 17), (37, 100), (16, 1024)])
def test_read_rows_matches_reference(R, C):
    g = torch.Generator().manual_seed(R * 1000 + C)
    w = torch.randint(-2**31, 2**31 - 1, (R, C), dtype=torch.int32, generator=g)
    ref = read_rows_ref(w)
    for cfg in (CONFIGS[0], CONFIGS[-1]):
        out = torch.full((R,), 12345, dtype=torch.int32)  # poisoned
        assert torch.equal(read_rows(w, cfg, out=out), ref), cfg
    assert torch.equal(read_rows(w, evict="evict_first"), ref) and torch.equal(read_rows(w, evict=""), ref)
    # a row view with a larger stride, and one word changed: the result must follow it
    big = torch.randint(-2**31, 2**31 - 1, (R, C + 5), dtype=torch.int32, generator=g)
    v = big[:, :C]
    assert torch.equal(read_rows(v), read_rows_ref(v))
    v[R - 1, C - 1] ^= 1
    assert read_rows(v)[R - 1] == read_rows_ref(v)[R - 1]


def test_read_rows_reference_is_xor():
    w = torch.tensor([[1, 2, 4], [7, 7, 0]], dtype=torch.int32)
    assert read_rows_ref(w).tolist() == [7, 0]


def test_read_rows_bad_input():
    with pytest.raises(ValueError, match="int32"):
        read_rows(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="unit column stride"):
        read_rows(torch.zeros(4, 3, dtype=torch.int32).t())
    assert read_rows(torch.zeros(0, 4, dtype=torch.int32)).shape == (0,)
    assert read_rows(torch.ones(2, 0, dtype=torch.int32)).tolist() == [0, 0]


def test_bench_floor_rows_cpu_skip_and_markdown():
    """`bench --floor` measures on CUDA only (a CPU read time is no floor for these kernels); a floor row, which
    has no plain-call time and no SQNR, shows as a number in the GPU table and "–" (not "err") elsewhere."""
    from fused import bench

    logged = []
    base = bench.make_block("llama", 64, 96, "cpu")
    assert bench.floor_rows("llama", base, [1, 16], torch.device("cpu"), logged.append) == []
    assert "CUDA only" in logged[0]
    rows = [bench.Row("llama", "floor: read 8-bit weights once", 1, 49.6, None, None, None, 168.0, "a pure read"),
            bench.Row("llama", "ours int8 W8A16", 1, 58.8, 59.8, 68.8, 40.0, 168.0, ""),
            bench.Row("llama", "ours int8 W8A16", 128, 113.8, 117.0, 35.8, 35.0, 168.0, ""),
            bench.Row("llama", "ours fp8 W8A8", 1, None, None, None, None, 0.0, "error: RuntimeError: x")]
    gpu = bench.markdown(rows, "gpu_us")
    assert "| floor: read 8-bit weights once | 49.6 | – | 168 |" in gpu
    assert "| ours fp8 W8A8 | err | – |" in gpu
    assert "| floor: read 8-bit weights once | – | – | 168 |" in bench.markdown(rows, "plain_us")
