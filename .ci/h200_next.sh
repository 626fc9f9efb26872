#!/usr/bin/env bash
# The H200 checks for the next session (see examples/results/h200/NOTES.md, "Open leads now").
# usage: bash .ci/h200_next.sh MODE, MODE one of (in the file's order; each fits one 600 s device call; logs
# under $OUT; at most 8 files come back):
#   cudaA|cudaB|cudaC|readme46a|readme46b|gpt46|ws8192|h200or|first45|g4only|big8192|g4big|g4split|m128now|plain128|
#   ncudown128|ncucoop|tw|qxdown|occ128|split256|down256|ncusplit|ncuws|ncupp|ppwait|wsmore|pair|halves|sustain|
#   wovs|spread|routeab|fullA|fullB|fullC|fullfloor|floor|evictfinal|evict3|evict2|evict|mma24|twentythird|
#   twentyfourth1|twentyfourth2|ncufine|fineship|fine|gemvpfd|gemvmma16|l2p24|twentythird2|mma24b|ncumma|quad16|
#   twentieth2|twentieth1|prmt24|l2pf|quad24|s24wave|nineteenth1|retune16|retune8|ncu24|retune24|stagedtest|
#   eighteenth3|eighteenth2|eighteenth1|eagerbig|w8tma|splitrows|s24stages|seventeenth2|seventeenth1|sixteenth1|
#   fifteenth1|fifteenth2|sixteenth5|sixteenth6|sixteenth4|sixteenth3|sixteenth2|firstlayer|gptfull|prmt|
#   fifteenth3|gemvroute|w8a16eager|fourteenth3|fourteenth4|fourteenth1|fourteenth2|thirteenth1|thirteenth3|
#   thirteenth4|thirteenth2|smootheager|eagergraph|gemv32|narrowtmaout|eleventh3|eleventh2|chain|eleventh1|
#   narrowtma|narrowtma2|narrowncu|tenth3|relu16|tmadown|tenth|w8a16cublas|ninth3|ninth2|ninth|eighth3|eighth2|
#   eighth|graphprof|tests|testsx1|testsx2|testsx|testsb|tests3|testsnarrow|tests2|s24cslt|s24graph|s24split|
#   cublas|seventh|host|bench|probe|ncu128|s24small|narrow|next|s24prefill|narrowbug|narrowfix|split512|abqx|
#   readtma
# Next session: NOTES "Open leads now (next session, after the forty-sixth)": cudaA, cudaB, cudaC (find the one
# cuda test that failed on the H200). Done in the forty-sixth, on an H200: readme46a, readme46b, gpt46, fullA, the
# all-cuda-tests call (cut at 53%). Earlier: "after the forty-fifth": first45 and m128now on an
# H200 (first45, block_parts and ws8192 ran on an H100 in the forty-fifth: the split cuda tests pass). Earlier:
# "after the forty-fourth" (g4only, big8192, m128now ran on an H100 in the forty-fourth, with wscfg / wscfg128).
# Earlier: "after the
# forty-third" (plain128 and ncudown128 ran). Done in
# the forty-third, on an H100: splitk (55 tests passed; split-K ~ Triton), streamk (31 passed; stream-K slower). Done in
# the
# forty-first: deep128 (lost, removed), splitws (the split-plane
# Gluon route: on). Done in the fortieth (all lost; the code
# measured is at 7a6823c, removed after): qxdown, occ128, tw; the cuda tests of w8_gemm's picks (testsx with
# TESTSX_FILES, NOTES "fortieth"). Done in the thirty-ninth (a machine came for its last hour): grouped4, split256, down256, ncusplit, ncuws, stages2 (all measured; NOTES "thirty-ninth").
# Done in the thirty-seventh: grouped3 (stages2 lost with the machine). Earlier: (NOTES "thirty-sixth") `grouped3`.
# Done in the thirty-sixth: coop, perlayer, grouped, grouped2 (grouped3 lost with the machine).
# Earlier: (NOTES "thirty-fifth") `coop` first, `perlayer`, then `stages2`.
# Done in the thirty-fifth: wsblock1, wsblock2, thirty5a, stages, thirty5b, thirty5c. Earlier: (NOTES "thirty-fourth") `wsblock1` first (~5 min),
# then `wsblock2`. Done in the thirty-fourth: energy,
# parts, gcfg, wsfp8a8, ws8diag. Earlier: (NOTES "thirty-third") `energy` first. Done in the thirty-third: wsmid, gapclk (partly, by
# hand). Earlier: (NOTES "thirty-first") `wspair` first, then `wsmid`. Done in the thirty-first: wsmore, ppwait, ncupp, ppturn,
# wsroute, wsfp8. Earlier: (NOTES "thirtieth") `wsmore` first. Done in the thirtieth: swappersist (the swap route then removed),
# the Gluon W8A16 GEMMs' first timings (.ci/ws_probe.py). Before:
# `sixteenth1`'s chain timing again (a candidate with the
# retuned 64x256 GEMV tiles added), `quad16`, `retune16`, `retune24`, `gptfull` (with FUSED_RETUNE=w8a16_gemv),
# `w8a16eager` (superseded if `sustain` closes the W8A16 plain-call gap). Done in the twenty-seventh: routeab, spread,
# fullA, fullB, fullC, and the GPT block with every baseline (`python -m fused bench --blocks gpt`, one call).
# Done in the twenty-sixth: fullfloor (cut at M=128), testsx1 (cut at 86%), testsx2.
# Done in the twenty-fifth: evict,
# evict2, evict3, evictfinal (fineship and ncufine are superseded: the M=1 picks were retuned under the policy).
# Each fits one 600 s call.
set -uo pipefail
S=$(mktemp -d); python3 -m pip install -q --no-index --no-deps --target "$S" .whl/*.whl && export PYTHONPATH="$S:$PWD"
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
filt() { grep -v "Failed to load\|Enum subclass"; }
routes() {  # the 2:4 route timings (eager and CUDA graph) of a bench.json, fastest first
  python3 -c "
import json, sys
for k, v in json.load(open(sys.argv[1]))['timings'].items():
    if 'sparse24_route' in k:
        print(k[:150], sorted(v, key=lambda r: r[0]))" "$1"
}
cands() {  # cands BENCH_JSON KERNEL: per tuning key of KERNEL, its 3 fastest candidates and each family's best
  python3 -c "
import json, sys
for k, v in json.load(open(sys.argv[1]))['timings'].items():
    if sys.argv[2] not in k:
        continue
    v = sorted(v, key=lambda r: r[0])
    print(k[:110]); [print('   ', r) for r in v[:3]]
    for fam in ('MMA', 'PFD', 'STAGES', 'FINE'):  # a family: its key set above its default
        best = [r for r in v if isinstance(r[1], dict) and (r[1].get(fam) or 0) > (fam == 'STAGES')][:1]
        print('    best', fam, best[0] if best else '-')" "$1" "$2"
}
picks() {  # picks BENCH_JSON PATTERN...: the route timings whose key holds every PATTERN (one of a|b as a|b)
  python3 -c "
import json, sys
for k, v in json.load(open(sys.argv[1]))['timings'].items():
    if all(any(p in k for p in alt.split('|')) for alt in sys.argv[2:]):
        print('  ', k[:100], sorted(v))" "$@"
}
testbench() {  # testbench NAME PYTEST_K CONFIGS PATTERN [BENCH_LIMIT [TEST_LIMIT]]: tests/test_w8a8_ws.py's cuda
               # tests matching PYTEST_K (stop on a failure), then the Llama blocks CONFIGS at M=128 and the graph route
               # timings whose key holds PATTERN
  timeout "${6:-200}" python3 -m pytest -q -p no:cacheprovider -m cuda -n 4 -rf --tb=short tests/test_w8a8_ws.py \
    -k "$2" 2>&1 | filt | tail -8 > "$OUT/$1_test.txt"
  tail -3 "$OUT/$1_test.txt"
  grep -q " passed" "$OUT/$1_test.txt" && ! grep -q "failed\|error" "$OUT/$1_test.txt" || return 1
  timeout "${5:-200}" python3 -m fused bench --blocks llama --m 128 --no-baselines --configs "$3" --out "$OUT/$1" \
    > "$OUT/$1.log" 2>&1
  picks "$OUT/$1/bench.json" "$4" graph
  grep "^|" "$OUT/$1.log" | grep -v "^|--" | head -6
}
retune128() {  # retune128 NAME LIMIT CONFIGS PATTERN: the Llama blocks at M=128 with w8_gemm retuned (FUSED_RETUNE),
               # their table, the best candidates of the tuning keys holding PATTERN, the picks as tuned_h200 rows
  FUSED_RETUNE=w8_gemm timeout "$2" python3 -m fused bench --blocks llama --m 128 --no-baselines --configs "$3" \
    --out "$OUT/$1" > "$OUT/$1.log" 2>&1
  grep "^|" "$OUT/$1.log" | grep -v "^|--" | head -8
  cands "$OUT/$1/bench.json" "$4" | head -40
  python3 .ci/picks_to_tuned.py "$OUT/$1/bench.json" 2>&1 | filt
  rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md
}
ab() {  # ab VAR "V1 V2" ROWS TIMEOUT bench-args...: the Llama bench once per value of env VAR, its table rows
  local var=$1 vals=$2 rows=$3 limit=$4; shift 4
  for v in $vals; do
    env "$var=$v" timeout "$limit" python3 -m fused bench --blocks llama --no-baselines "$@" --out "$OUT/$var$v" \
      > "$OUT/$var$v.log" 2>&1
    echo "$var=$v"; grep "^|" "$OUT/$var$v.log" | grep -v "^|--" | head -"$rows"
  done
}
splittests() {  # splittests LIMIT: the split-plane cuda tests of tests/test_w8a8_ws.py, their summary's last lines
  timeout "$1" python3 -m pytest -q -p no:cacheprovider -m cuda -n 4 -rf --tb=short tests/test_w8a8_ws.py -k split \
    2>&1 | filt | tail -6 > "$OUT/splittest.txt"
}
blockbench() {  # blockbench NAME LIMIT BLOCKS M CONFIGS PATTERN ROWS: `fused bench` of CONFIGS (bf16 eager beside them,
               # no other baseline) at M, the graph route timings whose key holds PATTERN, the table's first ROWS rows
  timeout "$2" python3 -m fused bench --blocks "$3" --m "$4" --configs "$5" --no-baselines --out "$OUT/$1" \
    > "$OUT/$1.log" 2>&1
  picks "$OUT/$1/bench.json" "$6" graph | cut -c1-300
  grep "^|" "$OUT/$1.log" | grep -v "^|--" | head -"$7"
}
g4probe() {  # g4probe ROUNDS LIMIT LINES: .ci/wscfg_probe.py's short list at M=1024 in ROUNDS alternating rounds
  ROUNDS=$1 SHORT=1 timeout "$2" python3 .ci/wscfg_probe.py 1024 2>&1 | filt > "$OUT/g4probe.txt"
  grep -A"$3" "fastest" "$OUT/g4probe.txt"
}
case "${1:-}" in
  cudaA|cudaB|cudaC)  # forty-sixth session: every cuda test in three calls (one run of all of them, cut by the
              # budget at 53%, had one failure whose name the cut lost), each test's name and result in the log as it
              # runs: A = the Gluon GEMM files, B = the other dense 8-bit files, C = the rest (2:4, narrow, decode...)
    DENSE="test_kernels_w8|test_kernels_w8_mma|test_kernels_int8_linear|test_dispatch|test_handoff|test_split_gemm"
    DENSE="$DENSE|test_first_layer|test_w8a8_tma|test_compile_passes"
    case "$1" in
      cudaA) FILES=$(ls tests/test_*_ws.py) ;;
      cudaB) FILES=$(ls tests/test_*.py | grep -E "tests/($DENSE)\.py") ;;
      *) FILES=$(ls tests/test_*.py | grep -v "_ws\.py" | grep -vE "tests/($DENSE)\.py") ;;
    esac
    timeout 540 python3 -m pytest -p no:cacheprovider -m cuda -n 4 -v -rf --tb=short $FILES 2>&1 | filt \
      > "$OUT/$1.txt"
    grep -c " PASSED" "$OUT/$1.txt"; grep "FAILED\|ERROR" "$OUT/$1.txt" | head -20; tail -3 "$OUT/$1.txt" ;;
  readme46a|readme46b)  # forty-sixth session, on an H200: the README's dense table with the current defaults
           # (thirty5b's command, split by M: a = the split cuda tests, then M=128,1024; b = M=8192); every row
           # in one process
    DENSE="ours int8 W8A16,ours int8 W8A8,ours fp8 W8A8,ours fp8 W8A16"
    BASE="bf16 compile,torchao int8 dyn + compile,torchao fp8 rowwise + compile,torchao fp8 wo + compile"
    nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
    if [ "$1" = readme46a ]; then
      splittests 130
      tail -2 "$OUT/splittest.txt"
    fi
    m=$([ "$1" = readme46a ] && echo 128,1024 || echo 8192)
    timeout $([ "$1" = readme46a ] && echo 420 || echo 560) python3 -m fused bench --blocks llama --m "$m" \
      --configs "$DENSE" --baselines "$BASE" --out "$OUT/$1" > "$OUT/$1.log" 2>&1
    picks "$OUT/$1/bench.json" "ws mid|w8a16|h in|h out" graph | cut -c1-240
    grep "^|" "$OUT/$1.log" | grep -v "^|--" | head -24 ;;
  gpt46)  # forty-sixth session, after readme46a/b: the GPT block's dense rows with the current defaults beside bf16
          # eager and compile (M=128,1024,8192, one process)
    nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
    timeout 540 python3 -m fused bench --blocks gpt --m 128,1024,8192 --configs \
      "ours int8 W8A16,ours int8 W8A8,ours fp8 W8A8,ours fp8 W8A16" --baselines "bf16 compile" --out "$OUT/gpt46" \
      > "$OUT/gpt46.log" 2>&1
    picks "$OUT/gpt46/bench.json" "w8a16|h in|h out" graph | cut -c1-240
    grep "^|" "$OUT/gpt46.log" | grep -v "^|--" | head -16 ;;
  ws8192)  # forty-fifth session, run on an H100 (lost: the Gluon W8A16 GEMM ~10-18% behind on every M=8192 layer):
          # the Llama W8A16 blocks at M=8192 with it offered there too (FUSED_W8A16_WS_MAX_M=8192), bf16 eager beside
    nvidia-smi --query-gpu=name --format=csv,noheader
    FUSED_W8A16_WS_MAX_M=8192 blockbench ws8192 110 llama 8192 "ours int8 W8A16,ours fp8 W8A16" "w8a16" 12 ;;
  h200or)  # forty-fifth session (not run; its ws8192 part ran alone and lost): on an H200, issue 3's int8 W8A16
          # Llama block at M=1024; on any card, ws8192, then the GPT block the same way
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
      blockbench b1024 160 llama 1024 "ours int8 W8A16" "ws mid|w8a16" 6
    fi
    nvidia-smi --query-gpu=name --format=csv,noheader
    FUSED_W8A16_WS_MAX_M=8192 blockbench ws8192 200 llama 8192 "ours int8 W8A16,ours fp8 W8A16" "w8a16" 12
    FUSED_W8A16_WS_MAX_M=8192 blockbench gpt8192 120 gpt 8192 "ours int8 W8A16" "w8a16" 6 ;;
  first45)  # forty-fifth session, first call on any Hopper (ran on an H100: 72 passed, 540.5 / 4266.7 µs): the
           # split-plane cuda tests (not rerun after the stream-K removal), then issue 3's int8 W8A16 Llama block at
           # M=1024 (GROUP_N 4; H200 prediction 564.6 -> ~548, target 550) and at M=8192 (split route timed there by
           # default now; prediction ~4380 vs bf16 ~4460)
    splittests 130
    tail -3 "$OUT/splittest.txt"
    blockbench b1024 150 llama 1024 "ours int8 W8A16" "ws mid|w8a16" 6
    blockbench b8192 230 llama 8192 "ours int8 W8A16" "ws mid|w8a16" 6 ;;
  g4only)  # g4big's first half (the GROUP_N probe, the int8 W8A16 block at M=1024; ~240 s)
    g4probe 2 90 7
    blockbench g4b 150 llama 1024 "ours int8 W8A16" "ws mid|w8a16" 6 ;;
  big8192)  # g4big's second half: int8 W8A16 at M=8192 with the split-plane routes timed there (~220 s)
    FUSED_W8A16_SPLIT_ROUTE_MAX_M=8192 blockbench big 220 llama 8192 "ours int8 W8A16" "ws mid|w8a16" 6 ;;
  g4big)  # forty-fourth session, g4split cut to one call with W8A16 at M=8192: the probe (GROUP_N 8 / 4 / 2, 2 rounds),
         # the W8A16 blocks at M=1024, then int8 W8A16 at M=8192 with the split-plane routes timed there too
         # (FUSED_W8A16_SPLIT_ROUTE_MAX_M=8192; default 2048), each beside bf16 eager / compile; outputs checked against
         # the reference in each run. Prediction (H200): M=1024 int8 564.6 -> ~548; M=8192 the gated layer on the
         # split-plane COOP form (~2 x the W8A8 int8 gated 1455 = ~2900 against cuBLAS on the widened copy ~3000), the
         # down layer kept on cuBLAS: int8 W8A16 4477 -> ~4380 (bf16 eager 4468, compile 4422: issue 3's "<= bf16")
    g4probe 2 90 7
    blockbench g4b 150 llama 1024 "ours int8 W8A16" "ws mid|w8a16" 6
    FUSED_W8A16_SPLIT_ROUTE_MAX_M=8192 blockbench big 220 llama 8192 "ours int8 W8A16" "ws mid|w8a16" 6 ;;
  g4split)  # forty-fourth session: the split-plane forms' GROUP_N 8 -> 4 (H100: ping-pong gated 377.5 -> 357.7 µs,
           # down 189.7 -> 168.8 at M=1024; COOP unchanged). The probe's GROUP_N 8 / 4 / 2 on both forms, 3 rounds in
           # alternating order, then the W8A16 blocks at M=1024 on the new default beside bf16 eager / compile, then
           # the split cuda tests. Prediction (H200): gated pp 355 -> ~337, int8 W8A16 block 564.6 -> ~548 (issue 3)
    g4probe 3 200 8
    timeout 280 python3 -m fused bench --blocks llama --m 1024 --configs "ours int8 W8A16,ours fp8 W8A16" \
      --baselines "bf16 compile" --out "$OUT/g4b" > "$OUT/g4b.log" 2>&1
    picks "$OUT/g4b/bench.json" "ws mid|w8a16" graph | cut -c1-300
    grep "^|" "$OUT/g4b.log" | grep -v "^|--" | head -12
    timeout 100 python3 -m pytest -q -p no:cacheprovider -m cuda -n 4 -rf --tb=short tests/test_w8a8_ws.py -k split \
      2>&1 | filt | tail -4 ;;
  m128now)  # forty-fourth session: the Llama block at M=128 with the current defaults (t64 forms offered, the
           # forty-third's eager fix), our four dense 8-bit configs beside bf16 eager / compile and torchao's fp8
           # rowwise in one process: graph and plain-call µs, the graph route picks
    timeout 560 python3 -m fused bench --blocks llama --m 128 --configs \
      "ours int8 W8A16,ours fp8 W8A16,ours fp8 W8A8,ours int8 W8A8" \
      --baselines "bf16 compile,torchao fp8 rowwise + compile" --out "$OUT/m128now" > "$OUT/m128now.log" 2>&1
    picks "$OUT/m128now/bench.json" "ws mid|h in|h out|w8a16" graph | cut -c1-400
    grep "^|" "$OUT/m128now.log" | grep -v "^|--" | head -30 ;;
  plain128)  # forty-third session: the W8A8 blocks' plain calls at M=128 against graph time, with and without the
            # split-K forms offered (.ci/plain128.py)
    for v in 1 0; do FUSED_WS_SPLITK=$v timeout 250 python3 .ci/plain128.py 2>&1 | filt | tee -a "$OUT/plain128.txt"; done
    ;;
  ncudown128)  # forty-third session: why split-K did not speed up the M=128 W8A16 down GEMM (H100: Triton 52.3, ws split
              # 54.3, ws split sk 52.5 µs). ncu of one launch each (.ci/down128_ncu.py). Prediction: L2 -> SM bytes
              # ~235 MB a call for every form (x re-read per 128 weight rows), L2 throughput > 70%, tensor pipe < 50%
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    timeout 400 "$NCU" --clock-control none --kernel-name regex:"w8_gemm|w8a8_ws" --launch-skip 4 --launch-count 4 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section LaunchStats \
      --metrics dram__bytes_read.sum,lts__t_bytes.sum,l1tex__m_xbar2l1tex_read_bytes.sum,smsp__inst_executed.sum \
      -o "$OUT/down" python3 .ci/down128_ncu.py > "$OUT/ncudown_run.txt" 2>&1
    tail -3 "$OUT/ncudown_run.txt"
    "$NCU" -i "$OUT/down.ncu-rep" --page details > "$OUT/ncudown.txt" 2>&1; rm -f "$OUT/down.ncu-rep"
    grep -E "^  [a-zA-Z_0-9]+.*\(|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Hit|L2 Hit \
Rate|Compute \(SM\) Throughput|Grid Size|Block Size|Mem Busy|Max Bandwidth|Issue Slots Busy|dram__bytes|lts__t_bytes|\
xbar2l1tex|smsp__inst_executed" "$OUT/ncudown.txt" | head -80 ;;
  ncucoop)  # fortieth session (NOTES lead 0 after the fortieth): why the fp8 gated GEMM at M=1024 spends 143 mJ on the
           # Gluon COOP kernel against cuBLAS's 133 (the block is at the power cap there). ncu of one launch each
           # (.ci/coop_ncu.py): DRAM and L2 bytes, L2 hit rate, SM and tensor throughput. Prediction: cuBLAS moves
           # fewer L2 -> SM bytes (2-CTA clusters with TMA multicast of the shared operand) at a similar DRAM byte count
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    timeout 300 "$NCU" --clock-control none --kernel-name regex:"w8a8_ws|gemm|cutlass|xmma" --launch-skip 2 \
      --launch-count 2 --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy --metrics \
      dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,l1tex__m_xbar2l1tex_read_bytes.sum,smsp__inst_executed.sum \
      -o "$OUT/coop" python3 .ci/coop_ncu.py > "$OUT/ncucoop_run.txt" 2>&1
    tail -3 "$OUT/ncucoop_run.txt"
    "$NCU" -i "$OUT/coop.ncu-rep" --page details > "$OUT/ncucoop.txt" 2>&1; rm -f "$OUT/coop.ncu-rep"
    grep -E "^  [a-zA-Z_0-9]+.*\(|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Hit|L2 Hit Rate|\
Compute \(SM\) Throughput|Cluster Size|Grid Size|Block Size|Registers Per|Shared Memory Config|Achieved Occupancy|\
Mem Busy|Max Bandwidth|dram__bytes|lts__t_bytes|xbar2l1tex|smsp__inst_executed" "$OUT/ncucoop.txt" | head -70 ;;
  tw)  # run at 7a6823c (TRANSFORM removed after it lost).
      # Fortieth session (NOTES lead 2): the Gluon W8A16 GEMM with a transform partition (2 warps widen each W tile
      # into a bf16 ring in shared memory; the consumers' wgmma take both operands from there with a group in flight,
      # where the register-operand form waits for each step: ncuws, 47% of stalls at barriers). Its cuda tests, then
      # Llama layers at M=1024 (do_bench, L2 flushed) against the shipped form and cuBLAS bf16. Prediction: down 177 ->
      # ~160 µs, gated 401 -> ~360 (cuBLAS bf16 ~149 / ~330); a miss means shared-memory bandwidth (the transform's
      # stores beside both operands' wgmma reads) or the 168-register cap of 11 warps bind it
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_w8a16_ws.py 2>&1 | filt \
      | tail -4
    WS_CFGS='[{}, {"TRANSFORM": true}, {"TRANSFORM": true, "WSTAGES": 3, "STAGES": 3, "GATED_STAGES": 2}]' \
      timeout 150 python3 .ci/ws_probe.py 1024 2>&1 | filt | grep -v "^correct M=1 " | tail -8
    WS_FP8=1 WS_CFGS='[{}, {"TRANSFORM": true}]' timeout 100 python3 .ci/ws_probe.py 1024 2>&1 | filt | tail -2 ;;
  qxdown)  # run at 7a6823c (x_amax removed after it lost).
            # Fortieth session (NOTES lead 0): the fp8 / int8 W8A8 down GEMM quantizing bf16 h on load with a per-token
          # absmax handed over as int32 bit patterns (w8_gemm x_amax), every tuner candidate, against act_quant(h) +
          # the down GEMMs the block runs now; sustained µs and mJ (the blocks run at the 700 W cap from M=1024).
          # Prediction: if the conversion hides under the fp8 MMAs, the best candidate <= act_quant(h) + Triton down
          # (1024: 12.5 + 78.7 µs) minus ~8 µs; a loss means the conversion (~2.5 instructions a bf16 element, each
          # x tile converted N/BLOCK_N times) or the 2-byte x stages bind it, as the 1x128-group form did at M=128
    ENERGY_COOL_S=0.5 ENERGY_WARM_S=0.5 ENERGY_WINDOW_S=1.5 timeout 280 python3 .ci/energy_parts.py 1024,8192 \
      qxdowncfg 2>&1 | filt | tail -32
    ENERGY_COOL_S=0.5 ENERGY_WARM_S=0.5 ENERGY_WINDOW_S=1.5 timeout 200 python3 .ci/energy_parts.py 1024 \
      qxdown8cfg 2>&1 | filt | tail -16 ;;
  occ128)  # run at 7a6823c (the two tiles removed after they lost).
            # Fortieth session (NOTES lead 1): 2+ CTAs per SM for the W8A16 split GEMMs at M=128 (a 256 x 32 gated tile
           # with 64 accumulator registers a thread, 2 stages; a 2-stage 128 x 64 stacked down tile, 48 KB), w8_gemm
           # retuned with them among the candidates. Prediction: the ncusplit stalls (barriers at 12% occupancy) hide
           # behind a second CTA: gated 68.6 -> ~60 µs, down 40.3 -> ~36, block 111.8 -> ~100; the 256 x 32 tile reads
           # x twice as often from L2 (448 tiles) and may lose on that
    retune128 occ 400 "ours int8 W8A16,ours fp8 W8A16" "'split'" ;;
  split256)  # thirty-ninth session (no machine then): 256-row stacked tiles (128 tokens' planes in one tile, 256x64 /
             # 256x128, 8 warps) offered for the W8A16 split GEMMs at 65 <= M <= 128. The cuda test of every STACK
             # candidate (M = 100 adds the 256-row ones; int8 bit-equal to the unstacked tile), then the int8 / fp8
             # W8A16 Llama blocks at M=128 with w8_gemm retuned (its shipped picks timed beside every candidate).
             # Prediction: if the down's 128-row tiles are bound by L2 reads (`ncusplit`), its 256-row tile 46.4 ->
             # ~30 µs and the block 114 -> ~100; the gated GEMM unchanged (its L2 bytes are the same either way)
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_kernels_w8.py -k stacked \
      2>&1 | filt | tail -3
    retune128 s256 360 "ours int8 W8A16,ours fp8 W8A16" "'split'" ;;
  down256)  # thirty-ninth session (no machine then): a 128 x 256 tile (all 128 tokens against 256 outputs, 8 warps,
            # split-K up to 8) offered to the W8A8 GEMM at 65 <= M <= 256. At M=128 the fp8 down projection takes
            # 30.2 µs on cuBLAS and 34.7 on Triton's 128 x 64 split-4 pick (58.7 MB: ~15 µs of DRAM), and the block
            # is 76.0 against issue 4's 70. The fp8 / int8 W8A8 Llama blocks at M=128 with w8_gemm retuned.
            # Prediction: if x's re-reads from L2 (~176 MB per call for the pick, ~88 MB for this tile) bound the down
            # GEMM, Triton's down ~24 µs, ahead of cuBLAS, block 76 -> ~70; the earlier 64 x 256 / 128 x 128 split-8
            # tiles (117-146 MB) lost to the pick, so a loss here is the likelier outcome: then the pick's limiter is
            # not L2 bytes (`ncusplit`)
    FUSED_RETUNE=w8_gemm timeout 420 python3 -m fused bench --blocks llama --m 128 --no-baselines \
      --configs "ours fp8 W8A8,ours int8 W8A8" --out "$OUT/d256" > "$OUT/d256.log" 2>&1
    grep "^|" "$OUT/d256.log" | grep -v "^|--" | head -8
    cands "$OUT/d256/bench.json" "w8_gemm" | head -40
    picks "$OUT/d256/bench.json" "w8a8_route" "128"
    python3 .ci/picks_to_tuned.py "$OUT/d256/bench.json" 2>&1 | filt
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  ncusplit)  # thirty-ninth session (no machine then; NOTES "thirty-ninth"): why W8A16 at M=128 (issue 3: block 114 µs
             # against 75) runs its split-plane GEMMs at ~half their floor (down 46.4 µs for 58.7 MB and 30 G int8 ops:
             # ~15 µs of DRAM, ~19 of tensor work). ncu of the shipped int8 picks (gated 64x128 SPLIT 1; down stacked
             # 128x64 SPLIT 2) and of the down's stacked 128x128 tile with SPLIT 4 / 8 (half the L2 bytes, lost the
             # tuning). Prediction (arithmetic, not measured): the down pick's L2 throughput near its peak (~352 MB
             # of x + weight tile reads per call), tensor pipe < 50%; if instead the shared-memory pipe (64-wide
             # wgmma: A + B bytes per MAC twice the 128-wide's) or the stalls at the K loop's wait dominate, the next
             # form is a 256-row stacked tile (all 128 tokens' planes, both warpgroups, B read once per tile)
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    timeout 400 "$NCU" --clock-control none --kernel-name regex:w8_gemm --launch-count 8 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy \
      --section WarpStateStats --section SchedulerStats --section LaunchStats \
      -o "$OUT/split" python3 .ci/diag.py ncusplit128 > "$OUT/ncusplit_run.txt" 2>&1
    tail -3 "$OUT/ncusplit_run.txt"
    "$NCU" -i "$OUT/split.ncu-rep" --page details > "$OUT/ncusplit.txt" 2>&1
    rm -f "$OUT/split.ncu-rep"
    PAT="^config|^  [a-z_0-9]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput"
    PAT="$PAT|L1/TEX Cache|DRAM Through|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers Per"
    PAT="$PAT|Achieved Occupancy|Waves Per SM|Shared Memory|Est. Speedup|Stall"
    grep -E "$PAT" "$OUT/ncusplit_run.txt" "$OUT/ncusplit.txt" | head -120 ;;
  ncuws)  # thirty-eighth session (no machine then; NOTES lead 4): the W8A16 Gluon GEMM's stalls per SASS line, for the
          # transform-warpgroup question. Its consumer K loop has two warpgroup bar.syncs per step (before the ready
          # wait and before the one-thread empty arrive: Gluon's lowering) and waits for its wgmma before widening the
          # next A. Prediction: most stall samples at those BAR.SYNCs and at the wgmma wait (DEPBAR), few on the
          # widening's LDS / PRMT: then the consumers idle on each other and on their own wgmma, which a transform
          # warpgroup (SS wgmma, one group in flight) removes; if the LDS / widening lines dominate, it is the widening
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    timeout 300 "$NCU" --clock-control none --kernel-name regex:"w8a16_ws" --launch-skip 2 --launch-count 2 \
      --section WarpStateStats --section SourceCounters --section SpeedOfLight --import-source no \
      -o "$OUT/ws" python3 .ci/ws_ncu.py > "$OUT/ncuws_run.txt" 2>&1
    tail -3 "$OUT/ncuws_run.txt"
    for i in 1 2; do
      "$NCU" -i "$OUT/ws.ncu-rep" --page source --csv --print-source sass --kernel-name regex:w8a16_ws \
        --launch-skip $((i - 1)) --launch-count 1 > "$OUT/ncuws_sass$i.csv" 2>&1
      python3 .ci/ncu_stalls.py "$OUT/ncuws_sass$i.csv" 24 | tee "$OUT/ncuws_stalls$i.txt"
    done
    "$NCU" -i "$OUT/ws.ncu-rep" --page details > "$OUT/ncuws.txt" 2>&1; rm -f "$OUT/ws.ncu-rep"
    grep -E "^  [a-z_0-9]+.*\(|Duration|Warp Cycles Per Issued|Stall|stalled" "$OUT/ncuws.txt" | head -30 ;;
  ncupp)  # thirty-first session, after ppwait (pp down M=1024 175-181 µs = 663-686 TFLOP/s against bf16 cuBLAS's 807):
          # ncu of pp (down, gated gate/up) and of cuBLAS's bf16 GEMM: tensor pipe active, L2 / shared-memory throughput,
          # stalls per SASS line of pp. Prediction: tensor pipe ~70% in pp against ~90% in cuBLAS; if L2 throughput is
          # near its peak, a 2-CTA cluster multicasting the x tile is the next step; if the stalls sit at the
          # wgmma wait, the widening per K step is too slow to hide
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    timeout 400 "$NCU" --clock-control none --kernel-name regex:"w8a16_ws|nvjet|gemm|cutlass" --launch-skip 3 \
      --launch-count 3 --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section WarpStateStats --section SchedulerStats --section LaunchStats --section SourceCounters \
      --import-source no -o "$OUT/pp" python3 .ci/ws_ncu.py > "$OUT/ncupp_run.txt" 2>&1
    tail -3 "$OUT/ncupp_run.txt"
    "$NCU" -i "$OUT/pp.ncu-rep" --page details > "$OUT/ncupp.txt" 2>&1
    "$NCU" -i "$OUT/pp.ncu-rep" --page source --csv --print-source sass --kernel-name regex:w8a16_ws \
      --launch-count 1 > "$OUT/ncupp_sass.csv" 2>&1
    rm -f "$OUT/pp.ncu-rep"; ls -la "$OUT"
    grep -E "^  [a-z_0-9]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache|DRAM Through|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers Per|Executed Ipc A|Est. Speedup|Stall" \
      "$OUT/ncupp.txt" | head -90 ;;
  ppwait)  # thirty-first session: wsmore showed pp at 561-607 TFLOP/s; its SASS waits for every k16 wgmma (DEPBAR 0
           # after each HGMMA: ptxas cannot pipeline a register-A wgmma group left in flight across the loop). Now each
           # consumer issues its K step's 4 wgmma back to back and waits once (the other consumer's widening fills the
           # gap). Prediction: down M=1024 198 -> ~160-170 µs, gated gate/up 416 -> ~350-370, block 644 -> ~560-590
    timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_w8a16_ws.py 2>&1 | filt \
      | tail -3
    WS_CFGS='[{"PP": true}, {"PP": true, "STAGES": 3}, {"PP": true, "BLOCK_K": 128, "STAGES": 2},
      {"PP": true, "GROUP_N": 16}]' \
      timeout 200 python3 .ci/ws_probe.py 1024,8192 2>&1 | filt | grep -v "^correct M=1 " | tee "$OUT/ppwait.txt"
    echo ".ci/ws_block.py was removed in the thirty-first session: the route is in dispatch (mode wsroute)" ;;
  wsmore)  # thirtieth session, compiled for sm_90 on the CPU (168 registers, no spills), not yet run: the transposed
           # Gluon W8A16 GEMM (fused/kernels/w8a16_ws.py) with 256-token tiles at other stage counts / BLOCK_K 128,
           # beside widen + cuBLAS (the 4-stage 64-K tile ran 533-567 TFLOP/s, widen + cuBLAS 552-671). Prediction:
           # within +-5% of the 4-stage tile; a win over widen + cuBLAS needs ~700: the two-consumer form (pp: each
           # warpgroup a partition of its own, so one widens while the other's wgmma runs) is the candidate for it.
           # (1) the cuda tests of the Gluon forms, (2) the variants per layer at M=1024, (3) the Llama block on pp
           # (gated pp + pp) against bf16 eager and the shipped int8 W8A16 block at M = 1024 / 8192
    timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_w8a16_ws.py 2>&1 | filt \
      | tail -3
    WS_CFGS='[{"BLOCK_T": 256, "STAGES": 3}, {"BLOCK_T": 256, "STAGES": 4}, {"BLOCK_T": 256, "STAGES": 5},
      {"BLOCK_T": 256, "BLOCK_K": 128, "STAGES": 2}, {"BLOCK_T": 256, "STAGES": 4, "GROUP_N": 16}, {"PP": true},
      {"PP": true, "STAGES": 3}]' \
      timeout 220 python3 .ci/ws_probe.py 1024 2>&1 | filt | grep -v "^correct M=1 " | tee "$OUT/wsmore.txt"
    echo ".ci/ws_block.py was removed in the thirty-first session: the route is in dispatch (mode wsroute)" ;;
  pair)  # twenty-eighth session, CPU-tested: gated_pair (torch.compile's gate/up pair of a per-Linear block) at M >= 1024
         # widens its weights (it ran the half-rate mixed-input GEMM) and has the cuBLAS routes (W8A16, W8A8). Prediction:
         # per-Linear + compile within ~3% of the block conversion at M=1024 / 8192 (Llama int8 W8A16 ~690 / ~4600 µs;
         # fp8 W8A8 a few % behind: no quantized hand-off between the compiled layers)
    timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_kernels_w8.py \
      tests/test_compile_passes.py -k "pair or compile" 2>&1 | filt | tail -3
    timeout 400 python3 .ci/pair_probe.py 1024,8192 2>&1 | filt | tee "$OUT/pair_probe.txt" ;;
  halves)  # twenty-eighth session (measured, not kept: the code was reverted, so (2) and (3) now run the stacked
            # product twice): a gated layer's cuBLAS product as two GEMMs of H columns into [2, M, H]
            # (dispatch.CUBLAS_HALVES). Prediction: raw bf16 gate|up at M=1024 ~340 -> ~315-328 µs (the tile bf16 eager and
            # torchao get for N=14336); Llama int8 W8A16 M=1024 block ~690 -> ~665-675; fp8 / int8 W8A8 where cuBLAS takes
            # gate/up: a few % at most; 8192 unknown (the probe tells). (1) the raw GEMMs, (2) cuda tests, (3) block A/B
    timeout 150 python3 .ci/halves_probe.py 128,1024,8192 2>&1 | filt | tee "$OUT/halves_probe.txt"
    timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_handoff.py \
      tests/test_kernels_w8.py -k "cublas or handoff or epilogue" 2>&1 | filt | tail -3
    for H in 0 1; do
      FUSED_CUBLAS_HALVES=$H timeout 150 python3 -m fused bench --blocks llama --m 1024,8192 --no-baselines --configs \
        "ours int8 W8A16,ours fp8 W8A8" --out "$OUT/halves$H" 2>&1 | filt > "$OUT/halves$H.log"
      grep "^llama" "$OUT/halves$H.log" | cut -c1-90 | sed "s/^/halves=$H /"
    done ;;
  sustain)  # prepared in the twenty-seventh session (CPU-tested, not yet run): routes over 1 ms timed sustained
            # (dispatch.LONG_ROUTE_US: 1 s warm-up, 250 ms windows, eager pick = graph pick). (1) its cuda tests; (2) the
            # W8A16 / W8A8 rows at M=8192, both blocks; (3) W8A16 at M=1024 with split activations as a third route
            # candidate (dispatch.SPLIT_ROUTE_MAX_M). Prediction: plain calls within ~2% of their graph time at 8192
            # (GPT int8 W8A16 plain 3978 -> ~3600, Llama 4580 -> ~4480); graph cells unchanged within the spread; at
            # 1024 split picked where it is faster, Llama W8A16 699.5 / 702.5 -> 650-700 (no worse: a timed route)
    timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_dispatch.py 2>&1 | filt \
      | tail -3
    timeout 420 python3 -m fused bench --blocks llama,gpt --m 1024,8192 --no-baselines --configs \
      "ours int8 W8A16,ours fp8 W8A16,ours fp8 W8A8,ours int8 W8A8" --out "$OUT/sustain" 2>&1 | filt \
      > "$OUT/sustain.log"
    grep "^llama\|^gpt" "$OUT/sustain.log" | cut -c1-110
    python3 -c "
import json; d = json.load(open('$OUT/sustain/bench.json'))
for k, v in d['timings'].items():
    if 'w8a16_route' in k and ', 1024,' in k: print(k[:100], v)" ;;
  wovs)  # prepared in the twenty-seventh session: where torchao's fp8 weight-only + compile gains on our W8A16 at M=1024
         # (Llama 691.7 vs 699.5 / 702.5, GPT 526.4 vs 550.7): per-kernel GPU µs of both in CUDA graphs, both blocks
    timeout 200 python3 .ci/wo_vs_torchao.py 1024 llama 2>&1 | filt > "$OUT/wovs_llama.txt"
    timeout 200 python3 .ci/wo_vs_torchao.py 1024 gpt 2>&1 | filt > "$OUT/wovs_gpt.txt"
    grep -A8 "graph" "$OUT"/wovs_*.txt | cut -c1-150 ;;
  spread)  # twenty-seventh session: the fp8 W8A8 block at M=8192 took 2671 µs (graph) / 2476 (plain) in one process and
           # 2436 / 2425 in the next with the same routes; route_ab's Triton first layer drifted 2547 -> 2684 over three
           # rounds while cuBLAS held 2434. Fresh graph captures at shifted addresses, each timed and profiled per
           # kernel, with the SM clock, power and throttle reasons logged beside. Tells address vs clock vs kernel
    (nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
      --format=csv,noheader -lms 250 > "$OUT/smi.csv" 2>&1) & P=$!
    timeout 240 python3 .ci/spread_probe.py 8192,1024 fp8 5 2>&1 | filt > "$OUT/spread_fp8.txt"
    timeout 120 python3 .ci/spread_probe.py 8192 int8 4 2>&1 | filt > "$OUT/spread_int8.txt"
    kill $P; grep "SUMMARY\|capture\|Error" "$OUT"/spread_*.txt | cut -c1-160
    python3 -c "
import csv,sys
r=[x for x in csv.reader(open('$OUT/smi.csv')) if len(x)>=6]
c=[float(x[1].split()[0]) for x in r if x[1].strip()[0].isdigit()]
p=[float(x[3].split()[0]) for x in r if x[3].strip()[0].isdigit()]
print('smi samples',len(r),'sm MHz min/max',min(c,default=0),max(c,default=0),'power W max',max(p,default=0))
print('throttle reasons seen', sorted(set(x[5].strip() for x in r)))" ;;
  routeab)  # prepared in the twenty-sixth session (fp8 W8A8 M=8192 took 2696 µs where the gated layer's route
            # timing kept Triton by 1%, against 2434-2466 in runs that took cuBLAS): (1) .ci/route_ab.py, each
            # first-layer route forced in one process, alternating, bf16 eager beside; (2) the block with
            # FUSED_BLOCK_ROUTE_MIN_M 0 / 1025 (the first layer's route timed as whole blocks); (3) its cuda test.
            # Prediction: cuBLAS's first layer 150-250 µs faster at 8192 in (1), and (2) with it on takes it: fp8
            # W8A8 8192 ~2450-2550 on a machine where bf16 eager takes ~4650; M=1024 within +-2%
    timeout 150 python3 .ci/route_ab.py 8192,1024 fp8 2>&1 | filt | tee "$OUT/route_ab.txt" | grep "graph µs\|picks"
    ab FUSED_BLOCK_ROUTE_MIN_M "0 1025" 4 130 --m 8192 --configs "ours fp8 W8A8,ours int8 W8A8"
    timeout 90 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_dispatch.py -k block_first \
      2>&1 | filt | tail -3 ;;
  fullA|fullB|fullC)  # the README table with every baseline in three calls (one `fullfloor` process no longer
                      # fits 600 s: it reached M=128 in the twenty-sixth session): A = M 1,16 (+ the read floor),
                      # B = 128,1024, C = 8192; each its own process, bf16 eager in each
    m=$([ "$1" = fullA ] && echo 1,16 || { [ "$1" = fullB ] && echo 128,1024 || echo 8192; })
    timeout 570 python3 -m fused bench --blocks llama --sparse-baselines --floor --m "$m" --configs \
      "ours int8 W8A16,ours int8 W8A8,ours fp8 W8A8,ours fp8 W8A16,ours int8 2:4 W8A16,ours fp8 2:4 W8A8,"\
"ours int8 2:4 W8A8" \
      --out "$OUT/$1" 2>&1 | filt > "$OUT/$1.log"
    grep "^llama" "$OUT/$1.log" | cut -c1-150; rm -f "$OUT/$1/bench.png" ;;
  fullfloor)  # twenty-sixth session: the README table in ONE process (every config and baseline, the sparse baselines
              # and the read floor rows beside them); rows are logged as they finish, so a cut run still names them
    timeout 570 python3 -m fused bench --blocks llama --sparse-baselines --floor --out "$OUT/full" 2>&1 | filt \
      > "$OUT/full.log"
    if grep -q "^|" "$OUT/full.log"; then grep "^|" "$OUT/full.log" | grep -v "^|--" | tail -48 | cut -c1-150
    else grep "^llama" "$OUT/full.log" | cut -c1-150; fi ;;
  floor)  # prepared in the twenty-fifth session (CPU-tested, not yet run on a GPU): `bench --floor`, the read floor
          # rows measured in the bench's own process (fused/kernels/read_floor.py; .ci/evict_probe.py gave 49.6 / 33.3)
    timeout 300 python3 -m fused bench --blocks llama --m 1,16 --no-baselines --floor \
      --configs "ours int8 W8A16,ours int8 2:4 W8A16" --out "$OUT/floor" > "$OUT/floor.log" 2>&1
    grep "^|" "$OUT/floor.log" | grep -v "^|--" | head -6
    rm -f "$OUT"/*/bench.png ;;
  evictfinal)  # twenty-fifth session, last: (1) the M = 1 / 16 rows with the shipped picks (policy on); (2) the cuda
               # tests of sparse24_mma (its inline PTX carries the hint); (3) the decode chain with one program per item
               # (`sixteenth1`'s lead, never run: registers 142 -> 80, ~6 programs per SM instead of 3; a pure-read
               # pair in a graph takes ~6 µs more than one read of the same bytes, the most one launch can save);
               # prediction: a p=0 candidate within 2 µs of the two launches or under them; (4) the GEMV cuda tests
    timeout 120 python3 -m fused bench --blocks llama --no-baselines --m 1,16 --configs \
      "ours int8 W8A16,ours int8 W8A8,ours fp8 W8A16,ours fp8 W8A8,ours int8 2:4 W8A16,ours fp8 2:4 W8A8,"\
