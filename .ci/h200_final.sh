#!/usr/bin/env bash
# The full H200 run behind the README tables: profile before/after, the Llama block against every
# baseline, the GPT block (ours vs bf16; heuristic kernel configs, no tuning), the narrow MLP, then the
# GPU tests. Everything is written under /tmp/r; at most 8 chosen files are copied to $OUT.
# usage: bash .ci/h200_final.sh "<pytest args>"
set -uo pipefail
S=$(mktemp -d); python3 -m pip install -q --no-index --no-deps --target "$S" .whl/*.whl && export PYTHONPATH="$S:$PWD"
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; R=/tmp/r; mkdir -p "$OUT" "$R"
LOG="$OUT/run.log"
filt() { grep -v "Failed to load\|Enum subclass"; }
python3 -c "import torch, triton, torchao; print(torch.__version__, triton.__version__, torchao.__version__, torch.cuda.get_device_name())" 2>&1 | filt | tee -a "$LOG"
echo "== profile" >> "$LOG"; timeout 60 python3 examples/profile_before_after.py --full --out "$R/profile" 2>&1 | filt >> "$LOG"; echo "profile rc=$?"
echo "== bench llama" >> "$LOG"; timeout 330 python3 -m fused bench --blocks llama --out "$R/llama" 2>&1 | filt >> "$LOG"; echo "bench llama rc=$?"
echo "== bench gpt" >> "$LOG"; FUSED_TUNE=0 timeout 90 python3 -m fused bench --blocks gpt --no-baselines --out "$R/gpt" 2>&1 | filt >> "$LOG"; echo "bench gpt rc=$?"
echo "== narrow" >> "$LOG"; timeout 75 python3 examples/narrow_mlp_bench.py --out "$R/narrow" 2>&1 | filt >> "$LOG"; echo "narrow rc=$?"
if [ -n "${1:-}" ]; then
  echo "== pytest" >> "$LOG"; timeout ${TEST_TIMEOUT:-90} python3 -m pytest -q -p no:cacheprovider -m cuda $1 2>&1 | filt | tail -40 >> "$LOG"; echo "pytest rc=$?"
fi
for f in llama/bench.json llama/bench.md llama/bench.png gpt/bench.json; do cp "$R/$f" "$OUT/${f//\//_}" 2>/dev/null; done
cp "$R"/profile/*.png "$OUT/profile.png" 2>/dev/null; cp "$R"/profile/profile.json "$OUT/profile.json" 2>/dev/null
cat "$R"/narrow/*.md > "$OUT/narrow.md" 2>/dev/null
tail -30 "$LOG" | cut -c1-220
