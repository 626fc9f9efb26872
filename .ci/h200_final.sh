#!/usr/bin/env bash
# The full H200 run behind the README tables: profile before/after, the Llama block against every
# baseline, the GPT block (ours vs bf16; heuristic kernel configs, no tuning), then the GPU tests. Logs and results under $OUT.
set -uo pipefail
S=$(mktemp -d); python3 -m pip install -q --no-index --no-deps --target "$S" .whl/*.whl && export PYTHONPATH="$S:$PWD"
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
filt() { grep -v "Failed to load\|Enum subclass"; }
python3 -c "import torch, triton, torchao; print(torch.__version__, triton.__version__, torchao.__version__, torch.cuda.get_device_name())" 2>&1 | filt | tee "$OUT/versions.txt"
timeout 60 python3 examples/profile_before_after.py --full --out "$OUT/profile" 2>&1 | filt > "$OUT/profile.log"; echo "profile rc=$?"; tail -25 "$OUT/profile.log"
timeout 330 python3 -m fused bench --blocks llama --out "$OUT/llama" 2>&1 | filt > "$OUT/bench_llama.log"; echo "bench llama rc=$?"
FUSED_TUNE=0 timeout 90 python3 -m fused bench --blocks gpt --no-baselines --out "$OUT/gpt" 2>&1 | filt > "$OUT/bench_gpt.log"; echo "bench gpt rc=$?"
timeout 75 python3 examples/narrow_mlp_bench.py --out "$OUT/narrow" 2>&1 | filt > "$OUT/narrow.log"; echo "narrow rc=$?"; tail -8 "$OUT/narrow.log"
if [ -n "${1:-}" ]; then
  timeout ${TEST_TIMEOUT:-90} python3 -m pytest -q -p no:cacheprovider -m cuda $1 2>&1 | filt > "$OUT/pytest.log"; echo "pytest rc=$?"; tail -8 "$OUT/pytest.log"
fi
cat "$OUT/llama/bench.md" "$OUT/gpt/bench.md" 2>/dev/null | head -60