"ours int8 2:4 W8A8" \
      --out "$OUT/final" > "$OUT/final.log" 2>&1
    grep "^|" "$OUT/final.log" | grep -v "^|--" | head -9
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_kernels_sparse24_mma.py \
      2>&1 | filt | grep -v "^  \|^$" | tail -4
    timeout $((500 - SECONDS)) python3 -m pytest -q -p no:cacheprovider -m cuda -rf -s tests/test_decode_chain.py \
      -k timing 2>&1 | filt | grep "chain\|passed\|failed\|rror" | head -12
    timeout $((590 - SECONDS)) python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short \
      tests/test_kernels_w8.py -k gemv 2>&1 | filt | grep -v "^  \|^$" | tail -4
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  evict3)  # twenty-fifth session, after evict2 (policy on by default, the dense M=1 picks retuned with it: int8 W8A16
           # 61.3 -> 59.3, fp8 W8A8 60.9 -> 58.2): (1) the GEMV cuda tests with the policy (every fine / prmt one);
           # (2) the 2:4 M = 1 / 16 rows retuned with the policy on (the mma's hint gave +-0.2 with the old picks)
    timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_kernels_w8.py \
      -k "gemv_fine or gemv_prmt or gemv_deterministic or dispatch_cuda" 2>&1 | filt | grep -v "^  \|^$" | tail -4
    FUSED_RETUNE=sparse24_gemv,sparse24_mma timeout $((590 - SECONDS)) python3 -m fused bench --blocks llama \
      --m 1,16 --no-baselines --configs "ours int8 2:4 W8A16,ours fp8 2:4 W8A8" --out "$OUT/r24" > "$OUT/r24.log" 2>&1
    grep "^|" "$OUT/r24.log" | grep -v "^|--" | head -4
    cands "$OUT/r24/bench.json" sparse24_mma
    routes "$OUT/r24/bench.json" | grep "_graph" | head -8
    python3 .ci/picks_to_tuned.py "$OUT/r24/bench.json" 2>&1 | filt
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  evict2)  # twenty-fifth session, after `evict` (probe: the dirty flush costs a 117 MB read 7.6 µs, evict_first wins 3.5;
           # block int8 W8A16 M=1 61.1 -> 59.6, the others +-0.4): (1) the method's floor (one pure-read kernel
           # of the block's bytes, graph + do_bench); (2) the A/B twice, order swapped, every M=1/16 config; (3) the
           # GEMV retuned with the policy on (the fp8 STAGES picks load by cp.async, which drops the policy)
    timeout 100 python3 .ci/evict_probe.py floor 2>&1 | filt | grep "^evict" | tee "$OUT/evict_floor.txt"
    for v in 1 0 1 0; do
      FUSED_W_EVICT=$v timeout 80 python3 -m fused bench --blocks llama --no-baselines --m 1,16 --configs \
        "ours int8 W8A16,ours int8 W8A8,ours fp8 W8A16,ours fp8 W8A8,ours int8 2:4 W8A16" --out "$OUT/ab$v" \
        > "$OUT/ab$v.log" 2>&1
      echo "FUSED_W_EVICT=$v"; grep "^|" "$OUT/ab$v.log" | grep -v "^|--\|config" | head -6
    done
    FUSED_W_EVICT=1 FUSED_RETUNE=w8a16_gemv timeout $((590 - SECONDS)) python3 -m fused bench --blocks llama --m 1,16 \
      --no-baselines --configs "ours int8 W8A16,ours fp8 W8A16,ours fp8 W8A8" --out "$OUT/retune" \
      > "$OUT/retune.log" 2>&1
    grep "^|" "$OUT/retune.log" | grep -v "^|--" | head -6
    cands "$OUT/retune/bench.json" w8a16_gemv
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  evict)  # twenty-fifth session: do_bench flushes L2 by zeroing 256 MB, leaving the L2 (60 MB) full of dirty lines;
          # the first weight stream after it evicts them and their write-back shares DRAM with its reads. The third
          # session's fit gave ~8 µs "fixed" per flushed kernel (38.0 / 23.0 µs pure reads of 117 / 59 MB) and a graph
          # pair 8.5 below the sum: one such cost per flush. Weight loads with L2 evict_first (FUSED_W_EVICT=1) make
          # the stream its own victim. Prediction: pure read 117 MB dirty-flush normal ~38 -> evict_first ~31 (the
          # clean-flush figure); block (graph, one flush per replay) int8 W8A16 M=1 61.4 -> ~54, int8 2:4 50.2 -> ~44.
          # (1) the probe (pure reads: flush dirty / clean x policy normal / evict_first); (2) the blocks off / on
    timeout 170 python3 .ci/evict_probe.py 2>&1 | filt | grep "^evict" | tee "$OUT/evict_probe.txt"
    ab FUSED_W_EVICT "0 1" 6 $(( (590 - SECONDS) / 2 )) --m 1,16 \
      --configs "ours int8 W8A16,ours fp8 W8A8,ours int8 2:4 W8A16"
    rm -f "$OUT"/*/bench.png ;;
  mma24)  # twenty-second session: the first run found the metadata word misread (fixed: 32 consecutive K columns of
          # one row per lane), then right (65 dB) but 2.2x slower than quad (gate/up 81 vs 36 µs; ncu: DRAM 22%, L1 62%,
          # MIO stalls, 4-byte per-lane loads of strided rows). Now 128-column steps with 16-byte loads (values and planes,
          # the K order permuted inside the step so each lane's A words are one run), meta as two 8-byte loads + one prmt,
          # the weights one step ahead in registers. (1) cuda tests (mmaprobe if red); (2) the layers alone (mma24);
          # (3) the 2:4 rows at M = 1 / 16 with FUSED_S24_MMA=1 and the route timings. Second run: right, gate/up 41.9
          # (act_split 5.7 of it) vs quad 36.4, down 29.4 (7.3) vs 22.1; ncu: DRAM 41%, scoreboard stalls, L1 hit 19%
          # (the streamed weights evict x), 90 registers, 1.36 waves. Run 6 (mma24b) with L1::no_allocate, PF 2 and
          # sparse24_mma_x: < 1 µs better. Since: the loop loads U steps per iteration with FENCE (see mma24b); this
          # full form adds e4m3 and M = 16 (where cuSPARSELt won: 37.7 / 29.9)
    export FUSED_S24_MMA=1
    timeout 220 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_kernels_sparse24_mma.py \
      2>&1 | filt | grep -v "^  \|^$" | tail -8 | tee "$OUT/mma_test.txt"
    if grep -q "failed\|error" "$OUT/mma_test.txt"; then  # a timeout with no failure goes on (the bench checks outputs)
      timeout 120 python3 .ci/diag.py mmaprobe 2>&1 | filt | grep "^mmaprobe"; exit 0
    fi
    timeout 120 python3 .ci/diag.py mma24 2>&1 | filt | grep "^mma24\|^   "
    timeout $((575 - SECONDS)) python3 -m fused bench --blocks llama --m 1,16 --no-baselines \
      --configs "ours int8 2:4 W8A16,ours fp8 2:4 W8A8,ours int8 2:4 W8A8" --out "$OUT/mma" > "$OUT/mma.log" 2>&1
    grep "^|" "$OUT/mma.log" | grep -v "^|--" | head -5
    routes "$OUT/mma/bench.json" | grep "_graph" | head -12  # the CUDA-graph route timings (mma among them)
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  twentythird)  # twenty-third session: the route's mma on by default (PAIRS, PDL, shipped picks): (1) every
                # sparse24_mma cuda test (e4m3's PAIRS included); (2) ncu of the shipped M=1 picks (gate/up, down). Mma24b run 9:
                # gate/up 33.7, down 21.8, block int8 2:4 W8A16 M=1 52.1; what limits the loop now at ~2.2 TB/s?
                # (3) XF candidates (x fragments loaded before the FENCE barrier with the weights: the SASS had the
                # step's x loads after it, their latency added to the weights'). Prediction: XF -1..-3 µs gate/up
    timeout 240 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_kernels_sparse24_mma.py \
      2>&1 | filt | grep -v "^  \|^$" | tail -6
    MMA24_FMTS=int8 MMA24_MS=1 timeout 120 python3 .ci/diag.py mma24 2>&1 | filt | grep "^mma24\|^   "
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    timeout $((560 - SECONDS)) "$NCU" --clock-control none --kernel-name regex:sparse24_mma --launch-count 6 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
      --section SchedulerStats --section LaunchStats --section InstructionStats python3 .ci/diag.py ncumma \
      > "$OUT/ncumma.txt" 2>&1
    grep -E "^ncumma|_mma_kernel|DRAM Throughput|Duration|Achieved Occupancy|Registers Per|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Stall|stalled|Est. Speedup|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Executed Ipc" \
      "$OUT/ncumma.txt" | head -80 ;;
  twentyfourth1)  # next session, first: the sparse24_mma candidates at M=1 (PFD, and STAGES: opt-in until verified),
                  # layers alone with each candidate's dB against quad (a wrong candidate shows there), then the
                  # int8 cuda tests of every candidate (M = 1 / 7 / 16). If green and a STAGES pick wins,
                  # FUSED_S24_MMA_STAGES may default to 1. Then `twentyfourth2`
    export FUSED_S24_MMA=1 FUSED_S24_MMA_STAGES=1
    MMA24_FMTS=int8 MMA24_MS=1 timeout 200 python3 .ci/diag.py mma24 2>&1 | filt | grep "^mma24\|^   "
    timeout $((560 - SECONDS)) python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short \
      tests/test_kernels_sparse24_mma.py -k "every_candidate and int8" 2>&1 | filt | grep -v "^  \|^$" | tail -6 ;;
  twentyfourth2)  # the 2:4 rows at M = 1 / 16 with sparse24_mma retuned (its shipped picks timed against every
                  # candidate) beside torchao's fp8 2:4; ship the picks with
                  # `.ci/picks_to_tuned.py OUT/s24/bench.json --match sparse24_mma`
    export FUSED_S24_MMA=1 FUSED_S24_MMA_STAGES=${FUSED_S24_MMA_STAGES:-1}
    FUSED_RETUNE=sparse24_mma timeout $((560 - SECONDS)) python3 -m fused bench --blocks llama --m 1,16 --no-baselines \
      --sparse-baselines --configs "ours int8 2:4 W8A16,ours int8 2:4 W8A8,ours fp8 2:4 W8A8" --out "$OUT/s24" \
      > "$OUT/s24.log" 2>&1
    grep "^|" "$OUT/s24.log" | grep -v "^|--" | head -16
    routes "$OUT/s24/bench.json" | grep "_graph" | head -12
    rm -f "$OUT"/*/bench.png ;;
  ncufine)  # after fineship: ncu of the int8 M=1 gate/up GEMV, the new 16x512 4-warp pick against the old 32x512
            # 8-warp one and the split-doubled 32x512 (896 items, lost): why the 16-row tile is faster
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    timeout 400 "$NCU" --clock-control none --kernel-name regex:w8a16_gemv --launch-count 6 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
      --section LaunchStats python3 -c "
