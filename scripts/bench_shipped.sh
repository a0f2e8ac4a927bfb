#!/usr/bin/env bash
# The benchmark behind the README's results table and the model card: the shipped pair on the
# first 32 HumanEval prompts, T=0, exactly 128 new tokens, budgets 8-64, on the CPU.
# Run A: every selector, TAPS choosing its tree size from the measured cost profile (default).
# Run B: DDTree and TAPS taking the full budget by reach, for equal-budget comparisons.
# Runs C, D: as A and B for DDTree and TAPS, with TAPS scoring only 96 pool nodes (--score-cap 96).
# A and B run side by side, one thread each (2 cores); every speed-up is a ratio within one run,
# against AR measured in the same process.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results}
export OMP_NUM_THREADS=1
python -m taps.profile --max-nodes 128 --out "$OUT/profile-cpu"
common=(--suite humaneval --limit 32 --budgets 8,16,32,64 --max-new-tokens 128 --ignore-eos)
python -m taps.bench "${common[@]}" --selectors ar,dflash,ddtree,taps,oracle --estimators marginal,online,learned \
    --taps-mode cost --out "$OUT/humaneval-cpu-cost" > "$OUT/humaneval-cpu-cost.log" 2>&1 &
a=$!
python -m taps.bench "${common[@]}" --selectors ar,ddtree,taps --estimators online,learned \
    --taps-mode reach --out "$OUT/humaneval-cpu-reach" > "$OUT/humaneval-cpu-reach.log" 2>&1 &
b=$!
wait $a && wait $b
# C and D: the same, with the TAPS estimators scoring only the best 96 pool nodes by marginal
capped=(--selectors ar,ddtree,taps --estimators online,learned --score-cap 96)
python -m taps.bench "${common[@]}" "${capped[@]}" --taps-mode cost --out "$OUT/humaneval-cpu-cost-cap96" \
    > "$OUT/humaneval-cpu-cost-cap96.log" 2>&1 &
c=$!
python -m taps.bench "${common[@]}" "${capped[@]}" --taps-mode reach --out "$OUT/humaneval-cpu-reach-cap96" \
    > "$OUT/humaneval-cpu-reach-cap96.log" 2>&1 &
d=$!
wait $c && wait $d
for run in cost reach cost-cap96 reach-cap96; do cat "$OUT/humaneval-cpu-$run/summary.md"; done
