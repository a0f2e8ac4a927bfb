"""`python -m taps.bench ...`: the bench command, whose code is `taps.eval.bench`."""

import sys

# OpenMP's own wait policy, not PASSIVE: docs/benchmarks.md, "Threads" (PASSIVE slows rounds 1.5x when idle)
from taps.eval.bench import main

if __name__ == "__main__":
    sys.exit(main())
