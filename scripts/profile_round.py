"""Where a round's time goes, on this machine: per-stage milliseconds of real rounds, the draft
stage taken apart, and torch.profiler's top operators. Run it on an otherwise idle machine.

    python scripts/profile_round.py [--pair PATH] [--threads 1,2] [--selector ddtree] [--budget 16]
                                    [--rounds 60] [--drafter-precision same|int8] [--out results/round-profile]

Writes `<out>/round_profile.md` (and prints it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from taps import DecodeSession, load_pair
from taps.config import run_label
from taps.eval.prompts import example_prompts
from taps.pool import Lattice
from taps.record import STAGES


def stage_table(pair, prompts, selector, estimator, budget, rounds, profile):
    times = {s: [] for s in STAGES}
    taus, total = [], []
    done = 0
    while done < rounds:
        for p in prompts:
            s = DecodeSession(pair, p["prompt"], selector=selector, estimator=estimator, budget=budget,
                              taps_mode="reach", max_new_tokens=64, stop_at_eos=False, profile=profile)
            for _ in range(3):                  # warm the caches of this prompt length
                s.step()
            while not s.finished and done < rounds:
                r = s.step()
                for k in STAGES:
                    times[k].append(r.timings.get(k, 0.0))
                taus.append(r.tau)
                total.append(r.time_s)
                done += 1
            if done >= rounds:
                break
    med = {k: 1000 * statistics.median(v) for k, v in times.items()}
    return med, 1000 * statistics.median(total), sum(taus) / len(taus)


@torch.inference_mode()
def draft_parts(pair, repeats=200):
    """The draft stage taken apart: cache extension (a few committed positions), the drafter's
    layers over the block, the shared lm_head, and the top-K lattice."""
    drafter = pair.drafter
    layers = pair.feature_layers
    feats = torch.randn(1, 200, len(layers) * pair.target.config.hidden_size, dtype=pair.dtype)
    block = drafter.block_size
    out = {}

    def timed(fn):
        for _ in range(5):
            fn()
        t = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            t.append(time.perf_counter() - t0)
        return 1000 * statistics.median(t)

    cache = drafter.new_cache()
    drafter.extend_cache(cache, feats)
    new = torch.randn(1, 4, feats.shape[-1], dtype=pair.dtype)

    def extend():
        c = drafter.new_cache()
        c.keys, c.values, c.length = list(cache.keys), list(cache.values), cache.length
        drafter.extend_cache(c, new)

    ids = torch.full((1, block), pair.mask_token_id)
    emb = pair.embed(ids)
    hidden = drafter.draft_block(cache, emb)[0, 1:]
    logits = pair.lm_head(hidden)
    out["cache extension (4 positions, 200 cached)"] = timed(extend)
    out["embed block"] = timed(lambda: pair.embed(ids))
    out["drafter layers over the block"] = timed(lambda: drafter.draft_block(cache, emb))
    out["lm_head (block - 1 positions)"] = timed(lambda: pair.lm_head(hidden))
    out["lattice (top-64, statistics)"] = timed(lambda: Lattice.from_logits(logits, 64, hidden=hidden))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default=None)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--selector", default="ddtree")
    ap.add_argument("--estimator", default="marginal")
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--out", default="results/round-profile")
    args = ap.parse_args()
    pair = load_pair(args.pair, device="cpu")
    prompts = example_prompts()
    lines = [f"# Round profile: {pair.name}, {run_label(args.selector, args.estimator, args.budget)}, CPU", "",
             f"- torch {torch.__version__}; drafter precision: {pair.drafter_precision}; {args.rounds} rounds over "
             f"the example prompts (medians), after 3 warm-up rounds per prompt", ""]
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        ar, ar_total, _ = stage_table(pair, prompts, "ar", "marginal", 1, args.rounds, None)
        med, total, tau = stage_table(pair, prompts, args.selector, args.estimator, args.budget, args.rounds, None)
        lines += [f"## {threads} thread{'s' if threads > 1 else ''}", "",
                  "| stage | " + " | ".join(STAGES) + " | round | tau |", "|---|" + "---:|" * (len(STAGES) + 2),
                  "| AR (ms) | " + " | ".join(f"{ar[s]:.3f}" for s in STAGES) + f" | {ar_total:.3f} | 1.00 |",
                  f"| {run_label(args.selector, args.estimator, args.budget)} (ms) | "
                  + " | ".join(f"{med[s]:.3f}" for s in STAGES) + f" | {total:.3f} | {tau:.2f} |", "",
                  f"Draft stage = {med['draft'] / ar_total:.2f} AR rounds; verify = {med['verify'] / ar_total:.2f} AR "
                  f"rounds; modelled speed-up at this tau: {tau * ar_total / total:.2f}x", ""]
        parts = draft_parts(pair)
        lines += ["| draft part | ms |", "|---|---:|"] + [f"| {k} | {v:.3f} |" for k, v in parts.items()] + [""]
        s = DecodeSession(pair, prompts[0]["prompt"], selector=args.selector, estimator=args.estimator,
                          budget=args.budget, taps_mode="reach", max_new_tokens=200, stop_at_eos=False)
        for _ in range(3):
            s.step()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(20):
                if s.finished:
                    break
                s.step()
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)
        lines += ["Top operators over 20 rounds (torch.profiler, self CPU time):", "", "```", table, "```", ""]
    text = "\n".join(lines)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "round_profile.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
