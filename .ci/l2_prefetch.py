"""An experiment (nineteenth session, `.ci/diag.py l2pf`): prefetch a weight into L2 ahead of its GEMM with
cp.async.bulk.prefetch.L2 (sm_90) and an evict_last policy. Not used by the package until the H200 says it pays.
`python .ci/l2_prefetch.py` compiles the kernel for sm_90 (no GPU) and prints whether the PTX has the prefetch."""
import torch
import triton
import triton.language as tl

CHUNK = 1 << 16  # bytes per bulk prefetch (16-byte aligned, a multiple of 16)


@triton.jit
def _l2_prefetch(ptr, n_bytes, CHUNK: tl.constexpr):
    # one 32-thread program, one chunk per thread; bulk prefetches are fire-and-forget (no wait, no result)
    off = (tl.program_id(0) * 32 + tl.arange(0, 32)).to(tl.int64) * CHUNK
    tl.inline_asm_elementwise(
        f"""{{ .reg .b64 pol; .reg .pred p;
        setp.lt.s64 p, $2, $3;
        createpolicy.fractional.L2::evict_last.b64 pol, 1.0;
        @p cp.async.bulk.prefetch.L2.global.L2::cache_hint [$1], {CHUNK}, pol;
        mov.u32 $0, 0; }}""",
        "=r,l,l,l", [ptr + off, off, off * 0 + n_bytes], dtype=tl.int32, is_pure=False, pack=1)


def set_persisting_l2(nbytes: int) -> int:
    """The current context's L2 set-aside for persisting (evict_last) lines (driver API,
    CU_LIMIT_PERSISTING_L2_CACHE_SIZE): the driver clamps it to the device's maximum; returns what it holds now.
    With 0 (the default) an evict_last hint may earn the lines nothing over normal ones: the diag times both."""
    import ctypes
    torch.cuda.init()
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuCtxSetLimit(ctypes.c_int(6), ctypes.c_size_t(nbytes))
    got = ctypes.c_size_t(0)
    cuda.cuCtxGetLimit(ctypes.byref(got), ctypes.c_int(6))
    return got.value


def prefetch(w: torch.Tensor, frac: float) -> None:
    """Prefetch the first ``frac`` of ``w``'s bytes (whole chunks) into L2."""
    n = int(w.numel() * w.element_size() * frac) // CHUNK * CHUNK
    if n:
        _l2_prefetch[(triton.cdiv(n // CHUNK, 32),)](w.view(torch.uint8), n, CHUNK=CHUNK, num_warps=1)


if __name__ == "__main__":
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    from sm90_compile import compile_sm90
    k = compile_sm90(_l2_prefetch, {"ptr": "*u8"}, {"n_bytes": 1 << 20}, {"CHUNK": CHUNK}, num_warps=1)
    print("prefetch in PTX:", "cp.async.bulk.prefetch.L2" in k["ptx"])
