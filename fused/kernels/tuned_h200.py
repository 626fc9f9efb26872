"""Configs measured on the H200: the `picks` of `python -m fused bench` (bench.json "tuned"), runs of
2026-11-30. Keys: (kernel, M bucket, N, K, gated, [a8,] weight dtype), all as strings -> launch config.
Missing keys are tuned on first use (`fused.kernels.tuning`). The int8 M=1 GEMV rows: `.ci/diag.py gemv` of
2026-12-01 (every candidate, L2 flushed): the 16-row tensor-core tile with 15 rows masked off ties the
broadcast-and-sum loop on gate/up and beats it on the down projection (26.1 µs). fp8 M=1 keeps the
broadcast-and-sum loop: block 61.3 µs vs 65.2 with the 16-row tile (same day, two interleaved rounds).
The M=1 GEMV rows (dense and int8 2:4) were retuned on 2026-12-02 with the pipelined (STAGES) candidates (`bash
.ci/h200_next.sh seventeenth1`, fp8 2:4 in `seventeenth2`): int8 W8A16 block 65.2 µs, fp8 60.5, int8 2:4 59.0,
fp8 2:4 W8A8 57.8 in those runs. The int8 M=1 rows take CVT="prmt" since the nineteenth session (`bash
.ci/h200_next.sh prmt`, FUSED_RETUNE=1: block 64.6 -> 63.4 µs); the M=16 down / fp8 gate-up rows are the `retune8`
picks of that session. The M=1 rows and the fp8 M=16 rows were retuned on 2026-12-03 with the weights' L2
evict_first policy on (`bash .ci/h200_next.sh evict2`): block int8 W8A16 M=1 59.3 µs, fp8 W8A16 / W8A8 58.2."""

