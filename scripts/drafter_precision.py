"""Which drafting precision is quickest on this machine: int8 (dynamic quantization), bfloat16 and
float32 drafting of the shipped pair, each measured side by side in one run.

    python scripts/drafter_precision.py [--prompts 4] [--new 48] [--repeats 3]
    ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=AVX2 python scripts/drafter_precision.py   # another ISA

Per precision: one drafter pass (median ms, after 128 context positions, as a round runs it), the
target's AR step (median ms, one row), the draft's share of an AR step, and tokens/s of AR, DFlash
and DDTree (budgets 8, 16, 32) over the first example prompts, the methods and precisions
alternated in every repeat; the speed-ups are over AR in the same run, and the best one with its
spread (min-max over repeats). Greedy, EOS ignored. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from taps import DecodeConfig, DecodeSession, load_pair, machine  # noqa: E402
from taps.eval.measure import measure_draft, measure_verify  # noqa: E402
from taps.eval.prompts import example_prompts  # noqa: E402

PRECISIONS = {"int8": "int8", "bfloat16": "bfloat16", "float32": "same"}
METHODS = [("ar", 1), ("dflash", 16), ("ddtree", 8), ("ddtree", 16), ("ddtree", 32)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--new", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    pairs = {name: load_pair(None, device="cpu", drafter_precision=p) for name, p in PRECISIONS.items()
             if name != "int8" or machine.int8_drafting()[0]}
    prompts = [p["prompt"] for p in example_prompts()[: args.prompts]]
    draft = {name: measure_draft(pair, 128, 15) for name, pair in pairs.items()}
    ar_step = statistics.median(measure_verify(pairs["float32"], [1], 128, 15)[0][0] for _ in range(3))
    times: dict[tuple, list[float]] = {}
    tokens: dict[tuple, int] = {}
    for repeat in range(args.repeats + 1):                       # the first pass warms up, unrecorded
        for name, pair in pairs.items():
            for selector, budget in METHODS:
                total, count = 0.0, 0
                for prompt in prompts:
                    cfg = DecodeConfig(max_new_tokens=args.new, stop_at_eos=False).with_run(selector, budget=budget)
                    session = DecodeSession(pair, prompt, cfg)
                    began = time.perf_counter()
                    session.run()
                    total += time.perf_counter() - began
                    count += len(session.generated)
                if repeat:
                    times.setdefault((name, selector, budget), []).append(count / total)
                    tokens[(name, selector, budget)] = count
    print(f"CPU kernels: {torch.backends.cpu.get_cpu_capability()}, threads {torch.get_num_threads()}, "
          f"{args.prompts} example prompts x {args.new} tokens, {args.repeats} repeats; fallbacks: "
          f"{[f.key for f in machine.fallbacks()] or 'none'}")
    print(f"AR step (float32 target, one row): {1e3 * ar_step:.2f} ms")
    print("| drafting | ms per draft | draft / AR step | AR tok/s | DFlash | DDTree@8 | DDTree@16 | DDTree@32 | best |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in pairs:
        ar = statistics.median(times[(name, "ar", 1)])
        cells, best = [], (0.0, "", 0.0, 0.0)
        for selector, budget in METHODS[1:]:
            rates = times[(name, selector, budget)]
            ratio = statistics.median(rates) / ar
            cells.append(f"{ratio:.2f}x")
            if ratio > best[0]:
                best = (ratio, f"{selector}@{budget}", min(rates) / ar, max(rates) / ar)
        print(f"| {name} | {1e3 * draft[name]:.2f} | {draft[name] / ar_step:.2f} | {ar:.0f} | {' | '.join(cells)} | "
              f"{best[0]:.2f}x ({best[1]}, {best[2]:.2f}-{best[3]:.2f}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
