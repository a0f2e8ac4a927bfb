#!/usr/bin/env bash
# TAPS's edge in tokens/s (issue 36): TAPS/learned's best tokens/s (over budgets 8-64 and both size
# choices) over DDTree's best (over the same budgets and its two size choices), measured side by side
# in one process per run, RUNS runs per suite with the order of the two selectors alternating, on an
# otherwise idle machine; trees sized by the shipped reference CPU profile. Then scripts/edge_table.py.
#   bash scripts/bench_edge.sh [OUT_DIR] [TEMPERATURE] [RUNS] [SUITES]
#   (defaults results/edge-cpu, 0, 4, "humaneval examples-v1"; ~10 minutes on 2 idle cores)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-results/edge-cpu}"
T="${2:-0}"
RUNS="${3:-4}"
SUITES="${4:-humaneval examples-v1}"
PYTHON="${PYTHON:-python}"
common=(--estimators learned --budgets 8,16,32,64 --taps-mode cost,reach --ddtree-mode budget,cost
        --max-new-tokens 64 --ignore-eos --temperature "$T" --no-plots
        --profile assets/profiles/reference-cpu-taps-code-10m.json)
folders=()
for suite in $SUITES; do
    limit=(); [[ "$suite" == humaneval ]] && limit=(--limit 32)
    for run in $(seq 1 "$RUNS"); do
        order=ddtree,taps; (( run % 2 == 0 )) && order=taps,ddtree
        "$PYTHON" -m taps.bench --suite "$suite" "${limit[@]}" --selectors "$order" "${common[@]}" \
            --out "$OUT/$suite-run$run"
        folders+=("$OUT/$suite-run$run")
    done
done
bar=1.08; [[ "$T" != 0 ]] && bar=1.03          # the issue's bars: 1.08x at T=0, 1.03x at T=0.7
"$PYTHON" scripts/edge_table.py "${folders[@]}" --bar "$bar" | tee "$OUT/table.md"
