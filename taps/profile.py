"""`python -m taps.profile ...`: the profile command. The measurement and its flags are
`taps.eval.profile`; the plot is drawn in the app's style by `taps.studio.plots` (none, with a
warning, where plotly is not installed: a bare GPU server)."""

import sys
from pathlib import Path

# OpenMP's own wait policy, not PASSIVE: docs/benchmarks.md, "Threads" (PASSIVE slows rounds 1.5x when idle)
from taps.eval.cli import run_command
from taps.eval.profile import build_parser, run_profile


def write_plot(profile, path: Path) -> Path | None:
    try:
        from taps.studio.plots import write_profile_plot
    except ImportError:
        print("warning: plotly is not installed; no plot written (the CSV and JSON are complete)", file=sys.stderr)
        return None
    return write_profile_plot(profile, path)


def main(argv: list[str] | None = None) -> int:
    return run_command(lambda args: run_profile(args, write_plot), build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
