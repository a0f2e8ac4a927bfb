#!/usr/bin/env bash
# The recipe for the shipped pair, taps-code-10m (assets/models/taps-code-10m), stage by stage, as
# its parts were made (the earlier pair, taps-stdlib-6m, came from scripts/train_pair_stdlib.sh). It has two runs: a 6-layer pair
# (RUN6: tokenizer, target, unloop, drafter), whose target is then grown to 12 layers and trained
# on, and whose drafter starts the 12-layer target's drafter (RUN); that drafter then
# goes on in three more runs on more of the target's regenerated text (RUN16, RUN32, RUN64). Every stage shows
# progress, checkpoints, and resumes when run again after an interruption.
#
#   bash scripts/train_pair.sh              # every stage, in order, in the foreground (~24 h on 2 cores)
#   bash scripts/train_pair.sh target-bg    # only the 6-layer target stage, in the background (nohup +
#                                           # setsid): log RUN6/target.log, pid RUN6/target.pid
#
# Pause the target with `kill -TERM $(cat RUN6/target.pid)` (it checkpoints at the next step and
# exits with status 75); run the same command again to resume. Pause any stage for a benchmark
# with `kill -STOP PID` / `kill -CONT PID`: the time budgets count training steps only. RUN6
# (default runs/pair3), RUN (default runs/pair5), RUN16, RUN32 and RUN64 (the drafter's runs on more
# regenerated text, default runs/pair6, runs/pair7 and runs/pair8) and PYTHON (default python) may be set.
#
# Corpus stdlib+libs: the Python stdlib plus the sources of torch, transformers, numpy, pandas,
# networkx and sympy, deduplicated (exact and near-duplicate files); the validation split is the
# stdlib's, as for taps-stdlib-6m, and stdlib tokens are sampled 3x as often as library tokens.
# Shape: 6 layers x 256 (MLP 768, 4 heads / 2 KV, head dim 64) trained first
# (results/target-shapes/README.md), then grown to 12 layers that compute what the 6 did and
# trained on: depth makes a round cheaper relative to an AR step (results/target-depth/README.md).
# Schedule: every stage runs with --schedule time (the cosine decay ends with the time budget, or
# at --max-steps if reached first), so a rerun reproduces the pair for the seed only up to
# timing. Where a stage was resumed with a longer budget (a warm restart of the cosine), the
# recipe runs it twice, as it was run.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN6=${RUN6:-runs/pair3}
RUN=${RUN:-runs/pair5}
RUN16=${RUN16:-runs/pair6}
RUN32=${RUN32:-runs/pair7}
RUN64=${RUN64:-runs/pair8}
PYTHON=${PYTHON:-python}
SHAPE=(--hidden-size 256 --intermediate-size 768 --num-attention-heads 4 --num-key-value-heads 2 --head-dim 64
    --max-position-embeddings 1024 --seq-len 512 --batch-size 8 --max-steps 20000 --log-every 20 --threads 2)
TARGET_ARGS=(--out "$RUN6" --corpus stdlib+libs --stdlib-weight 3 --num-hidden-layers 6 "${SHAPE[@]}"
    --lr 2e-3 --warmup-steps 200 --schedule time --minutes 170 --eval-every 500)

if [[ "${1:-}" == "target-bg" ]]; then
    mkdir -p "$RUN6"
    if [[ -f "$RUN6/target.pid" ]] && kill -0 "$(cat "$RUN6/target.pid")" 2>/dev/null; then
        echo "the target stage is already running (pid $(cat "$RUN6/target.pid"))" >&2
        exit 1
    fi
    [[ -f "$RUN6/tokenizer/tokenizer.json" ]] || "$PYTHON" -m taps.train tokenizer --corpus stdlib+libs --out "$RUN6" --stats
    nohup setsid "$PYTHON" -m taps.train target "${TARGET_ARGS[@]}" >> "$RUN6/target.log" 2>&1 < /dev/null &
    echo $! > "$RUN6/target.pid"
    echo "target stage started: pid $(cat "$RUN6/target.pid"), log $RUN6/target.log"
    exit 0
