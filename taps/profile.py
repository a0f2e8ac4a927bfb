"""Measure this device's verify latency against tree size, and the drafter's pass.

    python -m taps.profile --pair assets/models/<pair> --max-nodes 256 [--context 128] [--out results/profile/]

Times the target's tree forward for tree sizes 0..N after --context cached tokens, and one drafter
pass (`costs.measure_profile`; CUDA events on a GPU). Writes to --out:
    verify_latency.csv   tree_size, verify_ms, draft_ms, round_ms (draft + verify)
    verify_latency.png   verify time against tree size, the drafter pass as a dashed line
    profile.json         the profile itself
and saves the profile at `costs.profile_path(pair, device)`, where TAPS's cost-aware size choice
(taps_mode "cost") reads it before measuring one of its own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from .__main__ import add_pair_arguments, load_from_args
from .costs import LatencyProfile, measure_profile, profile_path


def profile_frame(profile: LatencyProfile) -> pd.DataFrame:
    verify_ms = [1000 * s for s in profile.verify_s]
    draft_ms = 1000 * profile.draft_s
    return pd.DataFrame({"tree_size": profile.sizes, "verify_ms": verify_ms, "draft_ms": draft_ms,
                         "round_ms": [draft_ms + v for v in verify_ms]})


def write_plot(profile: LatencyProfile, path: Path) -> Path | None:
    """verify ms against tree size; PNG via kaleido, HTML when no browser is there for it, none when
    plotly is not installed (a bare GPU server)."""
    try:
        import plotly.graph_objects as go
    except ImportError:
        print("warning: plotly is not installed; no plot written (the CSV and JSON are complete)", file=sys.stderr)
        return None

    frame = profile_frame(profile)
    fig = go.Figure(go.Scatter(x=frame["tree_size"], y=frame["verify_ms"], mode="lines+markers",
                               name="verify (target tree forward)"))
    if profile.draft_s > 0:
        fig.add_hline(y=1000 * profile.draft_s, line_dash="dash", line_color="gray",
                      annotation_text="drafter pass", annotation_position="top left")
    fig.update_layout(title=f"Verify latency vs tree size: {profile.pair} on {profile.device}, "
                            f"{profile.context_length} cached tokens",
                      template="plotly_white", xaxis_title="tree size (draft nodes verified)",
                      yaxis={"title": "milliseconds (median)", "rangemode": "tozero"})
    try:
        fig.write_image(path, width=900, height=520, scale=2)
    except Exception as exc:   # kaleido needs a Chromium; the CSV and JSON are what matter
        print(f"warning: could not export PNG ({exc}); writing HTML instead", file=sys.stderr)
        path = path.with_suffix(".html")
        fig.write_html(path, include_plotlyjs="cdn")
    return path


def run_profile(args) -> int:
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
    profile = measure_profile(pair, max_nodes=args.max_nodes, context_length=args.context, repeats=args.repeats)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame = profile_frame(profile)
    frame.to_csv(out / "verify_latency.csv", index=False)
    profile.save(out / "profile.json")
    saved = profile_path(pair.name, str(pair.device))
    profile.save(saved)
    plot = write_plot(profile, out / "verify_latency.png")
    print(frame.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"# drafter pass {1000 * profile.draft_s:.3f} ms; verify grows "
          f"{frame['verify_ms'].iloc[-1] / max(frame['verify_ms'].iloc[0], 1e-9):.1f}x from size "
          f"{profile.sizes[0]} to {profile.sizes[-1]}")
    written = ", ".join(["verify_latency.csv", *([plot.name] if plot else []), "profile.json"])
    print(f"# wrote {written} to {out}; TAPS reads the profile from {saved}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m taps.profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_arguments(parser)
    parser.add_argument("--max-nodes", type=int, default=256, help="largest tree size to time")
    parser.add_argument("--context", type=int, default=128, help="cached context tokens before the tree")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per size (the median is kept)")
    parser.add_argument("--out", default="results/profile", help="folder for the CSV, PNG and JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run_profile(args)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
