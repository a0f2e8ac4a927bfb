"""`python -m taps.profile ...`: the profile command, whose code is `taps.eval.profile`."""

import sys

# OpenMP's own wait policy, not PASSIVE: docs/benchmarks.md, "Threads" (PASSIVE slows rounds 1.5x when idle)
from taps.eval.profile import main

if __name__ == "__main__":
    sys.exit(main())
