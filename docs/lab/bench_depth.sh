#!/usr/bin/env bash
# What the target's depth alone does to tree decoding's speed-up over AR (results/target-depth/).
#
#   bash docs/lab/bench_depth.sh          # on an otherwise idle machine: pause training first
#
# The candidate pair (PAIR, default: taps-code-6m, the unlooped 6-layer target, its drafter and scorer,
# restored from git history: they were committed under assets/wip/ until f419de9) is grown to
# each of DEPTHS layers by scripts/grow_pair.py: the same function, so the same tokens and tau,
# and a dearer target forward. Each pair, and the earlier shipped pair taps-stdlib-6m as the
# reference (OLD_PAIR, default: restored from git history, where it last was at b774d10), then runs the
# same HumanEval sweep (32 prompts, 128 tokens, budgets 16 and 32), the app's examples (64
# tokens, budgets 8-32) and AR alone on one thread (8 prompts), one after the other, each with AR
# alongside in its own process. OUT (default results/target-depth) and WORK (the grown pairs,
# default a temporary folder) may be set.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python}
OUT=${OUT:-results/target-depth}
DEPTHS=${DEPTHS:-8 10 12}
WORK=${WORK:-$(mktemp -d)}
base=${PAIR:-}
if [ -z "$base" ]; then
    base=$WORK/d6
    mkdir -p "$base"
    for part in target-unloop:target drafter:drafter scorer:scorer; do   # git history (f419de9)
        mkdir -p "$base/${part#*:}"
        git archive f419de9 "assets/wip/taps-code-6m-${part%:*}" | tar -x -C "$base/${part#*:}" --strip-components=3
    done
    echo '{"name": "taps-code-6m", "target": "target", "drafter": "drafter", "scorer": "scorer"}' > "$base/pair.json"
fi
old=${OLD_PAIR:-}
if [ -z "$old" ]; then
    old=$WORK/old
    mkdir -p "$old"
    git archive b774d10 assets/models/taps-stdlib-6m | tar -x -C "$old" --strip-components=3
fi
declare -A pairs=([old]="$old" [d6]="$base")
order=(old d6)
for n in $DEPTHS; do
    "$PYTHON" scripts/grow_pair.py "$base" --layers "$n" --dest "$WORK/d$n"
    pairs[d$n]=$WORK/d$n
    order+=("d$n")
done
mkdir -p "$OUT"
sweep=(--selectors ar,dflash,ddtree,taps --estimators learned --ddtree-mode budget --taps-mode reach)
for p in "${order[@]}"; do
    "$PYTHON" -m taps.bench --suite humaneval --limit 32 --budgets 16,32 --max-new-tokens 128 --ignore-eos \
        --pair "${pairs[$p]}" "${sweep[@]}" --out "$OUT/humaneval-$p" > "$OUT/humaneval-$p.log" 2>&1
    "$PYTHON" -m taps.bench --suite examples-v1 --budgets 8,16,32 --max-new-tokens 64 \
        --pair "${pairs[$p]}" "${sweep[@]}" --out "$OUT/examples-$p" > "$OUT/examples-$p.log" 2>&1
    OMP_NUM_THREADS=1 "$PYTHON" -m taps.bench --suite humaneval --limit 8 --max-new-tokens 128 --ignore-eos \
        --pair "${pairs[$p]}" --selectors ar --out "$OUT/ar1-$p" > "$OUT/ar1-$p.log" 2>&1
    echo "$p done ($(date -u +%H:%M) UTC)"
done
"$PYTHON" scripts/depth_table.py "$OUT" "${order[@]}"
