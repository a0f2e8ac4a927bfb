#!/usr/bin/env bash
# The recipe that produced the earlier shipped pair, taps-stdlib-6m (the default until 2026-12-03,
# when taps-code-10m from scripts/train_pair.sh replaced it), stage by stage. Its files are in git
# history: `git archive b774d10 assets/models/taps-stdlib-6m | tar -x` restores them.
# Each stage shows progress, checkpoints, and resumes when run again after an interruption.
# On 2 CPU cores: tokenizer ~5 s, target ~55 min, drafter ~35 min, scorer ~20 min.
# Since the pair shipped, the target stage counts only its training steps against --minutes
# (evaluation, now over the whole validation split, no longer eats into the budget), so a rerun
# trains slightly longer than the shipped target did.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${RUN:-runs/pair}
python -m taps.train tokenizer --corpus stdlib --out "$RUN"
python -m taps.train target    --out "$RUN" --minutes 55 --schedule time --max-steps 1400 --warmup-steps 100
python -m taps.train drafter   --out "$RUN" --num-layers 2 --block-size 16 --target-layers 1,3,5 --anchors 24 --minutes 30 --schedule time --max-steps 1500
python -m taps.train scorer    --out "$RUN" --minutes 10 --schedule time --label greedy --pool candidate --anchor-span 0 --val-traces 150
python -m taps.train package   --out "$RUN" --name taps-stdlib-6m