fi

# ---- the 6-layer pair (its parts are in git history at f419de9: assets/wip/taps-code-6m-*) ----
"$PYTHON" -m taps.train tokenizer --corpus stdlib+libs --out "$RUN6" --stats
"$PYTHON" -m taps.train target "${TARGET_ARGS[@]}"
# The target's greedy text loops ("the number of numbers in the number of ..."): 300 steps of
# sequence-level unlikelihood on its own greedy continuations (alpha 0.2, repeated 8-grams of tokens)
# take the distinct-4-gram share of words on HumanEval from 0.45 to 0.63 for 0.035 bits/byte
# (0.965 -> 1.001). ~14 min. The maximum-likelihood target stays in RUN6/target_mle.
"$PYTHON" -m taps.train unloop --out "$RUN6" --steps 300 --alpha 0.2 --ngram 8
# Its drafter learns from the unlooped target's own greedy text: 16,384 regenerated sequences from
# corpus prompts (~16 min), their target features cached on disk (6.4 GB). Four draft layers
# started from the target's layers 2-5 (`--init-layers`): at the same training they agree with the
# target far more than two layers from a random start (docs/training-history.md). 95 minutes, then
# resumed with the schedule extended to 183 and to 298 minutes (the last at a lower peak).
DRAFTER6=(--out "$RUN6" --corpus stdlib+libs --num-layers 4 --block-size 16 --target-layers 1,3,5 --anchors 24
    --schedule time --regen-sequences 16384 --feature-cache-gb 8 --init-layers 2,3,4,5)
"$PYTHON" -m taps.train drafter "${DRAFTER6[@]}" --minutes 95 --max-steps 6000
"$PYTHON" -m taps.train drafter "${DRAFTER6[@]}" --minutes 183 --max-steps 9000
"$PYTHON" -m taps.train drafter "${DRAFTER6[@]}" --minutes 298 --max-steps 16000 --lr 6e-4

# ---- the 12-layer pair, taps-code-10m ----
# The 6-layer maximum-likelihood target grown to 12 layers (each new layer a copy of its
# neighbour with its residual writes zeroed, so it starts as the 6-layer function; taps.train.grow)
# and trained 80 minutes more at a lower peak: 0.965 -> 0.936 bits/byte.
mkdir -p "$RUN/tokenizer" && cp "$RUN6"/tokenizer/tokenizer*.json "$RUN/tokenizer/"
"$PYTHON" -m taps.train target --out "$RUN" --corpus stdlib+libs --stdlib-weight 3 --num-hidden-layers 12 "${SHAPE[@]}" \
    --lr 6e-4 --warmup-steps 100 --schedule time --minutes 80 --eval-every 250 --seed 2026 --init-from "$RUN6/target_mle"
# Unloop, as for the 6-layer target: 0.936 -> 0.976 bits/byte, distinct-4-gram share of words on
# HumanEval 0.35 -> 0.54. ~35 min.
"$PYTHON" -m taps.train unloop --out "$RUN" --steps 300 --alpha 0.2 --ngram 8
# The drafter starts from the 6-layer drafter (`--init-drafter`), reading the grown target's layers
# 2, 6 and 11 (where layers 1, 3 and 5 went), on 8,192 sequences the 12-layer target regenerated
# (~30 min): 70 minutes at peak 6e-4, then resumed with the schedule extended to 145 minutes at
# peak 5e-4 (the cosine restarts at about 3e-4).
DRAFTER=(--out "$RUN" --corpus stdlib+libs --num-layers 4 --block-size 16 --target-layers 2,6,11 --anchors 24
    --schedule time --max-steps 8000 --regen-sequences 8192 --feature-cache-gb 8 --init-drafter "$RUN6/drafter"
    --warmup-steps 50)
