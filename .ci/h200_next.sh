#!/usr/bin/env bash
# The H200 checks for the paths prepared on the CPU on 2026-12-01 (see examples/results/h200/NOTES.md).
# usage: bash .ci/h200_next.sh tests|diag|bench   (each fits one 600 s device call; logs under $OUT)
set -uo pipefail
S=$(mktemp -d); python3 -m pip install -q --no-index --no-deps --target "$S" .whl/*.whl && export PYTHONPATH="$S:$PWD"
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
filt() { grep -v "Failed to load\|Enum subclass"; }
case "${1:-}" in
  tests)  # the new paths' GPU tests, then the replay and launch tests
    timeout 540 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_unpack24.py \
      tests/test_kernels_w8.py::test_mma_decode_paths_cuda tests/test_decode_block.py::test_decode_block_cuda \
      tests/test_launch.py tests/test_kernels_w8.py 2>&1 | filt | tail -25 ;;
  diag)   # per-kernel: the GEMV tile pattern with no arithmetic, then the MMA-fed decode paths
    timeout 560 python3 .ci/diag.py readbw,decode8 2>&1 | filt | grep -v "^\s*$" | tail -80 ;;
  bench)  # block numbers with the prepared paths switched on, against the defaults, same process order
    run() {  # env, M list
      echo "== ${1:-defaults} (M=$2)"
      env $1 timeout 170 python3 -m fused bench --blocks llama --m "$2" --no-baselines \
        --configs "ours int8 W8A16,ours int8 W8A8,ours fp8 W8A8,ours int8 2:4 W8A16" --out "$OUT/b${#1}" 2>&1 \
        | filt | grep "^| ours\|^| bf16" | head -8
    }
    run "" 1,16,128
    run "FUSED_SPLIT_MAX_M=1024 FUSED_A8_GEMV_MAX_M=0" 1,16,128
    run "FUSED_DECODE_BLOCK_MAX_M=16" 1,16 ;;
  *) echo "usage: $0 tests|diag|bench"; exit 2 ;;
esac
