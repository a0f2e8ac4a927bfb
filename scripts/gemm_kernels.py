"""Time the target's linear layers on this machine: PyTorch's default F.linear (MKL's sgemm on a
CPU build) against oneDNN's GEMM on packed weights (`taps.linear`), for the row counts a round
multiplies (1 = an autoregressive step, more = a tree's verify), on the shipped pair's shapes.

    python scripts/gemm_kernels.py [--threads 2] [--rows 1,2,4,9,17,33] [--out FILE.md]

Medians of microseconds per call on a warm cache (each call repeated back to back); a round runs
them on a colder cache, so read the ratios, not the absolute times. Run it on an otherwise idle
machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from taps import linear  # noqa: E402
from taps.machine import usable_cores  # noqa: E402


def median_us(fn, repeats: int) -> float:
    for _ in range(20):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e6 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=usable_cores())
    parser.add_argument("--rows", default="1,2,4,9,17,33")
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if not linear.available():
        raise SystemExit("this PyTorch build has no oneDNN linear operators")
    torch.set_num_threads(args.threads)
    from taps import load_pair

    target = load_pair(no_drafter=True).target
    shapes = {}
    for name, module in target.named_modules():
        if isinstance(module, linear.PackedLinear):
            shapes.setdefault((module.out_features, module.in_features), name.split(".")[-1])
    rows = [int(r) for r in args.rows.split(",")]
    lines = [f"# F.linear (default) against oneDNN packed, us per call, {args.threads} threads, torch {torch.__version__}",
             "", "| matrix (out x in) | " + " | ".join(f"{r} rows" for r in rows) + " |",
             "|---|" + "---:|" * len(rows)]
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for (out_f, in_f), name in shapes.items():
            weight = torch.randn(out_f, in_f, generator=gen) * 0.05
            product = linear.packed_product(weight)
            cells = []
            for r in rows:
                x = torch.randn(r, in_f, generator=gen)
                plain = median_us(lambda x=x, w=weight: F.linear(x, w), args.repeats)
                packed = median_us(lambda x=x, p=product: p(x), args.repeats)
                cells.append(f"{plain:.1f} / {packed:.1f}")
            lines.append(f"| {name} {out_f} x {in_f} | " + " | ".join(cells) + " |")
    lines += ["", "Each cell: default / oneDNN packed."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
