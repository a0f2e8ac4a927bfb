#!/usr/bin/env bash
# TAPS over DFlash2's candidates (issue 60, docs/paper-comparison.md): AR, DFlash, DFlash2, DDTree and TAPS
# with the learned scorer and with the selector estimator, budgets 8-64, TAPS sized by cost (the speed
# comparison) and by reach (equal budgets: every tree the budget's best nodes), all measured side by side in
# one process per suite (each prompt's runs one after another), on HumanEval-32 and the seven examples,
# 64 tokens; a latency profile of this machine measured first (every policy's round timed, the selector
# estimator's among them) and every cost-sized tree sized from it; then the tables.
#   bash scripts/bench_selector_tree.sh [OUT_DIR] [TEMPERATURE]   (default results/selector-tree/t0, 0;
#   about 12 minutes per temperature on 2 idle cores; LIMIT=16 for the first 16 HumanEval prompts)
set -euo pipefail
cd "$(dirname "$0")/.."
T="${2:-0}"
OUT="${1:-results/selector-tree/t$T}"
PYTHON="${PYTHON:-python}"
mkdir -p "$OUT"
[ -f "$OUT/profile/profile.json" ] || "$PYTHON" -m taps.profile --max-nodes 128 --out "$OUT/profile"
common=(--selectors ar,dflash,dflash2,ddtree,taps --estimators learned,selector --budgets 8,16,32,64
        --taps-mode cost,reach --ddtree-mode budget --max-new-tokens 64 --ignore-eos --temperature "$T" --no-plots
        --profile "$OUT/profile/profile.json")
"$PYTHON" -m taps.bench --suite humaneval --limit "${LIMIT:-32}" "${common[@]}" --out "$OUT/humaneval"
"$PYTHON" -m taps.bench --suite examples-v1 "${common[@]}" --out "$OUT/examples"
"$PYTHON" scripts/selector_tree_table.py "$OUT/humaneval" "$OUT/examples" | tee "$OUT/table.md"
