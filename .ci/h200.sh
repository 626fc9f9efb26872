#!/usr/bin/env bash
# One H200 session: install torchao from .whl/, run the GPU tests, then the benchmark. Logs under $OUT.
# usage: bash .ci/h200.sh "<pytest args>" "<bench args>"
set -uo pipefail
S=$(mktemp -d); python3 -m pip install -q --no-index --no-deps --target "$S" .whl/*.whl && export PYTHONPATH="$S:$PWD"
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
python3 -c "import torch, triton, torchao; print(torch.__version__, triton.__version__, torchao.__version__, torch.cuda.get_device_name())" 2>&1 | grep -v "Failed to load\|Enum" | tee "$OUT/versions.txt"
if [ -n "${1:-}" ]; then
  timeout ${TEST_TIMEOUT:-240} python3 -m pytest -q -p no:cacheprovider $1 2>&1 | grep -v "Failed to load\|Enum" > "$OUT/pytest.log"; echo "pytest rc=$?"; tail -15 "$OUT/pytest.log"
fi
if [ -n "${2:-}" ]; then
  python3 -m fused bench $2 --out "$OUT" 2>&1 | grep -v "Failed to load\|Enum" > "$OUT/bench.log"; echo "bench rc=$?"; tail -40 "$OUT/bench.log"
fi
