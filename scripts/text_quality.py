"""How much a target's greedy text repeats: the share of distinct 4-grams (of tokens and of
whitespace-separated words) in the AR continuations of a benchmark folder, plus sample continuations.

    python scripts/text_quality.py results/humaneval-cpu-cost [--samples 3] [--prompts HumanEval/0,...]

Two readings: per continuation (distinct 4-grams / 4-grams, averaged over prompts) and pooled
(distinct 4-grams over all continuations together / all 4-grams, which also counts phrases that
recur from one prompt's text to the next). 1.0 means nothing repeats; a loop drives both to 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def distinct_share(items: list, n: int = 4) -> float | None:
    found = grams(items, n)
    return len(set(found)) / len(found) if found else None


def grams(items: list, n: int = 4) -> list[tuple]:
    return [tuple(items[i:i + n]) for i in range(len(items) - n + 1)]


def ar_rows(folder: Path) -> list[dict]:
    rows = [json.loads(line) for line in (folder / "rows.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r["selector"] == "ar"]


def quality(folder: Path) -> dict:
    rows = ar_rows(folder)
    tokens = [s for s in (distinct_share(r["token_ids"]) for r in rows) if s is not None]
    words = [s for s in (distinct_share(r["text"].split()) for r in rows) if s is not None]
    pooled = [g for r in rows for g in grams(r["text"].split())]
    pooled_tokens = [g for r in rows for g in grams(r["token_ids"])]
    return {"prompts": len(rows), "tokens": statistics.fmean(tokens), "words": statistics.fmean(words),
            "pooled_tokens": len(set(pooled_tokens)) / max(len(pooled_tokens), 1),
            "pooled_words": len(set(pooled)) / max(len(pooled), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--samples", type=int, default=0, help="print this many continuations per folder")
    ap.add_argument("--prompts", default=None, help="comma-separated prompt ids to print (default: the first)")
    args = ap.parse_args()
    print("| folder | prompts | distinct 4-grams of tokens | of words | pooled: of tokens | pooled: of words |")
    print("|---|---:|---:|---:|---:|---:|")
    for folder in args.folders:
        q = quality(folder)
        print(f"| {folder} | {q['prompts']} | {q['tokens']:.2f} | {q['words']:.2f} | {q['pooled_tokens']:.2f} "
              f"| {q['pooled_words']:.2f} |")
    for folder in args.folders:
        rows = ar_rows(folder)
        wanted = args.prompts.split(",") if args.prompts else [r["prompt_id"] for r in rows[: args.samples]]
        for row in rows:
            if row["prompt_id"] in wanted:
                print(f"\n--- {folder} {row['prompt_id']}\n{row['text']}")


if __name__ == "__main__":
    main()
