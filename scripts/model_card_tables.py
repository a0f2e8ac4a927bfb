"""The model card's training tables, read from a pair folder's training logs.

    python scripts/model_card_tables.py assets/models/taps-code-10m

Prints (Markdown): the target's run (steps, tokens, time, validation loss in nats/token and bits
per byte) and its unloop stage if it had one, the drafter's per-position top-1 agreement with the target on held-out regenerated
sequences, and the scorer's calibration (predicted reach against observed greedy acceptance) next
to the marginal product's on the same held-out pools.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def load(folder: Path, part: str, name: str = "training_log.json") -> dict:
    path = folder / part / name
    return json.loads(path.read_text()) if path.exists() else {}


def target_lines(log: dict) -> list[str]:
    if not log:
        return ["(no target training log)"]
    bpb = log.get("final_val_bpb")
    return [
        f"- target: {log['steps']:,} steps ({log.get('stopped_by', '?')}), {log['tokens_seen']:,} tokens "
        f"({log.get('epochs', 0):.2f} epochs), {log['wall_time_s'] / 60:.1f} min of training at "
        f"{log['tokens_per_s']:,.0f} tokens/s, resumed at steps {log.get('resumed_at_steps') or 'none'}; "
        f"validation {log['final_val_loss']:.4f} nats/token" + (f" = {bpb:.4f} bits/byte" if bpb else "")
        + f" ({log.get('val_scope', '?')}), train {log['final_train_loss']:.4f}",
    ]


def unloop_lines(log: dict) -> list[str]:
    """The unloop stage's run, if the target had one (target/unloop_log.json)."""
    if not log:
        return []
    c, before, after = log["config"], log["before"], log["after"]

    def share(m: dict) -> str:
        return "-" if m["distinct4_words"] is None else f"{m['distinct4_words']:.3f}"

    return [
        f"- unloop: {log['steps']} steps of sequence-level unlikelihood (alpha {c['alpha']}, repeated {c['ngram']}-grams "
        f"of tokens, lr {c['lr']}), {log['wall_time_s'] / 60:.1f} min; validation {before['val_bpb']:.4f} -> "
        f"{after['val_bpb']:.4f} bits/byte; distinct 4-grams of words in greedy continuations of "
        f"{after['eval_prompts']} validation prompts ({after['eval_gen']} tokens) {share(before)} -> {share(after)}",
    ]


def drafter_lines(log: dict) -> list[str]:
    if not log:
        return ["(no drafter training log)"]
    final = log["final"]
    agree = final["top1_agreement"]
    return [
        f"- drafter: {log['steps']:,} steps, {log['wall_time_s'] / 60:.1f} min training, "
        f"{log.get('regenerate_s', 0) / 60:.1f} min regenerating {log.get('regenerated_tokens', 0):,} tokens; "
        f"held-out loss {final['val_loss']:.3f}, expected DFlash tau {final.get('expected_dflash_tau', float('nan')):.2f}"
        + (f"; started from the drafter {log['train_config']['init_drafter']}"
           if log.get("train_config", {}).get("init_drafter") else ""),
        "",
        "| position | " + " | ".join(str(i + 1) for i in range(len(agree))) + " |",
        "|---|" + "---|" * len(agree),
        "| top-1 | " + " | ".join(f"{a:.2f}" for a in agree) + " |",
    ]


def scorer_lines(log: dict) -> list[str]:
    if not log:
        return ["(no scorer training log)"]
    learned, marginal = log["calibration_learned"], log["calibration_marginal"]
    nodes = sum(row["nodes"] for row in learned["table"])
    lines = [
        f"- scorer: {log['steps']:,} steps, {log['train_pools']:,} training pools, {log['val_pools']} held-out "
        f"pools ({nodes:,} nodes); traces {log.get('trace_s', 0) / 60:.1f} min, training {log['wall_time_s'] / 60:.1f} min",
        "",
        "| predicted reach | nodes | mean predicted | observed |",
        "|---|---:|---:|---:|",
    ]
    for row in learned["table"]:
        lines.append(f"| {row['bin']} | {row['nodes']:,} | {row['predicted']:.3f} | {row['observed']:.3f} |")
    lines += ["", f"ECE: learned scorer {learned['ece']:.4f}, marginal product {marginal['ece']:.4f} (the same pools)."]
    from taps.train.scorer import tau_line

    lines += ["", tau_line(learned, marginal) + " (the same pools)."]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pair", type=Path)
    args = ap.parse_args()
    for lines in (target_lines(load(args.pair, "target")) + unloop_lines(load(args.pair, "target", "unloop_log.json")),
                  drafter_lines(load(args.pair, "drafter")),
                  scorer_lines(load(args.pair, "scorer"))):
        print("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
