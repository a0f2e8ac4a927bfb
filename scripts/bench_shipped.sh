#!/usr/bin/env bash
# The benchmark behind the README's results table and the model card: the shipped pair on the
# first 40 HumanEval prompts, T=0, exactly 128 new tokens, every selector, budgets 8-64.
# Run A: TAPS with the measured-cost tree size (default); run B: TAPS taking the full budget by
# reach, for equal-budget comparisons. Each run measures AR alongside, in the same process.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results}
python -m taps.profile --max-nodes 128 --out "$OUT/profile-cpu"
common=(--suite humaneval --limit 40 --budgets 8,16,32,64 --max-new-tokens 128 --ignore-eos
        --estimators marginal,online,learned)
python -m taps.bench "${common[@]}" --selectors ar,dflash,ddtree,taps,oracle --taps-mode cost \
    --out "$OUT/humaneval-cpu-cost"
python -m taps.bench "${common[@]}" --selectors ar,ddtree,taps --taps-mode reach \
    --out "$OUT/humaneval-cpu-reach"