"$PYTHON" -m taps.train drafter "${DRAFTER[@]}" --minutes 70 --lr 6e-4
"$PYTHON" -m taps.train drafter "${DRAFTER[@]}" --minutes 145 --lr 5e-4
# Text, not steps, moved the drafter from there (a third schedule on the same 8,192 sequences fitted
# them and lost tau): two more runs, each in a new folder that starts from the last one's target
# and regenerated sequences (the stage draws its prompt starts from the seed, so the first rows of
# a larger --regen-sequences are the smaller run's, and only the new ones are generated), each
# from the last drafter's weights at a lower peak. 16,384 sequences (~24 min more regenerating,
# features 6.4 GB): 105 minutes, held-out loss 1.99 -> 1.90. 32,768 sequences (~49 min more,
# features 12.9 GB: the most a 24 GB machine holds in memory): 75 minutes. 65,536 sequences (~1 h
# 40 min more; features 25.8 GB, memory-mapped from disk, the first 32,768 rows copied from RUN32's
# by --features-from): 150 minutes.
seed_run() {  # seed_run FROM TO: TO starts with FROM's target, corpus and regenerated sequences
    mkdir -p "$2/drafter_data"
    [[ -f "$2/drafter_data/train.npy" ]] || { cp -r "$1/target" "$1/data" "$2/" \
        && cp "$1"/drafter_data/{train.npy,val.npy,target.json} "$2/drafter_data/"; }
}
MORE=(--corpus stdlib+libs --num-layers 4 --block-size 16 --target-layers 2,6,11 --anchors 24 --schedule time
    --lr 3e-4 --warmup-steps 100)
seed_run "$RUN" "$RUN16"
"$PYTHON" -m taps.train drafter --out "$RUN16" "${MORE[@]}" --minutes 105 --max-steps 8000 --regen-sequences 16384 \
    --feature-cache-gb 8 --init-drafter "$RUN/drafter"
seed_run "$RUN16" "$RUN32"
"$PYTHON" -m taps.train drafter --out "$RUN32" "${MORE[@]}" --minutes 75 --max-steps 10000 --regen-sequences 32768 \
    --feature-cache-gb 14 --init-drafter "$RUN16/drafter"
seed_run "$RUN32" "$RUN64"
"$PYTHON" -m taps.train drafter --out "$RUN64" "${MORE[@]}" --minutes 150 --max-steps 12000 --regen-sequences 65536 \
    --feature-cache-gb 14 --feature-disk-gb 30 --features-from "$RUN32/drafter_data" --init-drafter "$RUN32/drafter"
# The scorer's traces are drafted as at run time (int8 drafter on the CPU) on TAPS's run-time
# pools (the 4 x 64 best nodes by marginal path score; every smaller budget's pool is a prefix) at
# anchors in the first 128 generated tokens, as the app and the bench decode; greedy labels
# (T=0 acceptance: soft labels fell below the marginal product on held-out tau). 16,000 traces,
# 400 held-out, 12,000 steps: ~26 min of traces, ~3 min of training (3,000 traces roughly halved
# the scorer's held-out gain over the marginal product; 12,000 steps instead of 6,000 added 1-2%
# at equal budgets, 16,000 pools instead of 8,000 nothing more, nor 30,000: the model card's lever
# table).
"$PYTHON" -m taps.train scorer  --out "$RUN64" --minutes 10 --schedule time --label greedy --max-steps 12000 \
    --train-traces 16000 --val-traces 400
# The reach calibration shipped with the scorer (docs/calibration.md): 400 validation pools per
# temperature (0, 0.7, 1.0), a map per estimator; ~4 min.
"$PYTHON" -m taps.train calibrate --out "$RUN64" --pools 400
# DFlash2's path selector for the drafter (the dflash2 policy; issue 50): blocks drafted at 8
# anchors of 2,048 regenerated sequences drawn at random (and of the 64 validation ones), rank 64,
# top-16, the step with the lowest loss on a tenth of the sequences held back; ~4 min of drafting,
# ~0.3 min of training on one thread. (The shipped selector drew its 2,048 from the 16,384 rows of
# assets/wip/taps-code-10m-drafter-data-16k.npz, git history at f419de9, as RUN/drafter_data.)
"$PYTHON" -m taps.train path_selector --out "$RUN64"
"$PYTHON" -m taps.train package --out "$RUN64" --name taps-code-10m
