"""`python -m taps.bench ...`: the bench command. The sweep and its flags are `taps.eval.bench`; with
`--batch 1,2,4,...`, batches of requests (`taps.eval.batching`: throughput and speed-up over batched
AR per batch size, every selector and batch plan). The plots are drawn in the app's style by
`taps.studio.plots` (none, with a warning, where plotly is not installed: a bare GPU server)."""

import sys
from pathlib import Path

# OpenMP's own wait policy, not PASSIVE: docs/benchmarks.md, "Threads" (PASSIVE slows rounds 1.5x when idle)
from taps.eval.bench import build_parser, run_bench
from taps.eval.cli import run_command


def write_plots(summary: list[dict], out: Path, title: str) -> list[Path]:
    try:
        from taps.studio.plots import write_bench_plots
    except ImportError:
        print("warning: plotly is not installed; no plots written (rows and summary are complete)", file=sys.stderr)
        return []
    return write_bench_plots(summary, out, title)


def write_batch_plots(figures: dict, out: Path) -> list[Path]:
    try:
        from taps.studio.plots import write_batch_plots as write
    except ImportError:
        print("warning: plotly is not installed; no plots written (the table is complete)", file=sys.stderr)
        return []
    return write(figures, out)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a == "--batch" or a.startswith("--batch=") for a in argv):
        # batches of requests (`taps.eval.batching`): throughput and speed-up over batched AR per batch size
        from taps.eval.batching import build_parser as batch_parser
        from taps.eval.batching import run_batch_command

        return run_command(lambda parsed: run_batch_command(parsed, write_batch_plots), batch_parser().parse_args(argv))
    args = build_parser().parse_args(argv)
    args.argv = argv
    if not args.budgets or not args.selectors:
        print("error: give at least one budget and one selector", file=sys.stderr)
        return 2
    return run_command(lambda parsed: run_bench(parsed, write_plots), args)


if __name__ == "__main__":
    sys.exit(main())