import torch
from fused.kernels.w8a16_gemv import w8a16_gemv
from lowbit import quantize_weight
q, s = quantize_weight(torch.randn(28672, 4096, device='cuda'), 'int8')
x = torch.randn(1, 4096, device='cuda', dtype=torch.bfloat16)
base = dict(BLOCK_M=1, BLOCK_K=512, CVT='prmt')
for cfg in (dict(base, BLOCK_N=16, SPLIT_K=1, num_warps=4), dict(base, BLOCK_N=32, SPLIT_K=1, num_warps=8),
            dict(base, BLOCK_N=32, SPLIT_K=2, num_warps=8)):
    for _ in range(2):
        w8a16_gemv(x, q, s, None, 'silu', True, config=cfg)
    torch.cuda.synchronize(); print('ncufine', cfg)
" > "$OUT/ncufine.txt" 2>&1
    grep -E "^ncufine|w8a16_gemv|DRAM Throughput|Duration|Achieved Occupancy|Registers Per|Block Limit" \
      "$OUT/ncufine.txt" | head -60
    grep -E "Waves Per SM|Warp Cycles Per Issued|Stall Long|L1/TEX Hit|Mem Busy" "$OUT/ncufine.txt" | head -30 ;;
  fineship)  # after `fine`: the M=1 rows with the shipped picks (the 16-row int8 gate/up tile), no retune
    timeout $((280 - SECONDS)) python3 -m fused bench --blocks llama --m 1 --no-baselines \
      --configs "ours int8 W8A16,ours int8 W8A8,ours fp8 W8A16" --out "$OUT/ship" > "$OUT/ship.log" 2>&1
    grep "^|" "$OUT/ship.log" | grep -v "^|--" | head -6
    rm -f "$OUT"/*/bench.png ;;
  fine)  # twenty-fourth session: the M=1 GEMV's finer items (_fine_candidates: 16-row tiles or the split doubled).
         # The Llama gate/up picks have 448 items on 132 SMs (4 on some SMs, 3.4 on average): if the last wave's
         # imbalance is what keeps them at 42.9 µs (pure read 38.0), 896 items -> ~39; down (512 items) ~unchanged;
         # M=16 (BLOCK_M=16 picks, 448 items too) gate/up 44.5 -> ~40. Block int8 W8A16 M=1 64 -> ~60, M=16 66 -> ~62.
         # (1) their cuda test; (2) the M = 1 / 16 rows retuned; ship the picks if they win
    timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_kernels_w8.py -k fine 2>&1 \
      | filt | grep -v "^  \|^$" | tail -4
    FUSED_RETUNE=w8a16_gemv timeout $((420 - SECONDS)) python3 -m fused bench --blocks llama --m 1,16 \
      --no-baselines --configs "ours int8 W8A16,ours fp8 W8A16,ours fp8 W8A8" --out "$OUT/fine" > "$OUT/fine.log" 2>&1
    grep "^|" "$OUT/fine.log" | grep -v "^|--" | head -6
    cands "$OUT/fine/bench.json" w8a16_gemv
    python3 .ci/picks_to_tuned.py "$OUT/fine/bench.json" --match w8a16_gemv
    rm -f "$OUT"/*/bench.png ;;
  gemvpfd)  # twenty-third session (prepared, not run): the dense M=1 GEMV with PFD candidates (prefetch.global.L2 of
            # the weight tile 1 / 2 steps ahead, one address per 128-byte line: +1 CCTL per thread and step) and, for
            # int8, act_split + w8_mma (dense decode on mma.sync m16n8k32: the weights straight into the MMA, streamed
            # by cp.async; int8 and e4m3; sm_90 loop 106 instructions per 16x128 gated step vs ~290 per 64x256, 64
            # registers), the M=1 rows retuned (w8a16_gemv only: the shipped pick competes). First the w8_mma cuda
            # tests. Prediction: int8 W8A16 63 -> ~50 µs if the mma kernel streams at ~3.3 TB/s; PFD alone 63 -> ~58
            # if the GEMV is DRAM-latency bound as sparse24_mma was
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_kernels_w8_mma.py 2>&1 \
      | filt | grep -v "^  \|^$" | tail -6
    FUSED_GEMV_MMA=1 FUSED_RETUNE=w8a16_gemv timeout $((560 - SECONDS)) python3 -m fused bench --blocks llama --m 1 \
      --no-baselines --configs "ours int8 W8A16,ours fp8 W8A16,ours fp8 W8A8" --out "$OUT/gemv" > "$OUT/gemv.log" 2>&1
    grep "^|" "$OUT/gemv.log" | grep -v "^|--" | head -6
    cands "$OUT/gemv/bench.json" w8a16_gemv
    python3 .ci/picks_to_tuned.py "$OUT/gemv/bench.json" --match w8a16_gemv
    rm -f "$OUT"/*/bench.png ;;
  gemvmma16)  # after gemvpfd: the dense M=16 rows with w8_mma's candidates (a column set per plane and token tile)
              # against the GEMV's shipped pick (w8a16_gemv retuned). Prediction: int8 W8A16 M=16 66 -> ~52 µs if
              # w8_mma streams as at M=1
    FUSED_GEMV_MMA=1 FUSED_RETUNE=w8a16_gemv timeout $((560 - SECONDS)) python3 -m fused bench --blocks llama --m 16 \
      --no-baselines --configs "ours int8 W8A16,ours fp8 W8A16,ours fp8 W8A8" --out "$OUT/gemv16" > "$OUT/gemv16.log" 2>&1
    grep "^|" "$OUT/gemv16.log" | grep -v "^|--" | head -6
    cands "$OUT/gemv16/bench.json" w8a16_gemv
    python3 .ci/picks_to_tuned.py "$OUT/gemv16/bench.json" --match w8a16_gemv
    rm -f "$OUT"/*/bench.png ;;
  l2p24)  # twenty-third session: the int8 M=1 layers with the L2P candidates (weights' loads with an L2 prefetch
          # size of 256 / 128 bytes; ncu had L2 hit 7%, occupancy 25%, DRAM 56%). Prediction: gate/up 33.1 -> ~30,
          # down 21.8 -> ~20. Run 6: 31.9 / 21.2 with 128 B (256 B slower). Since: PFD candidates (prefetch.global.L2
          # of the weights 1 / 2 iterations ahead: DRAM bytes in flight without registers; SASS +16 CCTL per gated
          # iteration, 92 -> 104 registers). Prediction: gate/up 31.9 -> ~27, down 21.2 -> ~18; if so ship the picks
          # (`.ci/picks_to_tuned.py` needs a bench.json: run `twentythird2` after, with FUSED_RETUNE=sparse24_mma)
    export FUSED_S24_MMA=1
    MMA24_FMTS=int8 MMA24_MS=1 timeout 200 python3 .ci/diag.py mma24 2>&1 | filt | grep "^mma24\|^   " ;;
  twentythird2)  # twenty-third session, last: the 2:4 rows at M = 1 / 16 with the shipped picks (mma route on, PAIRS,
                 # PDL, XF gate/up pick) beside torchao's fp8 2:4 and PyTorch's bf16 2:4 in the same run
    timeout $((560 - SECONDS)) python3 -m fused bench --blocks llama --m 1,16 --no-baselines --sparse-baselines \
      --configs "ours int8 2:4 W8A16,ours int8 2:4 W8A8,ours fp8 2:4 W8A8" --out "$OUT/s24" > "$OUT/s24.log" 2>&1
    grep "^|" "$OUT/s24.log" | grep -v "^|--" | head -16
    routes "$OUT/s24/bench.json" | grep "_graph" | head -12
    rm -f "$OUT"/*/bench.png ;;
  mma24b)  # twenty-second session, the short form of mma24 for a small device budget (~250 s), most telling first: the
           # int8 layers alone at M = 1 (mma, mma_x, quad; each candidate's dB against quad's output), the int8 2:4
           # W8A16 row at M = 1 with the route timings, then the int8 cuda tests and the route's. Run 6 (PF loop):
           # gate/up 41.2 vs quad 36.2, down 26.9 vs 22.1. Since: the PF loop's weights were copied at the back edge
           # right after their loads (16 IMAD.MOV waiting on them: one DRAM latency per step); now U = 2 / 4 steps
           # loaded per iteration, none carried, and FENCE (a barrier after the loads so ptxas issues all of them
           # first: 16 / 32 weight loads ahead of the first mma, 150 / 184 registers gated). Prediction: FENCE U=4
           # gate/up ~28 µs (+ act_split ~3 in the graph), down ~17; block int8 2:4 W8A16 M=1 54 -> ~47
    # Run 7 (twenty-third session): right; gate/up mma 37.1 incl. act_split (W=4, split 2, U=4, FENCE) vs quad
    # 36.2, down 25.6 vs 22.0 (act_split alone 5.4 / 6.9), the route kept quad (it ran mma_x: 46.4); the route test
    # found no candidate at K=1024 (IndexError). Since: the candidates clamp the split; the route runs act_split +
    # sparse24_mma with PDL (act_split waits, then lets the mma programs start; they load their weights, then wait).
    # Prediction: PDL saves 2-3 µs per layer; route takes mma for gate/up; block 54.6 -> ~50. Run 8: PDL saved ~1 µs
    # per layer (gate/up 37.2 -> 36.2, down 25.7 -> 24.7); the route took mma for int8 2:4 W8A8 (act_quant: one plane;
    # gate/up 32.7 vs packed 36.6, down 21.5 vs 22.0; block M=1 51.0) but not for W8A16 (two planes: 36.8 / 25.1).
    # Since: two planes at M <= 4 share one mma as column pairs (PAIRS: half the mma.sp and x loads). Prediction:
    # W8A16 gate/up ~33, down ~22, the route takes mma, block int8 2:4 W8A16 M=1 54.1 -> ~51
    export FUSED_S24_MMA=1
    MMA24_FMTS=int8 MMA24_MS=1 timeout 130 python3 .ci/diag.py mma24 2>&1 | filt | grep "^mma24\|^   "
    timeout $((560 - SECONDS)) python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short \
      tests/test_kernels_sparse24_mma.py -k "int8 or pdl" 2>&1 | filt | grep -v "^  \|^$" | tail -6
    timeout 150 python3 -m fused bench --blocks llama --m 1,16 --no-baselines \
      --configs "ours int8 2:4 W8A16,ours int8 2:4 W8A8" --out "$OUT/mma" > "$OUT/mma.log" 2>&1
    grep "^|" "$OUT/mma.log" | grep -v "^|--" | head -4
    routes "$OUT/mma/bench.json" | grep "_graph" | head -8
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  ncumma)  # twenty-first session, for after mma24: ncu of sparse24_mma's default config (int8 2:4 gate/up and down, M=1):
           # DRAM throughput against the pure-read ~3.9 TB/s, issue slots, stalls. Prediction: DRAM > 70%, issue < 30%
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    timeout 300 "$NCU" --clock-control none --kernel-name regex:sparse24_mma --launch-count 6 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
      --section SchedulerStats --section LaunchStats python3 .ci/diag.py ncumma > "$OUT/ncumma.txt" 2>&1
    grep -E "^ncumma|_mma_kernel|DRAM Throughput|Duration|Achieved Occupancy|Registers Per|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Stall|stalled|Est. Speedup" \
      "$OUT/ncumma.txt" | head -70 ;;
  quad16)  # twentieth session, for the next: the 16-row quad tiles on tiled meta read as contiguous runs, with the row sum
          # in two steps (Triton 3.6's reduce shuffled wrong lanes on their layout: PTX xor 2, 1 where the lanes are
          # bits 0 and 4; 3.9 emits 1, 16; now 1, 16 on 3.6 too, .ci/reduce_audit.py clean). (1) the 2:4 GEMV cuda
          # tests with FUSED_S24_QUAD16_RUNS=1; (2) quadtiled (runs asm / twin now right?) and the quad layers alone;
          # (3) the 2:4 rows at M=1 retuned and the picks. Prediction: runs 16x512 right, gate/up ~33 µs (33.0 when
          # wrong: the reduce is after the loop), down ~21; block int8 2:4 W8A16 54.1 -> ~50
    export FUSED_S24_QUAD16_RUNS=1
    timeout 230 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=line tests/test_kernels_sparse24_gemv.py \
      -k "quad or every_candidate" 2>&1 | filt | grep -v "^  \|^$" | tail -8
    timeout 150 python3 .ci/diag.py quadtiled,s24quad,q16split 2>&1 | filt | grep "^quadtiled\|^s24quad\|^q16split"
    FUSED_RETUNE=1 timeout 200 python3 -m fused bench --blocks llama --m 1 --no-baselines \
      --configs "ours int8 2:4 W8A16,ours fp8 2:4 W8A8,ours int8 2:4 W8A8" --out "$OUT/q16" > "$OUT/q16.log" 2>&1
    grep "^|" "$OUT/q16.log" | grep -v "^|--" | head -5
    python3 .ci/picks_to_tuned.py "$OUT/q16/bench.json" --match sparse24 2>&1 | filt
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  twentieth2)  # twentieth session: quad on by default with the twentieth1 picks (quad 32x512, 4 stages), no retune: the 2:4
              # Llama rows at M = 1 / 16 / 128 beside bf16 eager. Prediction: M=1 54.5 / 52.6 / 54.5 (twentieth1), M=16
              # and 128 unchanged (61-63, 66-86)
    timeout 450 python3 -m fused bench --blocks llama --m 1,16,128 --no-baselines \
      --configs "ours int8 2:4 W8A16,ours fp8 2:4 W8A8,ours int8 2:4 W8A8" --out "$OUT/t2" > "$OUT/t2.log" 2>&1
    grep "^|" "$OUT/t2.log" | grep -v "^|--" | head -6
    rm -f "$OUT"/*/bench.png ;;
  twentieth1)  # twentieth session: quad24 found quad wrong at 16-row tiles on tiled meta read as runs (-1 dB; 32 rows and
              # row-major meta right) and every M=16 2:4 candidate failing to compile (Triton 3.6 rejects a str default
              # for a constexpr: fixed). (1) the 2:4 GEMV cuda tests, every candidate on rows AND tiled meta; (2) which
              # part of the 16-row quad is wrong (asm / twin, runs / gathers); (3) the quad layers alone (16 rows now as
              # gathers) vs the vsel picks; (4) the 2:4 rows at M = 1 / 16 retuned with quad in the tuner, and picks.
              # Prediction: quad 16 gathers right and ~34-36 µs gate/up (runs gave 33.0 wrong), block int8 2:4 M=1
              # 59.0 -> ~51; M=16 back to ~60 (the shipped dot picks)
    export FUSED_S24_QUAD=1
    timeout 230 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=line tests/test_kernels_sparse24_gemv.py \
      -k "quad or every_candidate" 2>&1 | filt | grep -v "^  \|^$" | tail -8
    timeout 120 python3 .ci/diag.py quadtiled,s24quad 2>&1 | filt | grep "^quadtiled\|^s24quad"
    FUSED_RETUNE=1 timeout 200 python3 -m fused bench --blocks llama --m 1,16 --no-baselines \
      --configs "ours int8 2:4 W8A16,ours fp8 2:4 W8A8,ours int8 2:4 W8A8" --out "$OUT/t1" > "$OUT/t1.log" 2>&1
    grep "^|" "$OUT/t1.log" | grep -v "^|--" | head -5
    python3 .ci/picks_to_tuned.py "$OUT/t1/bench.json" --match sparse24 2>&1 | filt
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  prmt24)  # nineteenth session, for the next: the W8A8 2:4 tiled kernel (sparse24_linear, 8-bit dots) with each group's
           # dense bytes built by ONE prmt (EXPAND="prmt"; sm_90 per K step, int8: 16x64x128 956 -> 338 instructions,
           # 128x64x128 749 -> 214, gated 1779 -> 637 / 976 -> 342). (1) its cuda test: bit-equal to the byte selects
           # (the asm's selector logic; the joins are checked on the CPU through the Triton twin); (2) only if it
           # passed: the W8A8 2:4 rows at M = 1 / 16, every kernel retuned, FUSED_S24_PRMT 0 / 1. Prediction: the "h in"
           # down layer (packed 23-25 µs at M=1, 37-42 at 16, against cuSPARSELt's 28-29) drops to ~15-20, block M=1
           # 57.8 -> ~52, M=16 60.4 -> ~52. Not timed: M=128 (cuSPARSELt 28 µs vs packed 257; 3.5x fewer
           # instructions leave packed at ~75)
    timeout 280 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_kernels_sparse24.py \
      -k "prmt_expansion" 2>&1 | filt | grep -v "^  \|^$" | tail -5 | tee "$OUT/prmt24_test.txt"
    grep -q " passed" "$OUT/prmt24_test.txt" && ! grep -q "failed" "$OUT/prmt24_test.txt" || { echo "test not green: no A/B"; exit 0; }
    FUSED_RETUNE=1 ab FUSED_S24_PRMT "0 1" 6 140 --m 1,16 --configs "ours int8 2:4 W8A8,ours fp8 2:4 W8A8"
    python3 .ci/picks_to_tuned.py "$OUT/FUSED_S24_PRMT1/bench.json" --match sparse24_linear 2>&1 | filt
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  l2pf)  # nineteenth session, for the next: the down projection's weights prefetched into L2 (cp.async.bulk.prefetch.L2,
         # evict_last; .ci/l2_prefetch.py) ahead of each block, three blocks with their own weights in one graph
         # (.ci/diag.py l2pf). Prediction: fp8 W8A8 M=128 75.5 -> ~68-70 µs per block at FRAC 0.5 (issue 4's 70);
         # M=16 no gain (DRAM-bound); none anywhere if evict_last does not keep the lines through gate/up's stream
    timeout 400 python3 .ci/diag.py l2pf 2>&1 | filt | grep "^l2pf" ;;
  quad24)  # nineteenth session, for the next: the 2:4 decode GEMV's "quad" form (ncu24: vsel bound by per-SM work, L1 78%,
           # issue 66%, DRAM 41%; quad cuts the sm_90 loop 399 -> 275 instructions for int8, 345 -> 249 for fp8, registers
           # 96 -> 64). (1) its cuda tests (asm bit-equal to its Triton twin; every candidate right); (2) the layers alone
           # against the shipped vsel picks (.ci/diag.py s24quad); (3) the 2:4 rows at M=1 retuned (FUSED_RETUNE=1) and
           # the picks. Prediction: int8 gate/up 41.3 -> ~29-33 µs, down 24.8 -> ~18-20, block int8 2:4 W8A16 59.0 ->
           # ~46-50 (fp8 2:4 W8A8 57.8 alike); if L1 (shared-memory traffic, unchanged) binds instead, < 10%
    export FUSED_S24_QUAD=1  # the quad candidates in the tuner (off by default until this test passes)
    timeout 240 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_kernels_sparse24_gemv.py \
      -k "quad or (every_candidate and 1-)" 2>&1 | filt | grep -v "^  \|^$" | tail -5
    timeout 150 python3 .ci/diag.py s24quad 2>&1 | filt | grep "^s24quad"
    FUSED_RETUNE=1 timeout 200 python3 -m fused bench --blocks llama --m 1 --no-baselines \
      --configs "ours int8 2:4 W8A16,ours fp8 2:4 W8A8,ours int8 2:4 W8A8" --out "$OUT/q24" > "$OUT/q24.log" 2>&1
    grep "^|" "$OUT/q24.log" | grep -v "^|--" | head -5
    python3 .ci/picks_to_tuned.py "$OUT/q24/bench.json" 2>&1 | filt
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  s24wave)  # nineteenth session: ncu24 showed the 2:4 gate/up pick at 896 CTAs, 5 per SM (96 registers): 1.36 waves,
            # DRAM 41%, L1 78%, issue 66%. The pick with a register cap (maxnreg 80 / 72 / 64: 6 / 7 / 8 CTAs per SM) and
            # more splits. Prediction: if the partial wave costs, gate/up 38-42 -> ~33 µs with 72; if L1 / issue limits
            # (no spare per-SM throughput), no change
    timeout 200 python3 .ci/diag.py s24wave 2>&1 | filt | grep "^s24wave" ;;
  nineteenth1)  # nineteenth session: CVT="prmt" on by default with the shipped prmt / retune8 picks: the GEMV cuda tests,
                # then the dense Llama rows at M = 1 / 16 / 128 (no retune) beside bf16 eager. Prediction: int8 W8A16 M=1
                # 65.2 -> ~63.5 (the retune's 63.4), the rest unchanged within run-to-run spread
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_kernels_w8.py -k "gemv" \
      2>&1 | filt | grep -v "^  \|^$" | tail -4
    timeout 300 python3 -m fused bench --blocks llama --m 1,16,128 --no-baselines \
      --configs "ours int8 W8A16,ours fp8 W8A16,ours int8 W8A8,ours fp8 W8A8" --out "$OUT/n1" > "$OUT/n1.log" 2>&1
    grep "^|" "$OUT/n1.log" | grep -v "^|--" | head -14
    rm -f "$OUT"/*/bench.png ;;
  retune16)  # eighteenth session, for the next: eighteenth2 found the shipped W8A8 picks stale (a retune of w8_gemm alone
             # took int8 W8A8 at M = 1024 / 8192 from 344.6 / 2820 to 316.4 / 2654 µs). The W8A16 rows at M = 16 / 128 /
             # 1024 with every kernel retuned (FUSED_RETUNE=1: shipped table ignored), then the picks that differ.
             # Prediction: 0-8% per cell where a pick changes (114.1 at 128 and 694 at 1024 are the far-off cells)
    FUSED_RETUNE=1 timeout 540 python3 -m fused bench --blocks llama --m 16,128,1024 --no-baselines \
      --configs "ours int8 W8A16,ours fp8 W8A16" --out "$OUT/r16" > "$OUT/r16.log" 2>&1
    grep "^|" "$OUT/r16.log" | grep -v "^|--" | head -8
    python3 .ci/picks_to_tuned.py "$OUT/r16/bench.json" 2>&1 | filt
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  retune8)  # the same for the W8A8 rows at M = 16 / 128 (1024 / 8192 retuned in eighteenth2)
    FUSED_RETUNE=1 timeout 540 python3 -m fused bench --blocks llama --m 16,128 --no-baselines \
      --configs "ours int8 W8A8,ours fp8 W8A8" --out "$OUT/r8" > "$OUT/r8.log" 2>&1
    grep "^|" "$OUT/r8.log" | grep -v "^|--" | head -8
    python3 .ci/picks_to_tuned.py "$OUT/r8/bench.json" 2>&1 | filt
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  ncu24)  # eighteenth session, for the next: ncu of the 2:4 decode GEMV picks (int8 gate/up, down) and the dense int8
          # gate/up pick: issue slots, stalls, DRAM throughput, instruction counts. Question: what limits the 2:4 loop
          # (more warps / stages did not help, s24stages)? Prediction from its SASS (~23 M warp-instructions for gate/up,
          # 41.7 µs): Issue Slots Busy ~50%; the staged loop has no layout conversions (2 BAR), so the top stalls should
          # be long scoreboard / shared-memory (LDS) waits
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    timeout 400 "$NCU" --clock-control none --kernel-name regex:gemv --launch-count 9 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
      --section SchedulerStats --section LaunchStats --section InstructionStats python3 .ci/diag.py ncu24 \
      > "$OUT/ncu24.txt" 2>&1
    grep -E "^ncu24|_gemv_kernel|DRAM Throughput|Duration|Achieved Occupancy|Registers Per|Issue Slots Busy|Issued Ipc|No Eligible|Warp Cycles Per Issued|Executed Instructions |Stall|stalled|Est. Speedup" \
      "$OUT/ncu24.txt" | head -90 ;;
  retune24)  # the same for the 2:4 rows at M = 16 / 128 / 1024 (their tiled picks date from the twelfth-fifteenth sessions)
    FUSED_RETUNE=1 timeout 540 python3 -m fused bench --blocks llama --m 16,128,1024 --no-baselines \
      --configs "ours int8 2:4 W8A16,ours fp8 2:4 W8A8,ours int8 2:4 W8A8" --out "$OUT/r24" > "$OUT/r24.log" 2>&1
    grep "^|" "$OUT/r24.log" | grep -v "^|--" | head -10
    python3 .ci/picks_to_tuned.py "$OUT/r24/bench.json" 2>&1 | filt
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  stagedtest)  # the staged GEMV test with its new 8-warp check (eighteenth3 cut it at 90 s after int8 passed)
    timeout 240 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_kernels_w8.py \
      -k "gemv_staged_candidates_cuda" 2>&1 | filt | grep -v "^  \|^$" | tail -6 ;;
  eighteenth3)  # eighteenth session: the staged GEMV test with its 8-warp check as one rounding step in <= 8 outputs;
                # the W8A8 blocks at M = 1024 / 8192 with eighteenth2's retuned w8_gemm picks shipped (no retune)
    timeout 90 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_kernels_w8.py \
      -k "gemv_staged_candidates_cuda" 2>&1 | filt | grep -v "^  \|^$" | tail -6
    timeout 200 python3 -m fused bench --blocks llama --m 1024,8192 --no-baselines \
      --configs "ours fp8 W8A8,ours int8 W8A8" --out "$OUT/big" > "$OUT/big.log" 2>&1
    grep "^|" "$OUT/big.log" | grep -v "^|--" | head -10
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  eighteenth2)  # eighteenth session: the W8A8 blocks at M = 1024 / 8192 with w8_gemm retuned, without / with the
                # persistent TMA tiles among the candidates (diag w8tma: int8 gate/up 1858 -> 1730, down 808 -> 775 at
                # 8192; fp8 down 835 -> 717). Prediction: int8 8192 2775 -> ~2650, fp8 8192 -100 µs if the Triton
                # down layer is on the route
    export FUSED_RETUNE=w8_gemm
    ab FUSED_W8_TMA "0 1" 6 250 --m 1024,8192 --configs "ours fp8 W8A8,ours int8 W8A8"
    python3 .ci/picks_to_tuned.py "$OUT/FUSED_W8_TMA1/bench.json" --match "w8_gemm" 2>&1 | filt
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  eighteenth1)  # eighteenth session: (1) the staged GEMV test that failed for fp8 in testsx (and alone), its message;
                # (2) w8tma again: its first run failed at launch ("no allocator was set": a device-made descriptor's
                # scratch; launch_kernel now sets the allocator before a first launch)
    timeout 90 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_kernels_w8.py \
      -k "gemv_staged_candidates_cuda" 2>&1 | filt | grep -v "^  \|^$" | tail -12
    timeout 180 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_w8a8_tma.py 2>&1 | filt | tail -12
    timeout 300 python3 .ci/diag.py w8tma 2>&1 | filt | grep "w8tma\|   \|Error" ;;
  eagerbig)  # prepared in the seventeenth session: W8A8 plain (eager) calls take the eager route pick, cuBLAS included,
             # from M=1025 (dispatch.CUBLAS_EAGER_MIN_M, on): its cuda test, then plain vs graph at M = 1024 / 8192.
             # Prediction: plain fp8 W8A8 M=8192 2813 -> within ~2% of its graph time (~2440); M=1024 unchanged
    timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_kernels_w8.py -k "cublas_w8a8_cuda" \
      2>&1 | filt | tail -3
    timeout 200 python3 -m fused bench --blocks llama --m 1024,8192 --no-baselines \
      --configs "ours fp8 W8A8,ours int8 W8A8" --out "$OUT/big" > "$OUT/big.log" 2>&1
    grep "^|" "$OUT/big.log" | grep -v "^|--" | head -10
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  w8tma)  # prepared in the seventeenth session: the W8A8 GEMM as persistent TMA tiles (fused.kernels.w8a8_tma,
          # FUSED_W8_TMA=1; sm_90 compile: TMA copies and wgmma, no spills, 255 registers for the gated 128x128 pair).
          # (1) its cuda test (int8 bit-equal to w8_gemm's pointer form of the same tile, fp8 SQNR); (2) `.ci/diag.py
          # w8tma`: per layer of the fp8 / int8 W8A8 blocks at M = 1024 / 8192 the pick against each TMA tile, then the
          # block with the faster ones installed (routes re-timed). Prediction: fp8 block 2434 -> ~2330 at 8192 if the
          # gated TMA tile comes within 5% of cuBLAS (the Triton route then skips the 470 MB y round trip)
    timeout 240 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_w8a8_tma.py 2>&1 | filt | tail -3
    timeout 330 python3 .ci/diag.py w8tma 2>&1 | filt | grep "w8tma\|   \|Error" ;;
  splitrows)  # prepared in the seventeenth session: split_gemm (act_split + split GEMM in one launch) lost 3-45 µs
              # (sixteenth5); the likely cause is its row phase: one heavy GEMM CTA per SM splitting one row as a chain
              # of dependent chunk loads. Now the row loops are pipelined by Triton (FUSED_SPLIT_ROW_STAGES, 3 by
              # default; sm_90: registers unchanged, shared memory reused). (1) its cuda tests; (2) W8A16 at M = 128 /
              # 512: two launches, then one launch with row stages 1 / 3. Prediction: with 3 the one-launch form within
              # +-3 µs of two launches at 128 (113.8 / 107.3) and the 45 µs loss at 512 down to < 15; if rows stay
              # slow with 3, the cause is elsewhere (ticket order, the spin-wait)
    timeout 180 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_split_gemm.py 2>&1 | filt | tail -3
    ab FUSED_SPLIT_ONE_LAUNCH "0" 6 120 --m 128,512 --configs "ours int8 W8A16,ours fp8 W8A16"
    export FUSED_SPLIT_ONE_LAUNCH=1
    ab FUSED_SPLIT_ROW_STAGES "1 3" 6 120 --m 128,512 --configs "ours int8 W8A16,ours fp8 W8A16"
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  s24stages)  # prepared in the seventeenth session: the 2:4 decode GEMV's new pipelined candidates at M=1 (16x512 with 8
              # warps: 78 registers against 153 with 4, twice the warps per SM; 6 stages; 16x1024 / 32x512 with 8 warps).
              # (1) their cuda test (every candidate against the reference, staged ones against their plain twins);
              # (2) `.ci/diag.py staged` (layer alone, graph µs, every staged candidate); (3) the 2:4 blocks at M=1 with
              # the 2:4 GEMV retuned, their picks. Prediction: gate/up 41.8 -> 36-38 µs with the 8-warp tile, which
              # would take gate/up from cuSPARSELt (38 µs) in graphs: int8 2:4 W8A16 block 59.0 -> ~56
    timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_kernels_sparse24_gemv.py \
      -k "every_candidate or llama_shapes" 2>&1 | filt | tail -3
    timeout 200 python3 .ci/diag.py staged 2>&1 | filt | grep "staged\|   \|Error"
    FUSED_RETUNE=sparse24_gemv timeout 150 python3 -m fused bench --blocks llama --m 1 --no-baselines \
      --configs "ours int8 2:4 W8A16,ours fp8 2:4 W8A8,ours int8 2:4 W8A8" --out "$OUT/s24" > "$OUT/s24.log" 2>&1
    grep "^|" "$OUT/s24.log" | grep -v "^|--" | head -5
    python3 .ci/picks_to_tuned.py "$OUT/s24/bench.json" --match "gemv" 2>&1 | filt
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  seventeenth2)  # seventeenth session, last call: (1) the whole cuda suite with this session's defaults (staged GEMV
                 # candidates on, fp8 rowwise_fast cuBLAS from M=1025, new M=1 picks), 8 xdist workers; (2) the 2:4 W8A8
                 # blocks at M=1 with the 2:4 GEMV retuned (their fp8 tiled picks predate the staged candidates)
    python3 -c "import xdist" 2>/dev/null || { echo "no xdist"; exit 1; }
    timeout 360 python3 -m pytest -q -p no:cacheprovider -m cuda -rf -n 8 --dist loadfile --durations=8 tests \
      -k "not 32_row" 2>&1 | filt | tail -24
    FUSED_RETUNE=sparse24_gemv timeout 110 python3 -m fused bench --blocks llama --m 1 --no-baselines \
      --configs "ours fp8 2:4 W8A8,ours int8 2:4 W8A8" --out "$OUT/s24" > "$OUT/s24.log" 2>&1
    grep "^|" "$OUT/s24.log" | grep -v "^|--" | head -4
    python3 .ci/picks_to_tuned.py "$OUT/s24/bench.json" --match "gemv" 2>&1 | filt
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  seventeenth1)  # seventeenth session: (1) why test_gemv_staged_candidates_cuda failed (diag stgeq: bits / SQNR of each
                 # staged dense candidate against its plain twin and the reference); (2) the 2:4 GEMV's cuda candidate test
                 # with the staged candidates (not selected by sixteenth3's -k); (3) M=1 rows with the staged candidates,
                 # dense and 2:4 GEMVs retuned, their picks; (4) fp8 / int8 W8A8 at M = 1024 / 8192 with the rowwise_fast
                 # default (FUSED_CUBLAS_FP8, shipped this session). Prediction (4): fp8 8192 2683 -> ~2470 as in diag
    timeout 100 python3 .ci/diag.py stgeq 2>&1 | filt | grep "stgeq\|Error" | cut -c1-260
    timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_kernels_sparse24_gemv.py \
      -k "every_candidate" 2>&1 | filt | tail -3
    FUSED_GEMV_STAGES=1 FUSED_RETUNE=w8a16_gemv,sparse24_gemv timeout 200 python3 -m fused bench --blocks llama \
      --m 1 --no-baselines --configs "ours int8 W8A16,ours fp8 W8A16,ours int8 2:4 W8A16,ours int8 W8A8,ours fp8 W8A8" \
      --out "$OUT/m1" > "$OUT/m1.log" 2>&1
    grep "^|" "$OUT/m1.log" | grep -v "^|--" | head -7
    python3 .ci/picks_to_tuned.py "$OUT/m1/bench.json" --match "gemv" 2>&1 | filt
    timeout 170 python3 -m fused bench --blocks llama --m 1024,8192 --no-baselines \
      --configs "ours fp8 W8A8,ours int8 W8A8" --out "$OUT/big" > "$OUT/big.log" 2>&1
    grep "^|" "$OUT/big.log" | grep -v "^|--" | head -4
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  sixteenth1)  # sixteenth session, first call: (1) firstlayer (the W8A8 first layer in one launch, prepared in the fifteenth,
               # prediction -4-6 µs at M=128); (2) the decode chain with one program per item (LOOP=False for the
               # programs_per_sm=0 candidates: sm_90 registers 142 -> 80 at M=1 int8, 181 -> 94 at M=16 fp8, so ~6 programs
               # fit per SM instead of 3; the eleventh session's chain lost because its 448 first-layer items ran in two
               # waves at 3 per SM). Prediction: a p=0 candidate becomes the chain's best, within 2 µs of the two launches
               # or under them. Its cuda tests check every candidate bit-equal to the two launches
    bash "$0" firstlayer
    timeout 260 python3 -m pytest -q -p no:cacheprovider -m cuda -rf -s tests/test_decode_chain.py 2>&1 | filt \
      | grep -v "^$" | grep -v "^\.*$" | tail -60 ;;
  fifteenth1)  # fifteenth session: the two A/Bs prepared in the fourteenth (fourteenth4: 128-row STACK tiles at M=128 with
               # FUSED_RETUNE=1; fourteenth3: eager graphs above M=1024 and the fp8 2:4 W8A8 plain cell at 1024)
    bash "$0" fourteenth4
    bash "$0" fourteenth3 ;;
  fifteenth2)  # fifteenth session: (1) the picks of the 128-row STACK tiles at M=128 (fifteenth1 measured them, graph int8
               # W8A16 116.2 -> 114.1, fp8 111.4 -> 108.5, but its bench.json files did not come back: at most 8 files
               # return), printed as tuned_h200.py entries; (2) the GPT block (d 4096, h 16384, GELU-tanh, bias)
               # re-measured: the README's GPT table is from the first run (2026-11-30, untuned heuristic configs, before
               # split activations, the cuBLAS routes and the hand-off). Tuned on first use (GPT keys are mostly not in
               # tuned_h200.py), dense configs, bf16 eager beside them; torchao / compile baselines left out (their
               # compiles do not fit beside the tuning). Rows are logged as they come: a cut run keeps what it measured
    FUSED_RETUNE=1 timeout 110 python3 -m fused bench --blocks llama --m 128 --no-baselines \
      --configs "ours int8 W8A16,ours fp8 W8A16" --out "$OUT/s128" 2>&1 | filt | grep "^llama"
    python3 .ci/picks_to_tuned.py "$OUT/s128/bench.json" --match "'w8_gemm', 128," 2>&1 | filt
    rm -f "$OUT/s128/bench.png" "$OUT/s128/bench.md"
    timeout 450 python3 -m fused bench --blocks gpt --no-baselines --out "$OUT/gpt" \
      --configs "ours int8 W8A16,ours int8 W8A8,ours fp8 W8A8,ours fp8 W8A16" 2>&1 | filt > "$OUT/gpt.log"
    grep "^gpt " "$OUT/gpt.log" | sed 's/  */ /g' | cut -c1-110; grep "^|" "$OUT/gpt.log" | tail -16 ;;
  sixteenth5)  # sixteenth session, prepared: act_split + the split GEMM in ONE ticketed launch (fused.kernels.split_gemm,
               # dispatch.SPLIT_ONE_LAUNCH, opt-in; bit-identical to the two launches). Its cuda tests (bit-equal on Llama
               # shapes with w8_gemm's own configs; 2 launches per compiled per-Linear block at M = 64 / 300), then W8A16
               # at M = 17 / 128 / 512 off / on (M=17: the 16 -> 17 step, 66.4 -> 74.0). Prediction: M=128 int8 114.1 ->
               # ~110, fp8 108.5 -> ~104 (two gaps); M=17 74.0 -> ~71-72 (one: the down layer takes the GEMV there)
    timeout 240 python3 -m pytest -q -p no:cacheprovider -m cuda -rf -s tests/test_split_gemm.py \
      tests/test_compile_passes.py -k "split_gemm or launches_two" 2>&1 | filt | grep "CUDA kernels\|passed\|failed\|Error" | tail -12
    ab FUSED_SPLIT_ONE_LAUNCH "0 1" 8 160 --m 17,128,512 --configs "ours int8 W8A16,ours fp8 W8A16" ;;
  sixteenth6)  # sixteenth session, prepared: act_quant + the W8A8 GEMM in ONE ticketed launch (split_gemm.quant_gemm,
               # dispatch.QUANT_ONE_LAUNCH, opt-in; bit-identical). Its cuda test, then the W8A8 blocks at M = 128 / 1024
               # off / on (it changes the Triton candidate of the block's "h out" route: quant_gemm + act_quant(h)).
               # Prediction: M=128 fp8 75.7 -> ~73 where the route keeps Triton (one gap); run after sixteenth2 decides
               # FUSED_FIRST_LAYER (which removes both gaps of that layer)
    timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_split_gemm.py 2>&1 | filt | tail -3
    ab FUSED_QUANT_ONE_LAUNCH "0 1" 6 180 --m 128,1024 --configs "ours fp8 W8A8,ours int8 W8A8" ;;
  sixteenth4)  # sixteenth session, prepared: fp8 cuBLAS products with the scales inside the GEMM (dispatch.CUBLAS_FP8 rowwise /
               # rowwise_fast, opt-in): their test on the GPU, then `.ci/diag.py rowwise` (raw GEMMs, the fp8 W8A8 block per
               # form at M = 1024 / 8192 beside torchao fp8 rowwise + compile). Prediction: block 2774 -> ~2500 at 8192
    # first, a smoke of the default paths this session refactored (w8_gemm's body as w8_tile, act_split's row, the
    # dispatch's h-out and cuBLAS glue; testsx runs all), then the new rowwise tests
    timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_kernels_w8.py \
      -k "rowwise or cublas_w8a8_cuda or act_quant_bit_exact or (dispatch_cuda and 300)" 2>&1 | filt | tail -3
    timeout 380 python3 .ci/diag.py rowwise 2>&1 | filt | grep "rowwise\|Error" ;;
  sixteenth3)  # sixteenth session, prepared: the decode GEMVs' K loops pipelined by Triton (STAGES candidates at M=1: tiles
               # streamed through shared memory by cp.async; sm_90 compile with triton 3.6: dense 32x512 BAR 10 -> 2, all
               # loads LDGSTS, +4% instructions; 2:4 vsel 16x512 117 -> 96 registers, no layout conversion left in the loop,
               # +25% instructions). Why: the 2:4 GEMV keeps one 4-5 KB tile in flight per program (~20 KB per SM) and
               # streams at 1.2-1.8 TB/s; the dense GEMVs plateau at 2.6-2.85 TB/s. (1) cuda tests (every staged candidate
               # bit-equal to its plain twin; they set FUSED_GEMV_STAGES=1, off by default, themselves); (2) `.ci/diag.py
               # staged`: per M=1 layer, the shipped pick against the same tile staged and the staged candidates (graph
               # µs); (3) the int8 2:4 W8A16 block at M=1 with the shipped
               # picks (FUSED_GEMV_STAGES=0) and with the 2:4 GEMV retuned (FUSED_RETUNE=sparse24_gemv), its new picks.
               # Prediction: int8 2:4 W8A16 60.7 -> ~45 µs; dense 0-3 µs at most (the third session's probe: a pure Triton
               # read with 1 or 3 stages took the same 38-39 µs for gate/up, and the dense GEMVs are within 10-20% of it)
    timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_kernels_w8.py -k "staged" \
      tests/test_kernels_sparse24_gemv.py 2>&1 | filt | tail -3
    FUSED_GEMV_STAGES=1 timeout 220 python3 .ci/diag.py staged 2>&1 | filt | grep "staged\|   \|Error"
    cf="ours int8 2:4 W8A16"
    export FUSED_GEMV_STAGES=1  # the staged candidates (off by default until these tests pass)
    FUSED_GEMV_STAGES=0 timeout 60 python3 -m fused bench --blocks llama --m 1 --no-baselines --configs "$cf" \
      --out "$OUT/plain" > "$OUT/plain.log" 2>&1
    echo "shipped picks (FUSED_GEMV_STAGES=0)"; grep "^|" "$OUT/plain.log" | grep -v "^|--" | head -4
    FUSED_RETUNE=sparse24_gemv timeout 100 python3 -m fused bench --blocks llama --m 1 --no-baselines --configs "$cf" \
      --out "$OUT/staged" > "$OUT/staged.log" 2>&1
    echo "2:4 GEMV retuned with the staged candidates"; grep "^|" "$OUT/staged.log" | grep -v "^|--" | head -4
    python3 .ci/picks_to_tuned.py "$OUT/staged/bench.json" --match "gemv" 2>&1 | filt
    rm -f "$OUT"/*/bench.png "$OUT"/*/bench.md ;;
  sixteenth2)  # sixteenth session, prepared: first_layer wired in as a third candidate of the "h out" route (FUSED_FIRST_LAYER=1,
               # off by default), with the W8A8 GEMM's own tile (first_layer.gemm_config). Its cuda tests (handoff with the
               # route forced to first_layer: int8 bit-equal, fp8 SQNR), then the Llama block W8A8 with it off / on at
               # M = 128 / 1024 and the "h out" route timings. Prediction: fp8 W8A8 M=128 75.7 -> 70-72, int8 71.6 -> 66-68;
               # at 1024 the route keeps the three launches or cuBLAS (the gaps are 2% there)
    timeout 180 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_first_layer.py tests/test_handoff.py \
      -k "first_layer or (handoff_cuda and None)" 2>&1 | filt | tail -3
    ab FUSED_FIRST_LAYER "0 1" 6 180 --m 128,1024 --configs "ours fp8 W8A8,ours int8 W8A8"
    python3 -c "