# The W8A16 gated split tiles at M=128: 256-row stacked tiles (all 128 tokens' planes), retuned on the H200 on
# 2026-12-05 (`bash .ci/h200_next.sh split256`, FUSED_RETUNE=w8_gemm): int8 68.58 vs 70.85 µs for the 64x128 pick
# before, fp8 64.11 vs 65.95; the down projections keep their 128x64 stacked split-2 picks (40.3 / 38.8, the 256-row
# tiles not among the 3 fastest).
TUNED: dict = {
    ('w8_gemm', '1024', '14336', '4096', 'True', 'False', 'torch.float8_e4m3fn'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 64, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4},
    ('w8_gemm', '1024', '14336', '4096', 'True', 'False', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 64, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4},
    ('w8_gemm', '1024', '14336', '4096', 'True', 'True', 'torch.float8_e4m3fn'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '1024', '14336', '4096', 'True', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '1024', '16384', '4096', 'False', 'False', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 64, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4},
    ('w8_gemm', '1024', '16384', '4096', 'False', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4},
    ('w8_gemm', '1024', '4096', '14336', 'False', 'False', 'torch.float8_e4m3fn'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 64, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8},
    ('w8_gemm', '1024', '4096', '14336', 'False', 'False', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 64, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8},
    ('w8_gemm', '1024', '4096', '14336', 'False', 'True', 'torch.float8_e4m3fn'): {'BLOCK_M': 128, 'BLOCK_N': 256, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 8},
    ('w8_gemm', '1024', '4096', '14336', 'False', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4},
    ('w8_gemm', '1024', '4096', '16384', 'False', 'False', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 64, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8},
    ('w8_gemm', '1024', '4096', '16384', 'False', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4},
    ('w8_gemm', '8192', '14336', '4096', 'True', 'False', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 64, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4},
    ('w8_gemm', '8192', '14336', '4096', 'True', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '8192', '16384', '4096', 'False', 'False', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 64, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4},
    ('w8_gemm', '8192', '16384', '4096', 'False', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4},
    ('w8_gemm', '8192', '4096', '14336', 'False', 'False', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 64, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4},
    ('w8_gemm', '8192', '4096', '14336', 'False', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4},
    ('w8_gemm', '8192', '4096', '16384', 'False', 'False', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 64, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4},
    ('w8_gemm', '8192', '4096', '16384', 'False', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4},
    ('w8a16_gemv', '16', '14336', '4096', 'True', 'torch.float8_e4m3fn'): {'BLOCK_M': 16, 'BLOCK_N': 32, 'BLOCK_K': 256, 'SPLIT_K': 1, 'num_warps': 4, 'CVT': 'magic', 'JOINT': True},
    ('w8a16_gemv', '16', '14336', '4096', 'True', 'torch.int8'): {'BLOCK_M': 16, 'BLOCK_N': 32, 'BLOCK_K': 256, 'SPLIT_K': 1, 'num_warps': 4, 'CVT': 'native'},
    ('w8a16_gemv', '16', '4096', '14336', 'False', 'torch.float8_e4m3fn'): {'BLOCK_M': 16, 'BLOCK_N': 32, 'BLOCK_K': 256, 'SPLIT_K': 4, 'num_warps': 4, 'CVT': 'magic', 'PERSISTENT': 4},
    ('w8a16_gemv', '16', '4096', '14336', 'False', 'torch.int8'): {'BLOCK_M': 16, 'BLOCK_N': 32, 'BLOCK_K': 256, 'SPLIT_K': 4, 'num_warps': 4, 'CVT': 'native'},
    # twenty-fifth session (`bash .ci/h200_next.sh evict2`, examples/results/h200/twentyfifth/retune_bench.json),
    # retuned with the L2 evict_first policy on: int8 gate/up 64x256 split 2 38.9 µs vs the twenty-fourth session's
    # 16x512 tile (w8a16_gemv._fine_candidates) 40.0; fp8 gate/up 37.8 vs 42.1 for the cp.async (STAGES) loop
    ('w8a16_gemv', '1', '14336', '4096', 'True', 'torch.int8'): {'BLOCK_M': 1, 'BLOCK_N': 64, 'BLOCK_K': 256, 'SPLIT_K': 2, 'num_warps': 8, 'CVT': 'prmt'},
    ('w8a16_gemv', '1', '4096', '14336', 'False', 'torch.int8'): {'BLOCK_M': 1, 'BLOCK_N': 64, 'BLOCK_K': 256, 'SPLIT_K': 8, 'num_warps': 8, 'CVT': 'prmt'},
    ('w8a16_gemv', '1', '14336', '4096', 'True', 'torch.float8_e4m3fn'): {'BLOCK_M': 1, 'BLOCK_N': 64, 'BLOCK_K': 256, 'SPLIT_K': 2, 'num_warps': 8, 'CVT': 'magic'},
    ('w8a16_gemv', '1', '4096', '14336', 'False', 'torch.float8_e4m3fn'): {'BLOCK_M': 1, 'BLOCK_N': 64, 'BLOCK_K': 256, 'SPLIT_K': 8, 'num_warps': 4, 'CVT': 'magic', 'PERSISTENT': 4},
    # split activations at M=17..64 (fourteenth session, 2026-12-01, `bash .ci/h200_next.sh fourteenth1`, the run with
    # STACK candidates; examples/results/h200/fourteenth/FUSED_SPLIT_STACK1.json "tuned", every candidate timed)
    ('w8_gemm', '32', '14336', '4096', 'True', 'True', 'torch.int8', 'split'): {'BLOCK_M': 32, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4, 'SPLIT_K': 1},
    ('w8_gemm', '32', '4096', '14336', 'False', 'True', 'torch.int8', 'split'): {'BLOCK_M': 32, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4, 'SPLIT_K': 4},
    ('w8_gemm', '32', '14336', '4096', 'True', 'True', 'torch.float8_e4m3fn', 'split'): {'BLOCK_M': 64, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '32', '4096', '14336', 'False', 'True', 'torch.float8_e4m3fn', 'split'): {'BLOCK_M': 64, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4, 'STACK': True, 'SPLIT_K': 4},
    ('w8_gemm', '64', '14336', '4096', 'True', 'True', 'torch.int8', 'split'): {'BLOCK_M': 64, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '64', '4096', '14336', 'False', 'True', 'torch.int8', 'split'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4, 'STACK': True, 'SPLIT_K': 4},
    ('w8_gemm', '64', '14336', '4096', 'True', 'True', 'torch.float8_e4m3fn', 'split'): {'BLOCK_M': 64, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '64', '4096', '14336', 'False', 'True', 'torch.float8_e4m3fn', 'split'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4, 'STACK': True, 'SPLIT_K': 4},
    # M=128 (bench of 2026-12-01, second session): the 3-stage 128x64 gate/up tile fits 2 CTAs per SM (one wave)
    ('w8_gemm', '128', '14336', '4096', 'True', 'True', 'torch.float8_e4m3fn'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '128', '4096', '14336', 'False', 'True', 'torch.float8_e4m3fn'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4, 'SPLIT_K': 4},
    ('w8_gemm', '128', '14336', '4096', 'True', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '128', '4096', '14336', 'False', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4, 'SPLIT_K': 4},
    # the split down projections at M=128: the 128-row STACK tile (fifteenth session, `bash .ci/h200_next.sh fifteenth2`,
    # FUSED_RETUNE=1; block graph µs with STACK off / on in `fifteenth1`: int8 W8A16 116.2 / 114.1, fp8 111.4 / 108.5)
    ('w8_gemm', '128', '14336', '4096', 'True', 'True', 'torch.int8', 'split'): {'BLOCK_M': 256, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8, 'STACK': True, 'SPLIT_K': 1},
    ('w8_gemm', '128', '4096', '14336', 'False', 'True', 'torch.int8', 'split'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4, 'STACK': True, 'SPLIT_K': 2},
    # fp8 W8A16 through e4m3 split activations and int8 split at M=512 (bench of 2026-12-01, fourth session,
    # examples/results/h200/llama_fp8split.json "tuned"; every candidate timed, L2 flushed)
    ('w8_gemm', '128', '14336', '4096', 'True', 'True', 'torch.float8_e4m3fn', 'split'): {'BLOCK_M': 256, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8, 'STACK': True, 'SPLIT_K': 1},
    ('w8_gemm', '128', '4096', '14336', 'False', 'True', 'torch.float8_e4m3fn', 'split'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4, 'STACK': True, 'SPLIT_K': 2},
    ('w8_gemm', '512', '14336', '4096', 'True', 'True', 'torch.float8_e4m3fn', 'split'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 64, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '512', '4096', '14336', 'False', 'True', 'torch.float8_e4m3fn', 'split'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '512', '14336', '4096', 'True', 'True', 'torch.int8', 'split'): {'BLOCK_M': 64, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '512', '4096', '14336', 'False', 'True', 'torch.int8', 'split'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '128', '14336', '4096', 'True', 'False', 'torch.float8_e4m3fn'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 64, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '128', '4096', '14336', 'False', 'False', 'torch.float8_e4m3fn'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 64, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4, 'SPLIT_K': 4},
    # 2:4 decode at M=1 (bench of 2026-12-01, third session): the vsel form, block 107.2 -> 72.9 us
    ('sparse24_gemv', '1', '14336', '4096', 'True', 'torch.int8'): {'MODE': 'vsel', 'BLOCK_M': 1, 'BLOCK_N': 32, 'BLOCK_K': 256, 'num_warps': 4, 'SPLIT_K': 1},
    ('sparse24_gemv', '1', '4096', '14336', 'False', 'torch.int8'): {'MODE': 'vsel', 'BLOCK_M': 1, 'BLOCK_N': 32, 'BLOCK_K': 256, 'num_warps': 4, 'SPLIT_K': 4},
    # ninth session (2026-12-01): 2:4 decode on tiled meta (bench ninth2_t1), and the hand-off's epilogue_quant at
    # M=128 (ONE_PASS won in three runs; a fourth's noisy timing picked a 19 µs two-pass form) and fp8 M=8192
    # (UNFUSED in two runs)
    ('sparse24_gemv', '1', '14336', '4096', 'True', 'torch.float8_e4m3fn', 'tiled'): {'MODE': 'quad', 'BLOCK_M': 1, 'BLOCK_N': 32, 'BLOCK_K': 512, 'num_warps': 4, 'STAGES': 4, 'SPLIT_K': 1},
    ('sparse24_gemv', '1', '4096', '14336', 'False', 'torch.float8_e4m3fn', 'tiled'): {'MODE': 'quad', 'BLOCK_M': 1, 'BLOCK_N': 32, 'BLOCK_K': 512, 'num_warps': 4, 'STAGES': 4, 'SPLIT_K': 4},
    ('sparse24_gemv', '1', '14336', '4096', 'True', 'torch.int8', 'tiled'): {'MODE': 'quad', 'BLOCK_M': 1, 'BLOCK_N': 32, 'BLOCK_K': 512, 'num_warps': 4, 'STAGES': 4, 'SPLIT_K': 1},
    ('sparse24_gemv', '1', '4096', '14336', 'False', 'torch.int8', 'tiled'): {'MODE': 'quad', 'BLOCK_M': 1, 'BLOCK_N': 32, 'BLOCK_K': 512, 'num_warps': 4, 'STAGES': 4, 'SPLIT_K': 4},
    ('sparse24_gemv', '16', '14336', '4096', 'True', 'torch.float8_e4m3fn', 'tiled'): {'MODE': 'dot', 'BLOCK_M': 16, 'BLOCK_N': 32, 'BLOCK_K': 128, 'num_warps': 4, 'SPLIT_K': 1},
    ('sparse24_gemv', '16', '4096', '14336', 'False', 'torch.float8_e4m3fn', 'tiled'): {'MODE': 'dot', 'BLOCK_M': 16, 'BLOCK_N': 64, 'BLOCK_K': 128, 'num_warps': 4, 'SPLIT_K': 8},
    ('sparse24_gemv', '16', '14336', '4096', 'True', 'torch.int8', 'tiled'): {'MODE': 'dot', 'BLOCK_M': 16, 'BLOCK_N': 32, 'BLOCK_K': 128, 'num_warps': 4, 'SPLIT_K': 1},
    ('sparse24_gemv', '16', '4096', '14336', 'False', 'torch.int8', 'tiled'): {'MODE': 'dot', 'BLOCK_M': 16, 'BLOCK_N': 64, 'BLOCK_K': 128, 'num_warps': 4, 'SPLIT_K': 8},
    ('epilogue_quant', '128', '14336', 'True', 'False', 'True', 'False', 'silu'): {'BLOCK_N': 16384, 'ONE_PASS': True, 'num_warps': 16},
    ('epilogue_quant', '128', '14336', 'True', 'False', 'False', 'False', 'silu'): {'BLOCK_N': 16384, 'ONE_PASS': True, 'num_warps': 16},
    ('epilogue_quant', '8192', '14336', 'True', 'False', 'True', 'False', 'silu'): {'UNFUSED': True},
    # GPT block (d 4096, h 16384, GELU-tanh, bias): the picks of the fifteenth session's bench (2026-12-01,
    # `bash .ci/h200_next.sh fifteenth2`, examples/results/h200/fifteenth/gpt_bench.json "tuned", every candidate
    # timed, L2 flushed)
    ('w8a16_gemv', '1', '16384', '4096', 'False', 'torch.int8'): {'BLOCK_M': 16, 'BLOCK_N': 32, 'BLOCK_K': 256, 'SPLIT_K': 1, 'num_warps': 4, 'CVT': 'native'},
    ('w8a16_gemv', '1', '4096', '16384', 'False', 'torch.int8'): {'BLOCK_M': 1, 'BLOCK_N': 64, 'BLOCK_K': 256, 'SPLIT_K': 8, 'num_warps': 8, 'CVT': 'magic'},
    ('w8a16_gemv', '1', '16384', '4096', 'False', 'torch.float8_e4m3fn'): {'BLOCK_M': 1, 'BLOCK_N': 32, 'BLOCK_K': 512, 'SPLIT_K': 1, 'num_warps': 8, 'CVT': 'magic'},
    ('w8a16_gemv', '1', '4096', '16384', 'False', 'torch.float8_e4m3fn'): {'BLOCK_M': 1, 'BLOCK_N': 64, 'BLOCK_K': 256, 'SPLIT_K': 8, 'num_warps': 8, 'CVT': 'magic'},
    ('w8a16_gemv', '16', '16384', '4096', 'False', 'torch.int8'): {'BLOCK_M': 16, 'BLOCK_N': 32, 'BLOCK_K': 256, 'SPLIT_K': 1, 'num_warps': 4, 'CVT': 'native'},
    ('w8a16_gemv', '16', '4096', '16384', 'False', 'torch.int8'): {'BLOCK_M': 16, 'BLOCK_N': 32, 'BLOCK_K': 256, 'SPLIT_K': 4, 'num_warps': 4, 'CVT': 'native'},
    ('w8a16_gemv', '16', '16384', '4096', 'False', 'torch.float8_e4m3fn'): {'BLOCK_M': 16, 'BLOCK_N': 32, 'BLOCK_K': 256, 'SPLIT_K': 1, 'num_warps': 4, 'CVT': 'native'},
    ('w8a16_gemv', '16', '4096', '16384', 'False', 'torch.float8_e4m3fn'): {'BLOCK_M': 16, 'BLOCK_N': 32, 'BLOCK_K': 256, 'SPLIT_K': 4, 'num_warps': 4, 'CVT': 'native'},
    ('w8_gemm', '128', '16384', '4096', 'False', 'True', 'torch.int8', 'split'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '128', '4096', '16384', 'False', 'True', 'torch.int8', 'split'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4, 'STACK': True, 'SPLIT_K': 2},
    ('epilogue_quant', '128', '16384', 'False', 'False', 'False', 'True', 'gelu_tanh'): {'UNFUSED': True},
    ('w8_gemm', '128', '16384', '4096', 'False', 'True', 'torch.int8'): {'BLOCK_M': 64, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4, 'SPLIT_K': 1},
    ('w8_gemm', '128', '4096', '16384', 'False', 'True', 'torch.int8'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4, 'SPLIT_K': 4},
    ('epilogue_quant', '128', '16384', 'False', 'False', 'True', 'True', 'gelu_tanh'): {'BLOCK_N': 16384, 'ONE_PASS': True, 'num_warps': 16},
    ('w8_gemm', '128', '16384', '4096', 'False', 'True', 'torch.float8_e4m3fn'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4, 'SPLIT_K': 1},
    ('w8_gemm', '128', '4096', '16384', 'False', 'True', 'torch.float8_e4m3fn'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4, 'SPLIT_K': 4},
    ('w8_gemm', '128', '16384', '4096', 'False', 'True', 'torch.float8_e4m3fn', 'split'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '128', '4096', '16384', 'False', 'True', 'torch.float8_e4m3fn', 'split'): {'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 4, 'STACK': True, 'SPLIT_K': 2},
    ('w8_gemm', '1024', '16384', '4096', 'False', 'False', 'torch.bfloat16'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 64, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4, 'SPLIT_K': 1},
    ('w8_gemm', '1024', '4096', '16384', 'False', 'False', 'torch.bfloat16'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 64, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4, 'SPLIT_K': 1},
    ('epilogue_quant', '1024', '16384', 'False', 'False', 'False', 'True', 'gelu_tanh'): {'BLOCK_N': 16384, 'ONE_PASS': True, 'num_warps': 16},
    ('epilogue_quant', '1024', '16384', 'False', 'False', 'True', 'True', 'gelu_tanh'): {'UNFUSED': True},
    ('w8_gemm', '1024', '16384', '4096', 'False', 'True', 'torch.float8_e4m3fn'): {'BLOCK_M': 128, 'BLOCK_N': 256, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '1024', '4096', '16384', 'False', 'True', 'torch.float8_e4m3fn'): {'BLOCK_M': 128, 'BLOCK_N': 256, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '8192', '16384', '4096', 'False', 'False', 'torch.bfloat16'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 64, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4, 'SPLIT_K': 1},
    ('w8_gemm', '8192', '4096', '16384', 'False', 'False', 'torch.bfloat16'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 64, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8, 'SPLIT_K': 1},
    ('epilogue_quant', '8192', '16384', 'False', 'False', 'False', 'True', 'gelu_tanh'): {'BLOCK_N': 16384, 'ONE_PASS': True, 'num_warps': 16},
    ('epilogue_quant', '8192', '16384', 'False', 'False', 'True', 'True', 'gelu_tanh'): {'UNFUSED': True},
    ('w8_gemm', '8192', '16384', '4096', 'False', 'True', 'torch.float8_e4m3fn'): {'BLOCK_M': 128, 'BLOCK_N': 256, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '8192', '4096', '16384', 'False', 'True', 'torch.float8_e4m3fn'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 4, 'SPLIT_K': 1},
    ('w8_gemm', '8192', '14336', '4096', 'True', 'True', 'torch.float8_e4m3fn'): {'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 64, 'GROUP_M': 8, 'num_stages': 4, 'num_warps': 8, 'SPLIT_K': 1},
    ('w8_gemm', '8192', '4096', '14336', 'False', 'True', 'torch.float8_e4m3fn'): {'TMA': True, 'BLOCK_M': 128, 'BLOCK_N': 256, 'BLOCK_K': 128, 'GROUP_M': 8, 'num_stages': 3, 'num_warps': 8, 'SPLIT_K': 1, 'TMA_Y': True},
    # the 32-row GEMV (Llama shapes, twelfth session's `gemv32` run, examples/results/h200/llama_gemv64.json "tuned";
    # the kernel is unchanged since): what dispatch.GEMV_ROUTE_MAX_M times against split activations at M = 17..32
    ('w8a16_gemv', '32', '14336', '4096', 'True', 'torch.int8'): {'BLOCK_M': 32, 'BLOCK_N': 64, 'BLOCK_K': 128, 'SPLIT_K': 2, 'num_warps': 4, 'CVT': 'magic', 'JOINT': True},
    ('w8a16_gemv', '32', '4096', '14336', 'False', 'torch.int8'): {'BLOCK_M': 32, 'BLOCK_N': 64, 'BLOCK_K': 128, 'SPLIT_K': 8, 'num_warps': 4, 'CVT': 'native'},
    ('w8a16_gemv', '32', '14336', '4096', 'True', 'torch.float8_e4m3fn'): {'BLOCK_M': 32, 'BLOCK_N': 64, 'BLOCK_K': 256, 'SPLIT_K': 2, 'num_warps': 4, 'CVT': 'magic', 'JOINT': True},
    ('w8a16_gemv', '32', '4096', '14336', 'False', 'torch.float8_e4m3fn'): {'BLOCK_M': 32, 'BLOCK_N': 64, 'BLOCK_K': 128, 'SPLIT_K': 8, 'num_warps': 4, 'CVT': 'magic'},
    # sparse24_mma (2:4 decode on mma.sp), twenty-third session: `bash .ci/h200_next.sh mma24b` (the M=1 gated pairs
    # pick from `twentythird`'s diag: XF), H200, triton 3.6.0
    ('sparse24_mma', '1', '14336', '4096', 'True', '2', 'torch.int8', 'pairs'): {'W': 4, 'SPLIT_K': 4, 'U': 2, 'FENCE': True, 'num_warps': 4, 'XF': True, 'L2P': 128},
    ('sparse24_mma', '1', '4096', '14336', 'False', '2', 'torch.int8', 'pairs'): {'W': 4, 'SPLIT_K': 16, 'U': 2, 'FENCE': True, 'num_warps': 4, 'XF': True, 'L2P': 128},
    ('sparse24_mma', '1', '14336', '4096', 'True', '1', 'torch.int8'): {'W': 4, 'SPLIT_K': 2, 'U': 4, 'FENCE': True, 'num_warps': 4},
    ('sparse24_mma', '1', '4096', '14336', 'False', '1', 'torch.int8'): {'W': 4, 'SPLIT_K': 16, 'U': 2, 'FENCE': True, 'num_warps': 4},
    ('sparse24_mma', '16', '14336', '4096', 'True', '2', 'torch.int8'): {'W': 4, 'SPLIT_K': 2, 'U': 4, 'FENCE': True, 'num_warps': 4},
    ('sparse24_mma', '16', '4096', '14336', 'False', '2', 'torch.int8'): {'W': 4, 'SPLIT_K': 16, 'U': 2, 'FENCE': False, 'num_warps': 4},
    ('sparse24_mma', '16', '14336', '4096', 'True', '1', 'torch.int8'): {'W': 4, 'SPLIT_K': 2, 'U': 4, 'FENCE': True, 'num_warps': 4},
    ('sparse24_mma', '16', '4096', '14336', 'False', '1', 'torch.int8'): {'W': 4, 'SPLIT_K': 16, 'U': 2, 'FENCE': False, 'num_warps': 4},
}
