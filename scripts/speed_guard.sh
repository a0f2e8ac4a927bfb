#!/usr/bin/env bash
# Speed guard (issue 44: tree rounds got 1.5x slower and no check noticed). Runs the same benchmark
# on the baseline commit (.ci/speed-baseline, checked out into a temporary git worktree) and on the
# candidate (this working tree, or --candidate DIR), alternately and one process at a time:
# baseline, candidate, baseline, candidate. Then scripts/speed_guard.py compares ratios measured
# within each run (speed-ups over AR, draft and verify stages per AR step) and AR's step across the
# alternated pairs, prints the table and exits non-zero on a failure (docs/benchmarks.md, "Speed
# guard"). A failure that not every pairing of runs shows (noise, or a small slowdown) is decided
# by a third alternated pair, on the median of three runs a side.
#   bash scripts/speed_guard.sh                       # CI: the baseline against this working tree
#   bash scripts/speed_guard.sh --baseline HEAD --candidate /tmp/copy --limit 3 --max-new-tokens 32
# Options (or environment): --baseline REV (SPEED_GUARD_BASELINE), --candidate DIR
# (SPEED_GUARD_CANDIDATE), --limit N prompts of examples-v1 (default: all 7), --max-new-tokens N
# (64), --budgets LIST (8,16,32), --selectors LIST (ar,dflash,ddtree,taps), --keep DIR (keep the
# bench folders and their logs there). PYTHON picks the interpreter (default: python on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd -P)
PYTHON=${PYTHON:-python}
BASELINE=${SPEED_GUARD_BASELINE:-}
CANDIDATE=${SPEED_GUARD_CANDIDATE:-$ROOT}
LIMIT="" MAX_NEW=64 BUDGETS=8,16,32 SELECTORS=ar,dflash,ddtree,taps KEEP=""
while [ $# -gt 0 ]; do
    case "$1" in
        --baseline) BASELINE=$2; shift 2 ;;
        --candidate) CANDIDATE=$2; shift 2 ;;
        --limit) LIMIT=$2; shift 2 ;;
        --max-new-tokens) MAX_NEW=$2; shift 2 ;;
        --budgets) BUDGETS=$2; shift 2 ;;
        --selectors) SELECTORS=$2; shift 2 ;;
        --keep) KEEP=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "speed guard: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ -z "$BASELINE" ]; then
    BASELINE=$(grep -v '^[[:space:]]*#' .ci/speed-baseline | awk 'NF {print $1; exit}')
fi
REV=$(git rev-parse --verify --quiet "$BASELINE^{commit}") \
    || { echo "speed guard: baseline '$BASELINE' is not a commit here (a shallow clone? fetch it)" >&2; exit 2; }
CANDIDATE=$(cd "$CANDIDATE" && pwd -P)

start=$(date +%s)
TMP=$(cd "$(mktemp -d "${TMPDIR:-/tmp}/speed-guard.XXXXXX")" && pwd -P)
WT="$TMP/baseline"
cleanup() {
    git -C "$ROOT" worktree remove --force "$WT" >/dev/null 2>&1 || true
    git -C "$ROOT" worktree prune >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT
git worktree add --detach --quiet "$WT" "$REV"

# Each side's own code: run from its folder with PYTHONPATH set to it (ahead of the editable install).
for dir in "$WT" "$CANDIDATE"; do
    got=$(cd "$dir" && PYTHONPATH="$dir" "$PYTHON" -c 'import os, taps; print(os.path.realpath(taps.__file__))')
    if [ "$got" != "$dir/taps/__init__.py" ]; then
        echo "speed guard: from $dir, 'import taps' loads $got, not that folder's code" >&2
        exit 2
    fi
done

limit_args=()
[ -n "$LIMIT" ] && limit_args=(--limit "$LIMIT")
bench=(-m taps.bench --suite examples-v1 --selectors "$SELECTORS" --budgets "$BUDGETS"
       --max-new-tokens "$MAX_NEW" --taps-mode reach --estimators learned --no-plots "${limit_args[@]}")
echo "# speed guard: baseline ${REV:0:12} ($WT) against candidate $CANDIDATE"
echo "# bench: python ${bench[*]}"
echo "# threads: OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}, $(getconf _NPROCESSORS_ONLN) CPUs"
RUNS="$TMP/runs"
mkdir -p "$RUNS"
run_pair() {    # the baseline's run $1, then the candidate's
    local n=$1 side dir out cache t0 load
    for side in baseline candidate; do
        dir=$WT; [ "$side" = candidate ] && dir=$CANDIDATE
        out="$RUNS/$side-$n" cache="$TMP/cache-$side-$n"
        mkdir -p "$cache"
        t0=$(date +%s) load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
        if ! (cd "$dir" && PYTHONPATH="$dir" TAPS_CACHE="$cache" "$PYTHON" "${bench[@]}" --out "$out") \
                > "$out.log" 2>&1; then
            echo "speed guard: the $side's bench failed (run $n); the end of its log:" >&2
            tail -20 "$out.log" >&2
            exit 2
        fi
        # reach-sized TAPS and budget-sized DDTree read no latency profile: none measured, none read
        if grep -q 'latency profile' "$out/summary.md" || [ -n "$(ls -A "$cache")" ]; then
            echo "speed guard: the $side's run $n used a latency profile or wrote to TAPS_CACHE ($cache)" >&2
            exit 2
        fi
        echo "# $side run $n: $(( $(date +%s) - t0 )) s (load average before it: $load)"
    done
}
verdict() {     # speed_guard.py on the first $1 pairs, with any further options
    local n=$1 i base=() cand=(); shift
    for i in $(seq 1 "$n"); do base+=("$RUNS/baseline-$i"); cand+=("$RUNS/candidate-$i"); done
    "$PYTHON" scripts/speed_guard.py --baseline "${base[@]}" --candidate "${cand[@]}" --selectors "$SELECTORS" "$@"
}

run_pair 1
run_pair 2
status=0
verdict 2 --confirm || status=$?
if [ "$status" = 3 ]; then     # a failure that not every pairing of runs shows: a third pair decides
    run_pair 3
    status=0
    verdict 3 || status=$?
fi
if [ -n "$KEEP" ]; then
    mkdir -p "$KEEP" && cp -r "$RUNS"/. "$KEEP"/
fi
echo "# speed guard took $(( $(date +%s) - start )) s"
exit $status