import json
for k, v in json.load(open('$OUT/FUSED_FIRST_LAYER1/bench.json'))['timings'].items():
    if 'h out' in k: print(k[:140], sorted(v, key=lambda r: r[0]))" ;;
  firstlayer)  # prepared in the fifteenth session, not yet run: the W8A8 first layer in one persistent ticketed launch
               # (fused.kernels.first_layer: act_quant(x) + gated GEMM + act_quant(h)). Its cuda test, then graph µs
               # against the three launches at M = 128 / 64 / 256. Prediction: the two gaps, ~4-6 µs at M=128 (128
               # registers in the sm_90 compile, 2 CTAs per SM as the standalone tile)
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_first_layer.py 2>&1 | filt | tail -3
    timeout 250 python3 .ci/diag.py firstlayer 2>&1 | filt | grep "firstlayer\|Error" ;;
  gptfull)  # the GPT block with every baseline (bf16 compile, torchao int8 weight-only / dynamic, fp8 rowwise / weight-only),
            # one process, as issue 3 asks; the fifteenth session's GPT run had bf16 eager only (its tuning took the
            # time; the picks now ship in tuned_h200.py)
    timeout 580 python3 -m fused bench --blocks gpt --out "$OUT/gptfull" 2>&1 | filt > "$OUT/gptfull.log"
    grep "^|" "$OUT/gptfull.log" | tail -34 ;;
  prmt)  # prepared in the fifteenth session, not yet run: the int8 M=1 GEMV with CVT="prmt" (int8 -> fp16 pairs by byte
         # permutes, epilogue.int8_to_f32_prmt; sm_90 loop 745 -> 637 SASS instructions, fp8's 539). Its cuda test (every
         # prmt candidate bit-equal to its "magic" twin), then int8 rows at M=1 with FUSED_RETUNE=1, FUSED_GEMV_PRMT 0 / 1.
         # Prediction: int8 W8A16 M=1 66.9 -> 63-65 µs (the gated GEMV from the 16-row pick, ~44 µs in the tuner,
         # toward fp8's 1-row loop, 41; fully issue-bound it would be ~38)
    timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_kernels_w8.py -k "prmt" 2>&1 | filt | tail -3
    FUSED_RETUNE=1 ab FUSED_GEMV_PRMT "0 1" 6 200 --m 1 --configs "ours int8 W8A16,ours int8 W8A8" ;;
  fifteenth3)  # fifteenth session, last call: the split-or-GEMV route at M = 17..32 (dispatch.GEMV_ROUTE_MAX_M, new): its cuda
               # test (FUSED_TUNE=0: heuristic configs, no tuning on the small test shapes), then the Llama A/B in one process
    FUSED_TUNE=0 timeout 100 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_kernels_w8.py -k "gemv_route" \
      2>&1 | filt | tail -3
    bash "$0" gemvroute ;;
  gemvroute)  # fifteenth session: W8A16 at M = 17 / 32 with the split-or-GEMV route per layer off / on (one process)
    timeout 240 python3 .ci/diag.py gemvroute 2>&1 | filt | grep "gemvroute\|Error" ;;
  w8a16eager)  # fifteenth session: where W8A16 plain calls at M=8192 lose 300-500 µs to their graph time (GPT block)
    timeout 300 python3 .ci/diag.py w8a16eager 2>&1 | filt | grep "w8a16eager\|   \|Error" ;;
  fourteenth3)  # prepared in the fourteenth session, not yet run: eager CUDA graphs above M=1024 (plain calls; one env
                # variable, FUSED_EAGER_GRAPH_MAX_M 1024 -> 8192), the 2:4 blocks at M = 2048 / 8192, and the fp8 2:4 W8A8
                # plain cell at M=1024 (426.5 in the ninth session, before eager graphs reached 1024). Prediction: plain
                # int8 2:4 W8A16 M=8192 3939 -> ~3490 (graph 3480 + the copy in / clone out, ~10 µs at 64 MiB each),
                # int8 2:4 W8A8 2007 -> ~1800; fp8 2:4 W8A8 M=1024 plain ~250 with the default bound
    timeout 150 python3 -m fused bench --blocks llama --no-baselines --m 1024 --configs "ours fp8 2:4 W8A8" \
      --out "$OUT/fp8s24_1024" 2>&1 | filt | grep "^|" | grep -v "^|--"
    ab FUSED_EAGER_GRAPH_MAX_M "1024 8192" 8 200 --m 8192 --configs "ours int8 2:4 W8A16,ours int8 2:4 W8A8" ;;
  fourteenth4)  # prepared in the fourteenth session, not yet run: 128-row STACK tiles at M=65..128 (the shipped bucket-128
                # split picks predate them, so FUSED_RETUNE=1 lets them compete), W8A16 at M = 128, STACK off / on.
                # Prediction: the down projection ~2 µs faster (at M=64 the stacked 128x64 down tile won, 31.1 vs 33.7
                # µs), the gated tile about even: int8 117.5 -> ~115, fp8 113 -> ~111
    FUSED_RETUNE=1 ab FUSED_SPLIT_STACK "0 1" 6 200 --m 128 --configs "ours int8 W8A16,ours fp8 W8A16" ;;
  fourteenth1)  # fourteenth session: split planes stacked in one tile (STACK candidates, w8_gemm) at M <= 64. Their cuda
                # tests, then the A/B with FUSED_SPLIT_STACK 0 / 1, W8A16 Llama block, graph µs. Prediction: M = 17..32
                # int8 74.3 -> 68-71, fp8 80.2 -> 68-71 (one 64-row wgmma per weight tile instead of two mostly-padding
                # dots, as W8A8 at M=17: 69.5-71.3); M=64 about even
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --durations=4 tests/test_kernels_w8.py \
      -k "stacked or mma_decode" 2>&1 | filt | tail -8
    ab FUSED_SPLIT_STACK "0 1" 8 170 --m 16,17,32,64 --configs "ours int8 W8A16,ours fp8 W8A16" ;;
  fourteenth2)  # the narrow file's cuda tests (its TMA-store ones had not all run), then the width 64 bench with TMA stores on
    timeout 300 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --durations=4 tests/test_narrow_mlp.py 2>&1 \
      | filt | tail -8
    FUSED_NARROW_TMA_OUT=1 timeout 200 python3 examples/narrow_mlp_bench.py --out "$OUT/narrowtmaout" 2>&1 | filt | grep "^| [0-9]\|^|" ;;
  thirteenth1)  # thirteenth session, first call: the eager-graph cuda tests after the twelfth session's refactor (capture
                # through _graph_replay, static input outside inference mode), then the M=17 cliff A/B: W8A16 through
                # split activations from M=17 (FUSED_SPLIT_MIN_M=17) against the default (33), Llama block, graph µs.
                # Prediction: fp8 W8A16 91 -> 75-80 at 17..32; int8 W8A16 about even (77.5 / 75.9)
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_launch.py 2>&1 | filt | tail -4
    ab FUSED_SPLIT_MIN_M "33 17" 8 140 --m 16,17,32 --configs "ours int8 W8A16,ours fp8 W8A16" ;;
  thirteenth3)  # after turning on split from 17, eager graphs to M=1024 and of refused signatures: the cuda tests they touch
    timeout 520 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --durations=6 tests/test_launch.py tests/test_handoff.py \
      tests/test_smoothing.py tests/test_modules.py tests/test_compile_passes.py tests/test_dispatch.py 2>&1 | filt | tail -14 ;;
  thirteenth4)  # the cuda tests whose dispatch meets split activations at 17..32 now, then the decode-block files
    timeout 420 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --durations=5 tests/test_kernels_w8.py tests/test_ops.py \
      tests/test_configs.py tests/test_save_load.py tests/test_export.py -k "not 32_row" 2>&1 | filt | tail -10
    timeout 130 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_decode_chain.py tests/test_decode_block.py \
      2>&1 | filt | tail -4 ;;
  thirteenth2)  # the eager graph up to M=1024 (plain calls of 2:4 blocks at M=1024, bound 128 vs 1024; prediction int8 2:4
                # W8A8 438.5 -> ~240 µs, int8 2:4 W8A16 807.9 -> ~450), then smootheager (opt-in graphs of refused
                # signatures: smoothed int8 W8A8 block plain M=1 ~95 -> ~74 µs)
    ab FUSED_EAGER_GRAPH_MAX_M "128 1024" 8 170 --m 1024 --configs "ours int8 2:4 W8A8,ours int8 2:4 W8A16"
    bash "$0" smootheager ;;
  smootheager)  # prepared in the twelfth session: eager graphs of refused signatures (FUSED_EAGER_GRAPH_REFUSED=1, off),
                # for SmoothQuant-smoothed blocks, which are never recorded. Its cuda test, then plain-call µs of a smoothed
                # int8 W8A8 Llama block at M = 1 / 16 / 128, off / on, beside its graph time. Prediction: M=1 ~95 -> ~74
    timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_launch.py -k "refused" 2>&1 | filt | tail -3
    timeout 200 python3 .ci/diag.py smootheager 2>&1 | filt | grep "smootheager\|Error" ;;
  eagergraph)  # twelfth session: eager calls replayed from a CUDA graph of the module where the graph picks save GPU
               # time (2:4 on cuSPARSELt, W8A8 on cuBLAS). Its cuda tests, then plain calls of the 2:4 blocks and dense
               # fp8 W8A8 at M = 1 / 16 / 128 with it off and on. Prediction (plain µs): int8 2:4 W8A8 80.7 / 135.7 /
               # 168.8 -> 62-66 / 62-66 / 68-72, fp8 2:4 W8A8 78.0 / 121.8 / 167.1 -> same, int8 2:4 W8A16 80.8 /
               # 135.6 / 207.2 -> 62-66 / 62-66 / 88-92, fp8 W8A8 M=128 83.6 -> ~78; graph times unchanged
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_launch.py 2>&1 | filt | tail -4
    ab FUSED_EAGER_GRAPH_MAX_M "0 128" 14 170 --m 1,16,128 \
      --configs "ours int8 2:4 W8A8,ours fp8 2:4 W8A8,ours int8 2:4 W8A16,ours fp8 W8A8" ;;
  gemv32)  # prepared in the eleventh session, not yet run: the dense GEMV up to M=32 / 64 (FUSED_GEMV_MAX_M, 32- / 64-row
           # tiles). Its cuda test, then the Llama block at M = 16, 17, 32, 48, 64 with the bound at 16 and 64. Prediction:
           # M=17..32 75-79 -> 67-72 µs for every dense config (the weight is still read once), M=64 86.7 -> ~75 (W8A16)
    timeout 240 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_kernels_w8.py -k "32_row" 2>&1 | filt | tail -3
    for g in 16 64; do
      FUSED_GEMV_MAX_M=$g timeout 170 python3 -m fused bench --blocks llama --m 16,17,32,48,64 --no-baselines \
        --configs "ours int8 W8A16,ours fp8 W8A16,ours int8 W8A8,ours fp8 W8A8" --out "$OUT/gemv$g" > "$OUT/gemv$g.log" 2>&1
      echo "GEMV_MAX_M=$g"; grep "^|" "$OUT/gemv$g.log" | grep -v "^|--" | head -7
    done ;;
  narrowtmaout)  # prepared in the eleventh session, not yet run: the narrow MLP's output tiles by TMA store (opt-in
                 # FUSED_NARROW_TMA_OUT=1). Its cuda tests (bits vs pointer stores), explicit configs (µs, bits), then
                 # the width 64 bench with it offered to the tuner. Prediction: 197 -> 185-195 µs (stores leave the
                 # LSU path and drain while the next tile runs; 10 fewer registers per thread in the sm_90 compile)
    timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_narrow_mlp.py -k "tma" 2>&1 | filt | tail -3
    timeout 100 python3 .ci/diag.py narrowtmaout 2>&1 | filt | grep "narrowtmaout\|Error"
    FUSED_NARROW_TMA_OUT=1 timeout 120 python3 examples/narrow_mlp_bench.py --out "$OUT/narrowtmaout" 2>&1 | filt | grep "^| [0-9]" ;;
  eleventh3)  # the decode chain's cuda tests (with the workspace check fixed) and its timing per candidate, where it loses
              # (chainparts), the GEMV cuda tests (its item now returns `live`), the narrow eager host cost (TMA replayed?)
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda -rf -s tests/test_decode_chain.py 2>&1 | filt | grep -v "^$" | grep -v "^\.*$" | tail -24
    timeout 150 python3 .ci/diag.py chainparts 2>&1 | filt | grep "chainparts\|Error"
    timeout 160 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_kernels_w8.py -k "dispatch_cuda or gemv_deterministic or mma_decode" 2>&1 | filt | tail -3
    timeout 60 python3 .ci/diag.py narrowhost 2>&1 | filt | grep "narrowhost\|Error" ;;
  eleventh2)  # the narrow MLP with device-made TMA descriptors (eleventh session): the narrow cuda tests (every candidate),
              # width 64 x 5 at 2**21 beside eager and compiled, the eager host cost at 2**14 (TMA pick replayed?), then
              # the sweep's widths in SWEEP_W (default 64)
    timeout 380 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --durations=5 tests/test_narrow_mlp.py 2>&1 | filt | tail -12
    timeout 90 python3 examples/narrow_mlp_bench.py --out "$OUT/narrow64" 2>&1 | filt | grep "^| [0-9]"
    python3 -c "
