"""Whole batched decodes of AR and the batch plans, alternated, median seconds each: a steadier figure
than a best-of-two at 16 requests, where one decode moves by +-5% between runs.

    python scripts/batch_ab.py --profile PROFILE [--batch 16] [--limit 16] [--runs 8] [--estimator learned]

The first --limit HumanEval prompts, decoded --batch at a time with budget 16, 64 new tokens, EOS
ignored; each run decodes every method once, in turn (the order reversed every other run). It
prints each method's median and fastest seconds over the runs and its speed-up over AR (AR's
median over its median). Runs from any checkout with `BatchSession` (cd there first): the same
script times a baseline commit.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from taps.batch import PLANS, BatchSession
from taps.config import DecodeConfig
from taps.cost_model import LatencyProfile
from taps.eval.prompts import suite_prompts
from taps.pair import load_pair


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", required=True, help="a latency profile with a verify cost at a batch")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--estimator", default="learned")
    args = parser.parse_args()
    pair = load_pair("assets/models/taps-code-10m")
    profile = LatencyProfile.load(args.profile)
    prompts = [p["prompt"] for p in suite_prompts("humaneval", None)[1][:args.limit]]
    settings = dict(estimator=args.estimator, budget=16, max_new_tokens=64, stop_at_eos=False)
    seconds: dict[str, list[float]] = {"ar": [], **{plan: [] for plan in PLANS}}
    for run in range(args.runs):
        for name in (list(seconds) if run % 2 == 0 else list(seconds)[::-1]):
            total = 0.0
            for first in range(0, len(prompts), args.batch):
                batch = BatchSession(pair, prompts[first:first + args.batch],
                                     DecodeConfig(selector="ar" if name == "ar" else "taps", **settings),
                                     profile=profile, plan=None if name == "ar" else name)
                start = time.perf_counter()
                batch.run()
                total += time.perf_counter() - start
            seconds[name].append(total)
    ar = float(np.median(seconds["ar"]))
    for name, values in seconds.items():
        print(f"{PLANS.get(name, name)}: median {np.median(values):.3f} s, fastest {min(values):.3f} s over "
              f"{args.runs} runs; speed-up over AR {ar / float(np.median(values)):.3f}x")


if __name__ == "__main__":
    main()
