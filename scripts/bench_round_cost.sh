#!/usr/bin/env bash
# Before/after of the round-cost work (issue "Speculative decoding must pay on a laptop"), on an
# otherwise idle machine: the same benchmark commands with the engine before the work (a git
# worktree at BEFORE_REV, default 4eede15, with its own shipped pair) and with this checkout's.
# Both use the machine's thread count (2 here); every speed-up is measured within one run.
#   bash scripts/bench_round_cost.sh            # writes results/round-cost/{before,after}-{examples,humaneval}
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BEFORE=${BEFORE:-/tmp/taps-before}
REV=${BEFORE_REV:-4eede15}
OUT=${OUT:-results/round-cost}
PYTHON=${PYTHON:-python}
[ -d "$BEFORE" ] || git worktree add "$BEFORE" "$REV"
mkdir -p "$OUT"
examples=(--suite examples --selectors ar,dflash,ddtree,taps,oracle --budgets 8,16,32 --max-new-tokens 64)
humaneval=(--suite humaneval --limit 32 --selectors ar,dflash,ddtree,taps,oracle --budgets 8,16,32,64
           --max-new-tokens 128 --ignore-eos)
export TAPS_CACHE="$ROOT/$OUT/cache"
for side in before after; do
    dir=$ROOT; [ "$side" = before ] && dir=$BEFORE
    (cd "$dir" && "$PYTHON" -m taps.profile --max-nodes 64 --out "$ROOT/$OUT/$side-profile" > "$ROOT/$OUT/$side-profile.log" 2>&1)
    for suite in examples humaneval; do
        args=(); [ "$suite" = examples ] && args=("${examples[@]}") || args=("${humaneval[@]}")
        (cd "$dir" && "$PYTHON" -m taps.bench "${args[@]}" --out "$ROOT/$OUT/$side-$suite" > "$ROOT/$OUT/$side-$suite.log" 2>&1)
    done
done
for f in "$OUT"/*/summary.md; do echo "== $f"; sed -n '/## Results/,/^$/p;/| selector/,/^$/p' "$f" | head -40; done