import json
for k, v in json.load(open('$OUT/narrow64/narrow_mlp.json'))['tuning_timings'].items():
    for t, c in sorted(v, key=lambda r: r[0])[:5]: print(' ', round(t, 1), c)"
    FUSED_TUNE=0 timeout 60 python3 .ci/diag.py narrowhost 2>&1 | filt | grep "narrowhost\|Error"
    [ -n "${SWEEP_W-64}" ] && timeout 150 python3 examples/narrow_mlp_bench.py --sweep --widths "${SWEEP_W:-64}" --out "$OUT/sweep" 2>&1 | filt | grep "^| [0-9]" ;;
  chain)  # the decode chain (eleventh session: both layers' GEMV tiles as one chain of items in one launch): its cuda tests
          # (bit-equal to the two launches, timing per candidate), the decode block's, then the Llama block at M=1/16 with
          # the one-launch route off and on (FUSED_DECODE_BLOCK_MAX_M 0 / 16) and the route timings
    timeout 330 python3 -m pytest -q -p no:cacheprovider -m cuda -rf -s tests/test_decode_chain.py tests/test_decode_block.py 2>&1 | filt | grep -v "^$" | tail -40
    for c in 0 16; do
      FUSED_DECODE_BLOCK_MAX_M=$c timeout 200 python3 -m fused bench --blocks llama --m 1,16 --no-baselines \
        --configs "ours int8 W8A16,ours fp8 W8A16,ours fp8 W8A8" --out "$OUT/chain$c" > "$OUT/chain$c.log" 2>&1
      echo "DECODE_BLOCK_MAX_M=$c"; grep "^|" "$OUT/chain$c.log" | grep -v "^|--" | head -12
    done
    python3 -c "
