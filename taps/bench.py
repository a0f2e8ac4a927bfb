"""`python -m taps.bench ...`: the bench command, whose code is `taps.eval.bench`."""

import os
import sys

# Before torch is first imported: OpenMP threads that sleep at barriers instead of spinning.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from taps.eval.bench import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
