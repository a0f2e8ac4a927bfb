#!/usr/bin/env bash
# The paper's comparison on this machine (docs/paper-comparison.md): AR, DFlash, DFlash2, DDTree at fixed
# budgets 16-512 and TAPS (learned estimator, cost-sized trees) measured side by side in one
# process per suite, then the table with TAPS over DDTree-512 and over DDTree's best.
#   bash scripts/bench_paper.sh [OUT_DIR]      (default results/paper-comparison; ~10 min on 2 idle cores)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-results/paper-comparison}"
PYTHON="${PYTHON:-python}"
common=(--selectors ar,dflash,dflash2,ddtree,taps --estimators learned --budgets 16,32,64,128,256,512
        --taps-mode cost --ddtree-mode budget --max-new-tokens 64 --ignore-eos --no-plots)
"$PYTHON" -m taps.bench --suite humaneval --limit 32 "${common[@]}" --out "$OUT/humaneval"
"$PYTHON" -m taps.bench --suite examples-v1 "${common[@]}" --out "$OUT/examples"
"$PYTHON" scripts/paper_table.py "$OUT/humaneval" "$OUT/examples" | tee "$OUT/table.md"