import json
d = json.load(open('$OUT/chain16/bench.json'))
for k, v in d['timings'].items():
    if 'mlp_block_route' in k or 'decode_block' in k: print(k[:120], sorted(v, key=lambda r: r[0])[:3])" ;;
  eleventh1)  # the narrow TMA candidates on by default (eleventh session): the narrow cuda tests, width 64 x 5 at 2**21 beside
              # eager and compiled (tuner timings, best first), then the sweep's widths given in SWEEP_W (default 16,32)
    timeout 250 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_narrow_mlp.py 2>&1 | filt | tail -4
    timeout 120 python3 examples/narrow_mlp_bench.py --out "$OUT/narrow64" 2>&1 | filt | grep "^| [0-9]"
    python3 -c "
import json
for k, v in json.load(open('$OUT/narrow64/narrow_mlp.json'))['tuning_timings'].items():
    for t, c in sorted(v, key=lambda r: r[0])[:8]: print(' ', round(t, 1), c)"
    timeout 300 python3 examples/narrow_mlp_bench.py --sweep --widths "${SWEEP_W:-16,32}" --out "$OUT/sweep" 2>&1 | filt | grep "^| [0-9]" ;;
  narrowtma)  # the narrow MLP's TMA candidates (input tiles by TMA, pipelined, weights hoisted; tenth session): their cuda
              # tests, then width 64 x 5 at 2**21 (tuner timings, best first) and width 32
    timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_narrow_mlp.py -k "tma or relu16 or every" 2>&1 | filt | tail -3
    timeout 200 python3 examples/narrow_mlp_bench.py --no-compile --out "$OUT/narrowtma" 2>&1 | filt | tail -2
    python3 -c "
