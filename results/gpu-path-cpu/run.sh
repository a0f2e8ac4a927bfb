#!/usr/bin/env bash
# Before/after check of the round that does not wait on itself (docs/round-cost.md), on an idle machine:
# the same decisions (compare_deterministic.py) and no stage slower beyond its spread (stage_table.py).
# Needs the "before" checkout:  git worktree add /tmp/base df7d169
set -x
cd "$(dirname "$0")/../.." && . .venv/bin/activate
ROOT=$PWD
P=$ROOT/assets/profiles/reference-cpu-taps-code-10m.json
run() { side=$1; out=$2; shift 2; (cd $([ $side = base ] && echo /tmp/base || echo "$ROOT") && python -m taps.bench --suite examples --budgets 16 --max-new-tokens 48 --no-plots --profile $P --out $out "$@"); }
for rep in a b c; do for side in base main; do
  if [ $rep = a ]; then run $side /tmp/st-$side-$rep --selectors ar,dflash,ddtree,taps,oracle --estimators marginal,online,learned --temperature 0
  else run $side /tmp/st-$side-$rep --selectors ar,dflash,ddtree,taps --estimators learned --temperature 0; fi
done; done
for side in base main; do run $side /tmp/t07-$side --selectors ar,dflash,ddtree,taps --estimators marginal,online,learned --temperature 0.7; done
python scripts/compare_deterministic.py /tmp/st-base-a /tmp/st-main-a
python scripts/compare_deterministic.py /tmp/t07-base /tmp/t07-main
python scripts/stage_table.py before-a=/tmp/st-base-a after-a=/tmp/st-main-a before-b=/tmp/st-base-b after-b=/tmp/st-main-b before-c=/tmp/st-base-c after-c=/tmp/st-main-c --runs ar,dflash@16,ddtree@16,taps/learned@16
