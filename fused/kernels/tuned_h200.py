"""Configs measured on the H200 (the `picks` of `python -m fused bench`, bench.json "tuned"). Keys:
(kernel, M bucket, N, K, gated, [a8,] weight dtype), all as strings -> launch config. Missing keys are
tuned on first use. fp8 GEMM entries are left to tune: their loads changed after this table was taken."""

TUNED: dict = {
    ('w8_gemm', '1024', '14336', '4096', 'True', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8},
    ('w8_gemm', '1024', '16384', '4096', 'False', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4},
    ('w8_gemm', '1024', '4096', '14336', 'False', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4},
    ('w8_gemm', '1024', '4096', '16384', 'False', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4},
    ('w8_gemm', '128', '14336', '4096', 'True', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8},
    ('w8_gemm', '128', '16384', '4096', 'False', 'True', 'torch.int8'): {'BLOCK_M': 64, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4},
    ('w8_gemm', '128', '4096', '14336', 'False', 'True', 'torch.int8'): {'BLOCK_M': 64, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4},
    ('w8_gemm', '128', '4096', '16384', 'False', 'True', 'torch.int8'): {'BLOCK_M': 64, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4},
    ('w8_gemm', '8192', '14336', '4096', 'True', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8},
    ('w8_gemm', '8192', '16384', '4096', 'False', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4},
    ('w8_gemm', '8192', '4096', '14336', 'False', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4},
    ('w8_gemm', '8192', '4096', '16384', 'False', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4},
}