import json
for k, v in json.load(open('$OUT/narrowtma/narrow_mlp.json'))['tuning_timings'].items():
    for t, c in sorted(v, key=lambda r: r[0])[:6]: print(' ', round(t, 1), c)"
    timeout 80 python3 examples/narrow_mlp_bench.py --width 32 --no-compile --out "$OUT/narrowtma32" 2>&1 | filt | tail -1 ;;
  narrowtma2)  # the narrow TMA candidates after the launcher fix (host descriptors take Triton's path), explicit configs
    timeout 150 python3 .ci/diag.py narrowtma2 2>&1 | filt | grep "narrowtma2\|Error" ;;
  narrowncu)  # ncu of the narrow MLP pick (TMA input tiles since the eleventh session): stalls, pipes, occupancy
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    timeout 300 "$NCU" --clock-control none --kernel-name regex:narrow --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
      --section ComputeWorkloadAnalysis --section InstructionStats --section LaunchStats --section MemoryWorkloadAnalysis \
      python3 .ci/diag.py narrowncu > "$OUT/narrowncu.txt" 2>&1
    grep -v "^==PROF==\|Failed to load\|Enum" "$OUT/narrowncu.txt" | grep -E "Duration|Throughput|Occupancy|Registers|Warp Cycles|Eligible|Issued|stall|Stall|Pipe|pipe|Block Limit|Executed Ipc|Issue Slots|L1|L2|Est|Waves" | head -80 ;;
  tenth3)  # W8A16 on cuBLAS by default (tenth session): the W8A16 rows around the crossover beside bf16 eager, then the
           # cuda tests of the files that reach the narrow MLP and the route (profile, save/load)
    timeout 260 python3 -m fused bench --blocks llama --m 512,1024,2048,8192 --no-baselines \
      --configs "ours int8 W8A16,ours fp8 W8A16" --out "$OUT/tenth3" > "$OUT/tenth3.log" 2>&1
    grep "^|" "$OUT/tenth3.log" | grep -v "^|--"
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_profile.py tests/test_save_load.py 2>&1 | filt | tail -3 ;;
  relu16)  # the narrow MLP with relu on packed 16-bit pairs (tenth session): its cuda tests, then A/B (FUSED_NARROW_RELU16
          # 0 / 1, width 64 x 5, 2**21, and width 32 / 128 at 2**21 with relu16 on), tuner timings of each
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_narrow_mlp.py tests/test_kernels_w8.py \
      -k "narrow or relu" 2>&1 | filt | tail -3
    for r in 0 1; do
      FUSED_NARROW_RELU16=$r timeout 150 python3 examples/narrow_mlp_bench.py --out "$OUT/narrow$r" 2>&1 | filt | tail -4
      python3 -c "
import json
for k, v in json.load(open('$OUT/narrow$r/narrow_mlp.json'))['tuning_timings'].items():
    for t, c in sorted(v, key=lambda r: r[0])[:3]: print('  relu16=$r', round(t, 1), c)"
    done
    for w in 32 128; do
      timeout 60 python3 examples/narrow_mlp_bench.py --width $w --no-compile --out "$OUT/narrow_w$w" 2>&1 | filt | tail -2
    done ;;
  tmadown)  # the W8A8 fp8 down GEMM at M=128: bare split-K kernels, pointer loads vs TMA, fp8 x vs bf16 x quantized
            # per 1x128 group inside the loop, against cuBLAS (tenth session)
    timeout 500 python3 .ci/diag.py tmadown 2>&1 | filt | grep "tmadown\|Error" ;;
  tenth)  # the pieces of W8A16 on cuBLAS (widen, stacked GEMM, epilogues, a side-stream widen overlapped with the
          # GEMM), then w8a16cublas (the prepared route's cuda tests and A/B)
    timeout 120 python3 .ci/diag.py w8a16parts 2>&1 | filt | grep "w8a16parts\|widen\|Error"
    bash "$0" w8a16cublas ;;
  w8a16cublas)  # prepared in the ninth session, not yet run: W8A16 from M=1024 on cuBLAS's bf16 GEMM (widen + mm +
                # scale_epilogue) timed against the Triton GEMM per shape. Its cuda test, then an A/B of the block rows
    timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_kernels_w8.py -k "cublas" \
      tests/test_tiled_meta.py 2>&1 | filt | tail -6
    for c in 0 1; do
      FUSED_CUBLAS_W8A16=$c timeout 170 python3 -m fused bench --blocks llama --m 1024,8192 --no-baselines \
        --configs "ours int8 W8A16,ours fp8 W8A16" --out "$OUT/w8a16cublas$c" > "$OUT/w8a16cublas$c.log" 2>&1
      echo "FUSED_CUBLAS_W8A16=$c"; grep "^|" "$OUT/w8a16cublas$c.log" | grep -v "^|--"
    done
    python3 -c "
import json
d = json.load(open('$OUT/w8a16cublas1/bench.json'))['timings']
for k, v in d.items():
    if 'w8a16_route' in k: print(k[:120], sorted(v, key=lambda r: r[0]))" ;;
  ninth3)  # after the tiled unpack24 kernel + shipped picks: the cuda tests the tiled layout reaches, then the 2:4 rows
           # at every M (graph and plain), and the tiled vs row-major unpack24 kernels alone
    timeout 260 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_tiled_meta.py tests/test_unpack24.py \
      tests/test_sparsity_modules.py tests/test_handoff.py tests/test_save_load.py tests/test_kernels_sparse24.py 2>&1 | filt | tail -8
    python3 -c "
