#!/usr/bin/env bash
# Calibration on the evaluation prompts (docs/calibration.md): every TAPS estimator's expected tau
# (1 + the summed calibrated reach of its verified nodes) against its accepted tau at budgets 8-64,
# reach and cost mode, DDTree alongside (equal budgets), on HumanEval-32 and the examples (the seven
# of examples-v1), 128 tokens, T=0, trees sized by the shipped reference CPU profile (so every column
# but tokens/s is the same on any machine); then the tables (scripts/calibration_table.py).
#   bash scripts/bench_calibration.sh [OUT_DIR] [TEMPERATURE]   (default results/calibration-cpu, 0)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-results/calibration-cpu}"
T="${2:-0}"
PYTHON="${PYTHON:-python}"
common=(--selectors ddtree,taps --estimators marginal,online,learned --budgets 8,16,32,64 --taps-mode reach,cost
        --ddtree-mode budget --max-new-tokens 128 --ignore-eos --temperature "$T" --no-plots
        --profile assets/profiles/reference-cpu-taps-code-10m.json)
"$PYTHON" -m taps.bench --suite humaneval --limit 32 "${common[@]}" --out "$OUT/humaneval"
"$PYTHON" -m taps.bench --suite examples-v1 "${common[@]}" --out "$OUT/examples"
"$PYTHON" scripts/calibration_table.py "$OUT/humaneval" "$OUT/examples" | tee "$OUT/table.md"
