"""`python -m taps generate|compare ...` (also the `taps` console script): the command line, whose
code is `taps.eval.cli`."""

import os
import sys

# Before torch is first imported: OpenMP threads that sleep at barriers instead of spinning, so a
# busy machine slows a run down by its share of the CPU, not many times over.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from taps.eval.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
