"""`python -m taps.bench ...`: the bench command. The sweep and its flags are `taps.eval.bench`; the
plots are drawn in the app's style by `taps.studio.plots` (none, with a warning, where plotly is
not installed: a bare GPU server)."""

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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if not args.budgets or not args.selectors:
        print("error: give at least one budget and one selector", file=sys.stderr)
        return 2
    return run_command(lambda parsed: run_bench(parsed, write_plots), args)


if __name__ == "__main__":
    sys.exit(main())
