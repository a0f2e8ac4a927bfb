"""Measure this device's verify latency against tree size, and the drafter's pass.

    python -m taps.profile --pair assets/models/<pair> --max-nodes 256 [--context 128] [--out results/profile/]

Times the target's tree forward for tree sizes 0..N after --context cached tokens (medians of
interleaved repeats, fitted to be non-decreasing), one drafter pass, and every policy's other
per-round costs over a real decode (`measure.measure_profile`; CUDA events on a GPU). Writes to --out:
    verify_latency.csv   tree_size, verify_ms (fitted), verify_raw_ms, spread, draft_ms
    round_costs.csv      policy, overhead_ms (a round's cost besides verify), ar_step_ms
    verify_latency.png   verify time against tree size, the drafter pass as a dashed line
    profile.json         the profile itself
and saves the profile at `taps.profiles.profile_path(pair)` (per pair contents, device, precision and
thread count), where the cost-aware size choice of TAPS and DDTree reads it. This module measures and
writes the tables; the command (`taps/profile.py`) adds the plot (`taps.studio.plots`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

import pandas as pd
import torch

from ..cost_model import LatencyProfile
from ..flags import add_out_flag
from ..profiles import profile_path
from .cli import add_pair_arguments, load_from_args
from .measure import measure_and_save


def profile_frame(profile: LatencyProfile) -> pd.DataFrame:
    raw = profile.raw_verify_s or profile.verify_s
    return pd.DataFrame({"tree_size": profile.sizes, "verify_ms": [1000 * s for s in profile.verify_s],
                         "verify_raw_ms": [1000 * s for s in raw],
                         "spread": profile.spread or [float("nan")] * len(raw), "draft_ms": 1000 * profile.draft_s})


def costs_frame(profile: LatencyProfile) -> pd.DataFrame:
    return pd.DataFrame({"policy": list(profile.overhead_s),
                         "overhead_ms": [1000 * v for v in profile.overhead_s.values()],
                         "ar_step_ms": 1000 * profile.ar_step_s})


def run_profile(args, plot: Callable[[LatencyProfile, Path], Path | None] | None = None) -> int:
    """Measure and save the profile the parsed flags describe, write the CSVs and profile.json to
    --out; `plot(profile, path)` draws verify_latency.png (the command's, `taps/profile.py`)."""
    if args.max_nodes < 1:
        raise ValueError(f"--max-nodes must be at least 1, got {args.max_nodes}")
    if args.context < 0 or args.repeats < 1:
        raise ValueError("--context must be 0 or more and --repeats at least 1")
    pair = load_from_args(args)
    if args.context + args.max_nodes + 1 > pair.max_context:
        raise ValueError(f"a {args.context}-token context plus a tree of {args.max_nodes} nodes does not fit the "
                         f"target's {pair.max_context} positions; lower --max-nodes or --context")
    print(f"# measuring {pair.name} on {pair.device} ({str(pair.dtype).replace('torch.', '')}): verify for tree "
          f"sizes up to {args.max_nodes} after {args.context} cached tokens, {args.repeats} repeats each",
          file=sys.stderr)
    profile = measure_and_save(pair, max_nodes=args.max_nodes, context_length=args.context, repeats=args.repeats)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame, round_costs = profile_frame(profile), costs_frame(profile)
    frame.to_csv(out / "verify_latency.csv", index=False)
    round_costs.to_csv(out / "round_costs.csv", index=False)
    profile.save(out / "profile.json")
    image = plot(profile, out / "verify_latency.png") if plot is not None else None
    print(frame.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(round_costs.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"# {torch.get_num_threads()} threads; drafter pass {1000 * profile.draft_s:.3f} ms; AR round "
          f"{1000 * profile.ar_step_s:.3f} ms; verify grows "
          f"{frame['verify_ms'].iloc[-1] / max(frame['verify_ms'].iloc[0], 1e-9):.1f}x from size "
          f"{profile.sizes[0]} to {profile.sizes[-1]}")
    written = ", ".join(["verify_latency.csv", "round_costs.csv", *([image.name] if image else []), "profile.json"])
    print(f"# wrote {written} to {out}; sessions read the profile from {profile_path(pair)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m taps.profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_arguments(parser)
    parser.add_argument("--max-nodes", type=int, default=256, help="largest tree size to time")
    parser.add_argument("--context", type=int, default=128, help="cached context tokens before the tree")
    parser.add_argument("--repeats", type=int, default=9, help="timed repeats per size, interleaved (medians kept)")
    add_out_flag(parser, "verify_latency.csv, round_costs.csv, verify_latency.png and profile.json",
                 default="results/profile")
    return parser


if __name__ == "__main__":
    sys.exit("the profile command is `python -m taps.profile` (this module is its measurement)")
