"""Which way of reading DFlash2's path selector ranks TAPS's nodes best? (issues 50 and 60)

DFlash2's path selector scores adjacent candidates, S_t(a, b) = U_t(b) + <A(a) * H(h_t), B(b)>, and is
trained (K-way cross-entropy) to put the target's token first among the drafter's top K given the
target's previous token: its softmax over the K successors of a estimates q(b | a reached), the
path-conditioned acceptance TAPS ranks nodes by. The `selector` estimator (`taps.estimate`) reads it
so, calibrated like the others, over its own pool (the top-K lattice's best nodes by its reach).
This script compares, at equal verified nodes (`taps_mode=reach`: every run verifies its budget's
best nodes, so tau compares the rankings alone):

    marginal        the marginal product (DDTree's ranking, through its map)
    learned         the TAPS scorer (shipped)
    selector        the selector estimator, its own pool (shipped)
    selector-mpool  the same q over TAPS's usual pool (the best nodes by marginal path score)
    mixed           the learned scorer's q times the selector's, renormalised per parent, over the
                    usual pool, calibrated online only

On the first N HumanEval prompts, each run checked against plain decoding at the same seed; every
run of a prompt side by side in one process. It prints tau per budget and the estimate stage's
milliseconds per round.

    python docs/lab/selector_estimator.py [--prompts 12] [--budgets 8,16,32] [--tokens 64] [--temperature 0]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from taps import DecodeSession, greedy_continuation, load_pair, sample_continuation  # noqa: E402
from taps.calibrate import Calibrator  # noqa: E402
from taps.config import DecodeConfig  # noqa: E402
from taps.estimate import Estimator, make_estimator  # noqa: E402
from taps.eval.prompts import humaneval_prompts  # noqa: E402

VARIANTS = ("marginal", "learned", "selector", "selector-mpool", "mixed")


class Mixed(Estimator):
    """The learned scorer's q times the selector's, renormalised over each parent's children."""

    name = "mixed"

    def __init__(self, learned, selector):
        self.learned, self.selector = learned, selector
        self.calibrator = Calibrator(None, "online")

    def edge_probs(self, pool, lattice):
        q = self.learned.edge_probs(pool, lattice) * self.selector.edge_probs(pool, lattice)
        sums = np.bincount(pool.parents[1:], weights=q[1:], minlength=len(q))
        q[1:] = q[1:] / np.maximum(sums[pool.parents[1:]], 1.0)
        q[0] = 1.0
        return np.clip(q, 0.0, 1.0)


class OnMarginalPool(Estimator):
    """An estimator's q over TAPS's usual pool instead of its own."""

    def __init__(self, inner):
        self.inner, self.name, self.calibrator = inner, inner.name, inner.calibrator

    def edge_probs(self, pool, lattice):
        return self.inner.edge_probs(pool, lattice)


def session_for(pair, prompt, config: DecodeConfig, variant: str) -> DecodeSession:
    estimator = {"mixed": "learned", "selector-mpool": "selector"}.get(variant, variant)
    session = DecodeSession(pair, prompt, replace(config, estimator=estimator))
    if variant == "selector-mpool":
        session.estimator = OnMarginalPool(session.estimator)
    elif variant == "mixed":
        session.estimator = Mixed(make_estimator("learned", pair, "off", config.temperature),
                                  make_estimator("selector", pair, "off", config.temperature))
    return session


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--budgets", default="8,16,32")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    torch.set_num_threads(2)
    pair = load_pair()
    variants = args.variants.split(",")
    prompts = humaneval_prompts(args.prompts)
    print(f"pair {pair.name}, {len(prompts)} HumanEval prompts, {args.tokens} new tokens, T={args.temperature:g}, "
          "taps_mode=reach")
    print("| budget | " + " | ".join(f"τ {v}" for v in variants) + " | " +
          " | ".join(f"estimate ms {v}" for v in variants) + " |")
    print("|---:|" + "---:|" * (2 * len(variants)))
    for budget in [int(b) for b in args.budgets.split(",")]:
        tokens = dict.fromkeys(variants, 0)
        rounds = dict.fromkeys(variants, 0)
        est = {v: [] for v in variants}
        for item in prompts:
            config = DecodeConfig(selector="taps", budget=budget, taps_mode="reach", max_new_tokens=args.tokens,
                                  stop_at_eos=False, temperature=args.temperature, seed=1)
            truth = None
            for v in variants:
                session = session_for(pair, item["prompt"], config, v)
                session.run()
                if truth is None:
                    n = len(session.generated)
                    truth = (greedy_continuation(pair, session.prompt_ids, n) if args.temperature == 0 else
                             sample_continuation(pair, session.prompt_ids, n, args.temperature, 1))
                if session.generated != truth[:len(session.generated)]:
                    raise SystemExit(f"{v} is not lossless on {item['id']}")
                tokens[v] += len(session.generated)
                rounds[v] += len(session.rounds)
                est[v].append(1000 * np.mean([r.timings.get("estimate", 0.0) for r in session.rounds]))
        print(f"| {budget} | " + " | ".join(f"{tokens[v] / rounds[v]:.2f}" for v in variants) + " | " +
              " | ".join(f"{np.mean(est[v]):.2f}" for v in variants) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
