"""Does TAPS's estimator gain from DFlash2's pair scores? (issue 50)

DFlash2's path selector scores adjacent candidates, S_t(a, b) = U_t(b) + <A(a) * H(h_t), B(b)>, and is
trained (K-way cross-entropy) to put the target's token first among the drafter's top K given the
target's previous token. Its softmax over the K successors of a is therefore an estimate of
q(b | a reached): exactly the path-conditioned acceptance TAPS ranks nodes by. This script tries it
as TAPS's estimator, two ways, against the shipped ones, at equal verified nodes (`taps_mode=reach`:
every run verifies its budget's best nodes, so τ compares the rankings alone):

    selector   q(b | a) = softmax_b S_t(a, b) over the K candidates (the drafter's marginal for a node
               whose token or parent's token lies outside the top K), calibrated online
    mixed      the learned scorer's q times the selector's, renormalised per parent, calibrated online

On the first N HumanEval prompts (T=0), each run checked against plain greedy decoding; every run of
a prompt side by side in one process, the variants interleaved. It prints τ per budget and the
estimate stage's milliseconds per round.

    python docs/lab/selector_estimator.py [--prompts 12] [--budgets 8,16,32] [--tokens 64]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from taps import DecodeSession, greedy_continuation, load_pair  # noqa: E402
from taps.calibrate import Calibrator  # noqa: E402
from taps.config import DecodeConfig  # noqa: E402
from taps.estimate import Estimator, make_estimator  # noqa: E402
from taps.eval.prompts import humaneval_prompts  # noqa: E402
from taps.selectors import _candidates  # noqa: E402


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class SelectorEstimator(Estimator):
    """q(b | a) from the path selector's scores over the drafter's top K (`base`: an estimator whose
    q it multiplies, renormalised over each parent's children)."""

    def __init__(self, selector, base: Estimator | None = None):
        self.selector, self.base = selector, base
        self.name = "selector" if base is None else "mixed"
        self.calibrator = Calibrator(None, "online")

    def edge_probs(self, pool, lattice):
        q = np.exp(pool.marginal_logprob).astype(np.float64)
        q[0] = 1.0
        if pool.size == 0:
            return q
        k, depth = self.selector.top_k, int(pool.depths.max())
        candidates, unary = _candidates(lattice, k, depth)
        with torch.inference_mode():
            pairs = self.selector.transitions(int(pool.tokens[0]), lattice.hidden[:depth],
                                              torch.as_tensor(candidates)).double().numpy()
        table = _softmax(unary[:, None, :] + pairs)                   # [D, K(prev), K(next)]
        d, r = pool.depths[1:], pool.ranks[1:]
        parent_rank = np.where(d == 1, 0, pool.ranks[pool.parents[1:]])
        inside = (r < k) & (parent_rank < k)
        rows = np.flatnonzero(inside) + 1
        q[rows] = table[d[inside] - 1, parent_rank[inside], r[inside]]
        if self.base is not None:
            q = q * self.base.edge_probs(pool, lattice)
            sums = np.bincount(pool.parents[1:], weights=q[1:], minlength=len(q))
            q[1:] = q[1:] / np.maximum(sums[pool.parents[1:]], 1.0)
            q[0] = 1.0
        return np.clip(q, 0.0, 1.0)


def run(pair, prompt: str, config: DecodeConfig, variant: str):
    session = DecodeSession(pair, prompt, config)
    if variant in ("selector", "mixed"):
        base = make_estimator("learned", pair, "off") if variant == "mixed" else None
        session.estimator = SelectorEstimator(pair.path_selector, base)
    start = time.perf_counter()
    session.run()
    seconds = time.perf_counter() - start
    estimate_ms = 1000 * float(np.mean([r.timings.get("estimate", 0.0) for r in session.rounds]))
    return session, seconds, estimate_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--budgets", default="8,16,32")
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(2)
    pair = load_pair()
    if getattr(pair, "path_selector", None) is None:
        raise SystemExit("the pair has no path selector")
    prompts = humaneval_prompts(args.prompts)
    variants = ("marginal", "online", "learned", "selector", "mixed")
    print(f"pair {pair.name}, {len(prompts)} HumanEval prompts, {args.tokens} new tokens, T=0, taps_mode=reach")
    print("| budget | " + " | ".join(f"τ {v}" for v in variants) + " | " +
          " | ".join(f"estimate ms {v}" for v in variants) + " |")
    print("|---:|" + "---:|" * (2 * len(variants)))
    for budget in [int(b) for b in args.budgets.split(",")]:
        tokens = {v: 0 for v in variants}
        rounds = {v: 0 for v in variants}
        est = {v: [] for v in variants}
        for item in prompts:
            config = DecodeConfig(selector="taps", budget=budget, taps_mode="reach", max_new_tokens=args.tokens,
                                  stop_at_eos=False)
            truth = None
            for v in variants:
                estimator = v if v in ("marginal", "online", "learned") else "learned"
                session, _, ms = run(pair, item["prompt"], replace(config, estimator=estimator), v)
                if truth is None:
                    truth = greedy_continuation(pair, session.prompt_ids, len(session.generated))
                if session.generated != truth[:len(session.generated)]:
                    raise SystemExit(f"{v} is not lossless on {item['id']}")
                tokens[v] += len(session.generated)
                rounds[v] += len(session.rounds)
                est[v].append(ms)
        print(f"| {budget} | " + " | ".join(f"{tokens[v] / rounds[v]:.2f}" for v in variants) + " | " +
              " | ".join(f"{np.mean(est[v]):.2f}" for v in variants) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
