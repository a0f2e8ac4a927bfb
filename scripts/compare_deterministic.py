"""Check that two benchmark folders agree on everything the engine decides: per (prompt, selector,
estimator, budget, size choice), the tokens, tau, rounds and verified nodes. Timings may differ; decisions may not.

    python scripts/compare_deterministic.py results/humaneval-cpu-cost results/humaneval-cpu-cost-busy
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from taps.eval.bench_rows import finished_rows  # noqa: E402
from taps.eval.runner import group_key  # noqa: E402

FIELDS = ("token_ids", "tau", "rounds", "verified_nodes", "new_tokens")


def rows(folder: str) -> dict[tuple, dict]:
    return {(r["prompt_id"], *group_key(r)): r for r in finished_rows(Path(folder))}


def main() -> int:
    a, b = rows(sys.argv[1]), rows(sys.argv[2])
    common = sorted(a.keys() & b.keys())
    differ = [k for k in common if any(a[k][f] != b[k][f] for f in FIELDS)]
    print(f"{len(common)} rows in both ({len(a)} and {len(b)} in all); {len(differ)} differ in "
          f"{', '.join(FIELDS)}" + (f": {differ[:5]}" if differ else ""))
    return 0 if common and not differ else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except FileNotFoundError as exc:
        sys.exit(f"error: {exc}")
