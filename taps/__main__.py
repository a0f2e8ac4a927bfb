"""`python -m taps generate|compare ...` (also the `taps` console script): the command line, whose
code is `taps.eval.cli`."""

import sys

# OpenMP's own wait policy, not PASSIVE: docs/benchmarks.md, "Threads" (PASSIVE slows rounds 1.5x when idle)
from taps.eval.cli import main

if __name__ == "__main__":
    sys.exit(main())