import torch, triton.testing as tt
from sparsity.packing import pack_24, tile_meta
from fused.kernels.unpack24 import unpack24
for n, k in ((28672, 4096), (4096, 14336)):
    w = torch.randint(1, 100, (n, k // 4, 2), dtype=torch.uint8, device='cuda')
    d = torch.zeros(n, k // 4, 4, dtype=torch.uint8, device='cuda'); d[..., 1:3] = w; d = d.view(n, k).view(torch.int8)
    v, m = pack_24(d); mt = tile_meta(m)
    assert torch.equal(unpack24(v, mt), d) and torch.equal(unpack24(v, m), d)
    print('unpack24', n, k, 'row-major %.1f us, tiled %.1f us' % tuple(1e3 * tt.do_bench(lambda: unpack24(v, mm)) for mm in (m, mt)))
" 2>&1 | filt | grep unpack24
    timeout 250 python3 -m fused bench --blocks llama --m 1,16,128,1024,8192 --no-baselines \
      --configs "ours fp8 2:4 W8A8,ours int8 2:4 W8A8,ours int8 2:4 W8A16" --out "$OUT/ninth3" > "$OUT/ninth3.log" 2>&1
    grep "^|" "$OUT/ninth3.log" | grep -v "^|--" ;;
  ninth2)  # tiled meta read as contiguous runs (vsel / dot / unpack24): the cuda tests, then the 2:4 rows at every M tiled,
           # and M=1,16,128 with FUSED_TILED_META=0 in the same call (graph and plain)
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_tiled_meta.py tests/test_unpack24.py \
      tests/test_kernels_sparse24_gemv.py 2>&1 | filt | tail -8
    FUSED_TILED_META=1 timeout 230 python3 -m fused bench --blocks llama --m 1,16,128,1024,8192 --no-baselines \
      --configs "ours fp8 2:4 W8A8,ours int8 2:4 W8A8,ours int8 2:4 W8A16" --out "$OUT/ninth2_t1" > "$OUT/ninth2_t1.log" 2>&1
    FUSED_TILED_META=0 timeout 120 python3 -m fused bench --blocks llama --m 1,16,128 --no-baselines \
      --configs "ours fp8 2:4 W8A8,ours int8 2:4 W8A8,ours int8 2:4 W8A16" --out "$OUT/ninth2_t0" > "$OUT/ninth2_t0.log" 2>&1
    for t in 1 0; do echo "FUSED_TILED_META=$t"; grep "^|" "$OUT/ninth2_t$t.log" | grep -v "^|--" ; done
    python3 -c "
import json
for t in (1, 0):
    d = json.load(open('$OUT/ninth2_t%d/bench.json' % t))['timings']
    for k, v in d.items():
        if k.startswith(\"('sparse24_gemv'\") or k.startswith(\"('sparse24_route_graph'\"): print(t, k[:100], sorted(v, key=lambda r: r[0])[:2])" ;;
  ninth)  # tiled meta (ninth session): one buffer [values | meta in cuSPARSELt's tiles] serves cuSPARSELt and our 2:4
          # kernels. The new cuda tests + the 2:4 kernel files, then decode A/B (tiled vs FUSED_TILED_META=0) with memory
    timeout 250 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_tiled_meta.py tests/test_unpack24.py \
      tests/test_kernels_sparse24_gemv.py 2>&1 | filt | tail -8
    for t in 1 0; do
      FUSED_TILED_META=$t timeout 140 python3 -m fused bench --blocks llama --m 1,16 --no-baselines \
        --configs "ours fp8 2:4 W8A8,ours int8 2:4 W8A8,ours int8 2:4 W8A16" --out "$OUT/ninth_t$t" > "$OUT/ninth_t$t.log" 2>&1
      echo "FUSED_TILED_META=$t"; grep "^|" "$OUT/ninth_t$t.log" | head -7
      routes "$OUT/ninth_t$t/bench.json" | grep "graph"
    done
    python3 -c "
import json
for t in (1, 0):
    d = json.load(open('$OUT/ninth_t%d/bench.json' % t))['timings']
    for k, v in d.items():
        if k.startswith(\"('sparse24_gemv'\"): print(t, k[:90], sorted(v, key=lambda r: r[0])[:3])" ;;
  eighth3)  # the rest of the cuda tests that the eighth session's changes reach (act_quant, hand-off, smoothing, compile)
    timeout 430 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_smoothing.py tests/test_kernels_w8.py \
      tests/test_kernels_int8_linear.py tests/test_compile_passes.py tests/test_configs.py tests/test_save_load.py \
      tests/test_export.py tests/test_cpu_path.py tests/test_kernels_sparse24_gemv.py 2>&1 | filt | tail -8 ;;
  eighth2)  # epilogue_quant with the unfused candidate: the cuda tests of the touched files, the W8A8 bench rows, a profile
    timeout 260 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_handoff.py tests/test_unpack24.py \
      tests/test_kernels_sparse24.py tests/test_sparsity_modules.py tests/test_dispatch.py tests/test_launch.py tests/test_modules.py \
      tests/test_ops.py 2>&1 | filt | tail -6
    timeout 170 python3 -m fused bench --blocks llama --m 1,16,128,1024,8192 --no-baselines \
      --configs "ours fp8 W8A8,ours int8 W8A8,ours fp8 2:4 W8A8,ours int8 2:4 W8A8" --out "$OUT/eighth2" > "$OUT/eighth2.log" 2>&1
    grep "^|" "$OUT/eighth2.log" | head -8
    GP_CONFIGS="ours fp8 2:4 W8A8" GP_MS=1024,8192 timeout 80 python3 .ci/diag.py graphprof 2>&1 | filt | grep "us\|Error" ;;
  eighth)  # act_quant by reciprocal + the quantized hand-off (eighth session): cuda tests, act_quant throughput,
           # per-kernel graph profile, W8A8 bench rows (~450 s)
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_handoff.py tests/test_kernels_w8.py \
      tests/test_decode_block.py -k "handoff or act_quant or act_split or cublas or split or decode" 2>&1 | filt | tail -4
    GP_CONFIGS="ours fp8 W8A8,ours fp8 2:4 W8A8,ours int8 W8A8" timeout 150 python3 .ci/diag.py graphprof 2>&1 | filt | grep "us\|Error"
    timeout 200 python3 -m fused bench --blocks llama --m 1,16,128,1024,8192 --no-baselines \
      --configs "ours fp8 W8A8,ours int8 W8A8,ours fp8 2:4 W8A8,ours int8 2:4 W8A8" --out "$OUT/eighth" > "$OUT/eighth.log" 2>&1
    grep "^|" "$OUT/eighth.log" | head -24 ;;
  graphprof)  # where the W8A8 blocks' graph time goes (per-kernel µs of graph replays) + rowwise _scaled_mm probe (eighth)
    timeout 250 python3 .ci/diag.py rowwise 2>&1 | filt | grep "^rowwise\|Error"
    timeout 330 python3 .ci/diag.py graphprof 2>&1 | filt | grep "us\|Error" ;;
  tests)  # the cuda suite's first half: test_bounds .. test_kernels_sparse24_gemv (the whole suite no longer fits one call:
          # the fourteenth session's `tests` was cut at 560 s after 123 passed); testsb, tests2 and tests3 do the rest
    timeout 560 python3 -m pytest -q -p no:cacheprovider -m cuda -rf $(ls tests/test_*.py | awk '$0 < "tests/test_kernels_w8"' \
      | grep -v "decode_chain\|decode_block") 2>&1 | filt | tail -25 ;;
  testsx1)  # the cuda suite's compile-heavy half (twentieth session): the GEMV / 2:4 GEMV / TMA kernel files
    TESTSX_FILES="tests/test_kernels_w8.py tests/test_kernels_sparse24_gemv.py tests/test_w8a8_tma.py" bash "$0" testsx ;;
  testsx2)  # the rest of the cuda suite
    TESTSX_FILES=$(ls tests/test_*.py | grep -v "test_kernels_w8.py\|test_kernels_sparse24_gemv.py\|test_w8a8_tma.py" \
      | tr '\n' ' ') bash "$0" testsx ;;
  testsx)  # the whole cuda suite in one call, 6 pytest-xdist workers (one file per worker: --dist loadfile). Most of the
           # suite's time is Triton compiling candidate configs on the host (16 cores); the GPU work is small. Needs the
           # pytest-xdist and execnet wheels in .whl/ (fourteenth session: `pip download pytest-xdist execnet --no-deps
           # -d .whl`). A failure here may be timing noise in a route pick: rerun that test alone before believing it
    python3 -c "import xdist" 2>/dev/null || { echo "no xdist: bash $0 tests; bash $0 testsb"; exit 1; }
    # -v lines go to a log under $OUT as they come: a run cut by its timeout still names its failures (the
    # seventeenth session's 8-worker run was cut at 360 s with one F and no summary)
    # 8 workers (8 ran 201 of the 220 tests in 360 s), then every failed test once
    # more alone: with 6-8 workers sharing the GPU, a test that times real routes can see noisy timings
    # twentieth session: the whole suite outgrew one call (198 passed at ~83% when a 420 s limit cut it): `testsx1`
    # / `testsx2` run its two halves (the compile-heavy kernel files, the rest), one call each
    files=${TESTSX_FILES:-tests}
    timeout 475 python3 -m pytest -v -p no:cacheprovider -m cuda -rf -n 8 --dist loadfile --durations=12 $files \
      -k "not 32_row" 2>&1 | filt > "$OUT/testsx.log"
    grep -c " PASSED" "$OUT/testsx.log"; grep " FAILED\|ERROR" "$OUT/testsx.log" | head -20; tail -16 "$OUT/testsx.log"
    failed=$(grep -o "FAILED tests/[^ ]*" "$OUT/testsx.log" | sed 's/^FAILED //' | sort -u | head -8)
    # the assertion lines only (E ...): a traceback's tail hid the staged test's message in the eighteenth session
    [ -n "$failed" ] && { echo "rerun alone: $failed"; timeout 90 python3 -m pytest -q -p no:cacheprovider -m cuda -rf \
      --tb=short $failed 2>&1 | filt | grep -E "^E |^FAILED|passed|failed|^_____" | cut -c1-400 | head -40; } ;;
  testsb)  # the cuda suite's second half: test_kernels_w8 .. test_tiled_meta, but the files of tests2
    timeout 560 python3 -m pytest -q -p no:cacheprovider -m cuda -rf $(ls tests/test_*.py | awk '$0 >= "tests/test_kernels_w8"' \
      | grep -v "narrow_mlp\|test_profile\|save_load\|smoothing\|unpack24") -k "not 32_row" 2>&1 | filt | tail -25 ;;
  tests3)  # the decode-block files (the chain's timing prints included), then narrowtmaout (eleventh session)
    timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rf -s tests/test_decode_chain.py tests/test_decode_block.py \
      2>&1 | filt | grep -v "^$" | grep -v "^\.*$" | tail -20
    bash "$0" narrowtmaout ;;
  testsnarrow)  # the whole cuda suite, then the narrow bench (width 64 x 5, 2**21) and width 16 / 32 at 2**21
    timeout 470 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests 2>&1 | filt | tail -25
    for w in 64 16; do timeout 50 python3 examples/narrow_mlp_bench.py --width $w --no-compile --out "$OUT/narrow$w" 2>&1 | filt | grep "^| [0-9]"; done ;;
  tests2)  # the rest of the cuda suite (the whole suite no longer fits one 600 s call)
    timeout 400 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --durations=8 tests/test_narrow_mlp.py tests/test_profile.py \
      tests/test_save_load.py tests/test_smoothing.py tests/test_unpack24.py 2>&1 | filt | tail -25 ;;
  s24cslt)  # 2:4 through cuSPARSELt (route "cslt": W8A8 and W8A16, new 2026-12-01, untimed) beside dense W8A8, torchao fp8 2:4
            # and PyTorch bf16 2:4 (issue 5: M=8192 fp8 2:4 <= 2000 us if any route gets there)
    timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=line -k cslt tests/test_unpack24.py 2>&1 | filt | tail -8
    timeout 150 python3 .ci/cslt_probe.py 2>&1 | filt | grep "graph us\|FAIL"
    timeout 400 python3 -m fused bench --blocks llama --m 128,1024,8192 --no-baselines --sparse-baselines \
      --configs "ours fp8 2:4 W8A8,ours int8 2:4 W8A8,ours int8 2:4 W8A16,ours fp8 W8A8,ours int8 W8A8,ours int8 W8A16" --out "$OUT/s24cslt" 2>&1 | filt | grep "^|" | head -12
    routes "$OUT/s24cslt/bench.json" ;;
  s24graph)  # 2:4 routes picked per mode (eager / CUDA graph), cuSPARSELt for W8A8 at every M: the sparse cuda tests,
             # then the 2:4 configs at M = 1..8192 beside dense fp8 W8A8 and torchao fp8 2:4 (S24_TESTS=0: bench only)
    [ "${S24_TESTS:-1}" = 1 ] && timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_unpack24.py \
      tests/test_kernels_sparse24.py tests/test_kernels_sparse24_gemv.py tests/test_sparsity_modules.py tests/test_dispatch.py \
      tests/test_save_load.py 2>&1 | filt > "$OUT/s24tests.log"
    timeout 380 python3 -m fused bench --blocks llama --m 1,16,128,1024,8192 --no-baselines --sparse-baselines \
      --configs "ours fp8 2:4 W8A8,ours int8 2:4 W8A8,ours int8 2:4 W8A16,ours fp8 W8A8" --out "$OUT/s24graph" > "$OUT/s24graph.log" 2>&1
    routes "$OUT/s24graph/bench.json" > "$OUT/routes.txt"
    tail -12 "$OUT/s24tests.log" 2>/dev/null; grep "^|" "$OUT/s24graph.log" | head -18 ;;
  s24split)  # 2:4 W8A16 on cuSPARSELt through split planes (new, sixth session): the cslt / padding cuda tests, then
             # int8 2:4 W8A16 and fp8 2:4 W8A8 at M = 1..8192 (~200 s)
    timeout 90 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_unpack24.py tests/test_kernels_w8.py \
      -k "cslt or graph or padded" 2>&1 | filt | tail -8
    timeout 150 python3 -m fused bench --blocks llama --m "${S24_MS:-1,16,128,1024,8192}" --no-baselines \
      --configs "ours int8 2:4 W8A16,ours fp8 2:4 W8A8" --out "$OUT/s24split" > "$OUT/s24split.log" 2>&1
    routes "$OUT/s24split/bench.json" > "$OUT/routes.txt"
    grep "^|" "$OUT/s24split.log" | head -14 ;;
  cublas)  # dense W8A8 with the GEMM on cuBLAS (prepared 2026-12-01, off by default: FUSED_CUBLAS_W8A8=1), A/B in one
           # call (~250 s): the cuda tests, then fp8 / int8 W8A8 at M = 32..8192 with the route off and on
    timeout 60 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short tests/test_kernels_w8.py -k cublas 2>&1 | filt | tail -4
    for c in 0 1; do
      FUSED_CUBLAS_W8A8=$c timeout 150 python3 -m fused bench --blocks llama --m 32,128,1024,8192 --no-baselines \
        --configs "ours fp8 W8A8,ours int8 W8A8" --out "$OUT/cublas$c" > "$OUT/cublas$c.log" 2>&1
      echo "FUSED_CUBLAS_W8A8=$c"; grep "^|" "$OUT/cublas$c.log" | head -10
    done
    python3 -c "
import json
for k, v in json.load(open('$OUT/cublas1/bench.json'))['timings'].items():
    if 'dense_w8a8_route' in k: print(k[:120], sorted(v, key=lambda r: r[0]))" ;;
  seventh)  # the replay / dropped-copy fixes (2026-12-01, seventh): their cuda tests, then plain calls of the 2:4 blocks
            # at M = 1, 16 (eager graphs now on by default) and of dense W8A8 at M = 32, 128 with cuBLAS off / on (~300 s)
    timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rf --tb=short -s tests/test_launch.py tests/test_unpack24.py \
      tests/test_kernels_w8.py -k "launch or replay or library or eager_graph or cslt or cublas" 2>&1 | filt | grep "passed\|failed\|host µs\|Error" | tail -12
    timeout 100 python3 -m fused bench --blocks llama --m 1,16 --no-baselines \
      --configs "ours int8 2:4 W8A16,ours fp8 2:4 W8A8" --out "$OUT/s24eager" > "$OUT/s24eager.log" 2>&1
    grep "M=" "$OUT/s24eager.log" | head -8
    for c in 0 1; do
      FUSED_CUBLAS_W8A8=$c timeout 90 python3 -m fused bench --blocks llama --m 32,128 --no-baselines \
        --configs "ours fp8 W8A8,ours int8 W8A8" --out "$OUT/cublas$c" > "$OUT/cublas$c.log" 2>&1
      echo "FUSED_CUBLAS_W8A8=$c"; grep "M=" "$OUT/cublas$c.log" | head -8
    done ;;
  host)   # host time per replayed eager call (one buffer for the intermediates since 2026-12-01)
    timeout 200 python3 .ci/diag.py host 2>&1 | filt | grep "us/call\|replay_status" ;;
  bench)  # the README table (GPU + plain-call), one process
    timeout 580 python3 -m fused bench --blocks llama --out "$OUT/full" 2>&1 | filt > "$OUT/full.log"
    tail -32 "$OUT/full.log" ;;
  probe)  # why the decode GEMV plateaus: pure-read tile patterns (row-major vs pre-tiled) + ncu of the picks
    timeout 60 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_kernels_w8.py -k f16x 2>&1 | filt | tail -3
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    echo "ncu: $NCU"
    timeout 200 "$NCU" --clock-control none --kernel-name regex:w8a16_gemv --launch-count 12 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
      --section SchedulerStats --section LaunchStats python3 .ci/diag.py ncu1 > "$OUT/ncu.txt" 2>&1
    grep -E "w8a16_gemv|Grid Size|Block Size|DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Stall|L2 Hit|Mem Busy|Max Bandwidth" "$OUT/ncu.txt" | head -150
    timeout 300 python3 .ci/diag.py readbw 2>&1 | filt | grep -v "^ncu" ;;
  ncu128)  # why the W8A8 GEMMs at M=128 stream at ~2 TB/s: ncu of the tuned picks
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    timeout 300 "$NCU" --clock-control none --kernel-name regex:w8_gemm --launch-count 8 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
      --section SchedulerStats --section LaunchStats python3 .ci/diag.py ncu128 > "$OUT/ncu128.txt" 2>&1
    grep -E "^config|w8_gemm_kernel \(|DRAM Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit Shared|Dynamic Shared|No Eligible|Warp Cycles Per Issued|L2 Hit Rate|Waves Per SM|Est. Speedup|stalled" "$OUT/ncu128.txt" | head -120 ;;
  s24small)  # 2:4 decode at M = 1, 2, 4, 8, 16 (vsel for M <= 8 is new: the tuner and the packed/unpacked route
             # time it on first use), against dense int8 in the same process
    timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda -x tests/test_kernels_sparse24_gemv.py 2>&1 | filt | tail -2
    FUSED_RETUNE=1 timeout 400 python3 -m fused bench --blocks llama --m "${S24_MS:-1,2,4,8,16}" --no-baselines \
      --configs "ours int8 2:4 W8A16,ours int8 W8A16" --out "$OUT/s24small" 2>&1 | filt | grep "^|" | head -8
    python3 -c "
import json
j = json.load(open('$OUT/s24small/bench.json'))
for k, v in j['timings'].items():
    if 'sparse24' in k:
        v = sorted(v, key=lambda r: r[0]); print(k, v[:2])" ;;
  narrow)  # the narrow MLP: width 64 x 5 layers, batch 2**21, vs eager/compile
    timeout 60 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_narrow_mlp.py tests/test_kernels_w8.py -k "narrow or relu" 2>&1 | filt | tail -2
    timeout 300 python3 examples/narrow_mlp_bench.py --out "$OUT/narrow" 2>&1 | filt | tail -8
    python3 -c "
import json
for k, v in json.load(open('$OUT/narrow/narrow_mlp.json'))['tuning_timings'].items():
    for t, c in sorted(v, key=lambda r: r[0])[:8]: print(t, c)" ;;
  next)  # the four checks of the 2026-12-01 leftovers in one device call (~450 s): narrowbug, s24small, s24prefill, split512
    for m in narrowbug s24small s24prefill split512; do echo "=== $m"; S24_MS=4,16 bash "$0" "$m"; done ;;
  s24prefill)  # the tiled 2:4 kernel after the 16-bit word expansion (the route picks packed or unpacked per shape)
    timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda -x tests/test_kernels_sparse24.py tests/test_unpack24.py 2>&1 | filt | tail -2
    timeout 400 python3 -m fused bench --blocks llama --m 128,1024 --no-baselines \
      --configs "ours int8 2:4 W8A16,ours int8 W8A16" --out "$OUT/s24prefill" 2>&1 | filt | grep "^|" | head -8
    python3 -c "
import json
j = json.load(open('$OUT/s24prefill/bench.json'))
for k, v in j['timings'].items():
    if 'sparse24_route' in str(k):
        print(k, sorted(v, key=lambda r: r[0]))" ;;
  narrowbug)  # which narrow-MLP config faults: compute-sanitizer on each 8-layer candidate in its own process
    SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
    for w in fp16; do for i in 0 1 2 3 4; do
      timeout 60 ${SAN:+$SAN --print-limit 3} python3 .ci/diag.py narrow8 $w $i 2>&1 | filt | grep -E "^cfg|Invalid|ERROR SUMMARY|Error|at 0x|by thread" | head -6
    done; done
    CUDA_LAUNCH_BLOCKING=1 timeout 100 python3 -m pytest -q -p no:cacheprovider -m cuda -x --tb=short tests/test_narrow_mlp.py 2>&1 | filt | grep -E "^E |passed|failed" | head ;;
  narrowfix)  # the K-major narrow packing: every layer shape x every config on the GPU, the width-64 bench, split512
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/test_narrow_mlp.py 2>&1 | filt | tail -4
    timeout 150 python3 examples/narrow_mlp_bench.py --out "$OUT/narrow" 2>&1 | filt | tail -8
    bash "$0" split512 ;;
  split512)  # where the fp8 split block's time goes at M=512 (364.7 us vs 306 for its GEMMs): per-kernel times
    timeout 300 python3 .ci/diag.py split512 2>&1 | filt | grep -E "==|us  x" ;;
  abqx)  # two A/Bs, block µs at M = 64..512: fp8 W8A16 mixed-input vs e4m3 split (FUSED_FP8_SPLIT), and int8
          # W8A16 split activations by act_split (2 launches per layer) vs made inside the GEMM (FUSED_SPLIT_QX_MAX_M)
    for e in "FUSED_FP8_SPLIT=0" "FUSED_FP8_SPLIT=1" "FUSED_SPLIT_QX_MAX_M=0" "FUSED_SPLIT_QX_MAX_M=1023"; do
      c="ours fp8 W8A16"; case $e in *QX*) c="ours int8 W8A16";; esac
      echo "== $e"
      env $e timeout 140 python3 -m fused bench --blocks llama --m 64,128,256,512 --no-baselines \
        --configs "$c" --out "$OUT/ab_${e#FUSED_}" 2>&1 | filt | grep "^| ours" | head -2
    done ;;
  readtma)  # TMA / pipelined weight streams and PDL, pure-read stand-ins
    python3 -c "import triton; print('triton', triton.__version__)"
    timeout 150 python3 .ci/diag.py pdl 2>&1 | filt | grep "=="
    timeout 400 python3 .ci/diag.py readtma 2>&1 | filt ;;
  *) echo "usage: $0 tests|host|bench|probe|ncu128|s24small|narrow|narrowbug|s24prefill|split512|next|narrowfix|abqx|readtma"; exit 2 ;;
esac
