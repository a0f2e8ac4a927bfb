"""Write a pair's DFlash drafter and its DFlash2 path selector as one public-layout DFlash2
checkpoint (architecture DFlash2DraftModel, `candidate_selector.*` tensors, identity convolutions):
what a DFlash2 loader (ours, `taps.dflash2.load_drafter`, or a serving engine's) reads.

    python scripts/export_dflash2.py [--pair assets/models/taps-code-10m] --out DIR

Load it back beside the pair's target: `python -m taps generate --pair PAIR --drafter DIR --selector
ddtree ...` (the drafter's own path selector comes with it; docs/vllm.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from taps import load_pair  # noqa: E402
from taps.dflash2 import export_dflash2  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default=None, help="pair folder (default: the shipped pair)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    pair = load_pair(args.pair, device="cpu", dtype="float32", drafter_precision="same")
    if pair.path_selector is None:
        print("error: the pair has no path selector to export", file=sys.stderr)
        return 2
    export_dflash2(pair.drafter, pair.path_selector, args.out)
    print(f"wrote a DFlash2DraftModel checkpoint of {pair.name}'s drafter and path selector to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
