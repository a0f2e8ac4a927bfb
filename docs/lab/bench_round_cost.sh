#!/usr/bin/env bash
# Before/after of the round-cost work (issue "Speculative decoding must pay on a laptop"), on an
# otherwise idle machine. Before: the engine and shipped pair as they were (a git worktree at
# BEFORE_REV, default 4eede15), run here with the same benchmark commands as the README's results.
# After: those results themselves (`bash scripts/bench_shipped.sh timed`, which runs the same
# commands with every estimator), so this script only measures the before side and prints both.
# Both use the machine's thread count (2 here); every speed-up is measured within one run.
#   bash docs/lab/bench_round_cost.sh     # writes results/round-cost/before-{profile,examples,humaneval}
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BEFORE=${BEFORE:-/tmp/taps-before}
REV=${BEFORE_REV:-4eede15}
OUT=${OUT:-results/round-cost}
AFTER=${AFTER:-results}
PYTHON=${PYTHON:-python}
[ -d "$BEFORE" ] || git worktree add "$BEFORE" "$REV"
mkdir -p "$OUT"
examples=(--suite examples-v1 --selectors ar,dflash,ddtree,taps,oracle --budgets 8,16,32 --max-new-tokens 64)
humaneval=(--suite humaneval --limit 32 --selectors ar,dflash,ddtree,taps,oracle --budgets 8,16,32,64
           --max-new-tokens 128 --ignore-eos)
export TAPS_CACHE="$ROOT/$OUT/cache"
(cd "$BEFORE" && "$PYTHON" -m taps.profile --max-nodes 64 --out "$ROOT/$OUT/before-profile" > "$ROOT/$OUT/before-profile.log" 2>&1)
for suite in examples humaneval; do
    args=(); [ "$suite" = examples ] && args=("${examples[@]}") || args=("${humaneval[@]}")
    (cd "$BEFORE" && "$PYTHON" -m taps.bench "${args[@]}" --out "$ROOT/$OUT/before-$suite" > "$ROOT/$OUT/before-$suite.log" 2>&1)
done
for f in "$OUT"/before-*/summary.md "$AFTER"/examples-cpu-cost/summary.md "$AFTER"/humaneval-cpu-cost/summary.md; do
    [ -f "$f" ] || continue
    echo "== $f"; sed -n '/| selector/,/^$/p' "$f" | head -40
done
