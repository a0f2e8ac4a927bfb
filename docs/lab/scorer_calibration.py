"""Check the shipped scorer against the drafter that runs now: held-out calibration (predicted reach
against observed greedy acceptance, reliability table and ECE) of the learned scorer and of the
marginal product, on pools drafted by the pair's drafter at its inference precision (int8 on the
CPU by default). Run it after any change to the drafter's inference path (the scorer reads its
hidden states), and compare with the ECE in the model card.

    python docs/lab/scorer_calibration.py --data runs/pair/drafter_data/val.npy --pools 150
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from taps.pair import load_pair  # noqa: E402
from taps.train.scorer import ScorerTrainConfig, calibration, collect_traces, tau_line  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default=None, help="pair folder or name (default: the shipped pair)")
    ap.add_argument("--data", type=Path, required=True,
                    help="held-out regenerated sequences (a drafter stage's drafter_data/val.npy)")
    ap.add_argument("--pools", type=int, default=150)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--drafter-precision", default="auto")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = ap.parse_args()
    pair = load_pair(args.pair, drafter_precision=args.drafter_precision)
    if pair.scorer is None:
        raise SystemExit(f"{pair.name} has no scorer")
    tc = ScorerTrainConfig()
    traces = collect_traces(pair, np.load(args.data), args.prompt_len, args.pools, tc,
                            np.random.default_rng(args.seed), "held-out")
    embed = torch.nn.Embedding.from_pretrained(pair.target.get_input_embeddings().weight.detach().float().cpu())
    result = {"pair": pair.name, "drafter_precision": pair.drafter_precision, "pools": len(traces),
              "learned": calibration(traces, pair.scorer.eval(), embed), "marginal": calibration(traces, None, embed)}
    print(f"\n{pair.name}, drafter {pair.drafter_precision}, {len(traces)} held-out pools "
          f"({result['learned']['nodes']:,} nodes): ECE learned {result['learned']['ece']:.4f}, "
          f"marginal product {result['marginal']['ece']:.4f}")
    for row in result["learned"]["table"]:
        print(f"  reach {row['bin']}: {row['nodes']:6d} nodes, predicted {row['predicted']:.3f}, "
              f"observed {row['observed']:.3f}")
    print("  " + tau_line(result["learned"], result["marginal"]))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
