"""How much a target's greedy text repeats: the share of distinct 4-grams (of tokens and of
whitespace-separated words) in the AR continuations of a benchmark folder, plus sample continuations.

    python scripts/text_quality.py results/humaneval-cpu-cost [--samples 3] [--prompts HumanEval/0,...]
    python scripts/text_quality.py results/humaneval-cpu-cost --by-repetition [--threshold 0.5]
    python scripts/text_quality.py OLD NEW --by-repetition --split-by OLD

Two readings: per continuation (distinct 4-grams / 4-grams, averaged over prompts; a continuation
with fewer than 4 words, one run of symbols such as '####...', counts as 0) and pooled
(distinct 4-grams over all continuations together / all 4-grams, which also counts phrases that
recur from one prompt's text to the next). 1.0 means nothing repeats; a loop drives both to 0.

--by-repetition splits the folder's prompts by their AR continuation's distinct-4-gram share of
words (below the threshold: the target loops there) and gives every selector's tau and speed-up over
AR in each part, computed as the bench computes its summary (taps.eval.bench_report.summarise) from the rows of
that part only: how much of a pair's figure comes from text that repeats itself, which any drafter
predicts easily. With --split-by FOLDER every folder's prompts are split by FOLDER's AR text
instead of their own, so that two pairs' runs on the same prompts compare part by part on the same
prompts (say, the ones where the old target loops and the ones where it does not).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from taps.eval.metrics import distinct_share, word_share  # noqa: E402
from taps.eval.metrics import ngrams as grams  # noqa: E402


def ar_rows(folder: Path) -> list[dict]:
    from taps.eval.bench_rows import finished_rows

    return [r for r in finished_rows(folder) if r["selector"] == "ar"]


def quality(folder: Path) -> dict:
    rows = ar_rows(folder)
    tokens = [s for s in (distinct_share(r["token_ids"]) for r in rows) if s is not None]
    words = [word_share(r["text"]) for r in rows]
    pooled = [g for r in rows for g in grams(r["text"].split())]
    pooled_tokens = [g for r in rows for g in grams(r["token_ids"])]
    return {"prompts": len(rows), "tokens": statistics.fmean(tokens), "words": statistics.fmean(words),
            "under_4_words": sum(len(r["text"].split()) < 4 for r in rows),
            "pooled_tokens": len(set(pooled_tokens)) / max(len(pooled_tokens), 1),
            "pooled_words": len(set(pooled)) / max(len(pooled), 1)}


def by_repetition(folder: Path, threshold: float, split_by: Path | None = None) -> str:
    from taps.eval.bench_report import summarise
    from taps.eval.bench_rows import finished_rows

    rows = finished_rows(folder)
    ids = {r["prompt_id"] for r in ar_rows(folder)}
    share = {r["prompt_id"]: word_share(r["text"]) for r in ar_rows(split_by or folder)}
    if not ids <= set(share):
        missing = sorted(ids - set(share))
        raise SystemExit(f"--split-by {split_by} has no AR row for {len(missing)} of {folder}'s prompts "
                         f"(first: {missing[0]}): split runs of the same prompts")
    share = {p: s for p, s in share.items() if p in ids}
    parts = {"all": set(share),
             f"share >= {threshold:g}": {p for p, s in share.items() if s >= threshold},
             f"share < {threshold:g} (loops)": {p for p, s in share.items() if s < threshold}}
    selectors = list(dict.fromkeys(r["selector"] for r in rows if r["selector"] != "ar"))
    summaries = {name: {_key(e): e for e in summarise([r for r in rows if r["prompt_id"] in ids], selectors)}
                 for name, ids in parts.items() if ids}
    source = "their" if split_by is None else f"{split_by}'s"
    lines = [f"{folder}: prompts split by {source} AR text's distinct-4-gram share of words "
             + ", ".join(f"{name}: {len(ids)}" for name, ids in parts.items()), "",
             "| selector | estimator | budget | size | " + " | ".join(f"{n}: tau | {n}: speed-up" for n in summaries)
             + " |", "|---|---|---:|---|" + "---:|---:|" * len(summaries)]
    for key, entry in summaries["all"].items():
        if entry["selector"] == "ar":
            continue
        cells = []
        for part in summaries.values():
            row = part.get(key)
            cells += ["-", "-"] if row is None else [f"{row['tau']:.2f}", f"{row['speedup_vs_ar']:.2f}x"]
        lines.append(f"| {key[0]} | {key[1] if key[0] == 'taps' else '-'} | {key[2]} | {key[3] or '-'} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def _key(entry: dict) -> tuple:
    return entry["selector"], entry["estimator"], entry["budget"], entry.get("mode") or ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--samples", type=int, default=0, help="print this many continuations per folder")
    ap.add_argument("--prompts", default=None, help="comma-separated prompt ids to print (default: the first)")
    ap.add_argument("--by-repetition", action="store_true",
                    help="every selector's tau and speed-up on the prompts whose AR text repeats and on the others")
    ap.add_argument("--threshold", type=float, default=0.5, help="distinct-4-gram share of words that splits them")
    ap.add_argument("--split-by", type=Path, default=None,
                    help="with --by-repetition: split every folder's prompts by this folder's AR text")
    args = ap.parse_args()
    if args.by_repetition:
        for folder in args.folders:
            print(by_repetition(folder, args.threshold, args.split_by) + "\n")
        return
    print("| folder | prompts | distinct 4-grams of tokens | of words | continuations under 4 words (0 of words) "
          "| pooled: of tokens | pooled: of words |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for folder in args.folders:
        q = quality(folder)
        print(f"| {folder} | {q['prompts']} | {q['tokens']:.2f} | {q['words']:.2f} | {q['under_4_words']} "
              f"| {q['pooled_tokens']:.2f} | {q['pooled_words']:.2f} |")
    for folder in args.folders:
        rows = ar_rows(folder)
        wanted = args.prompts.split(",") if args.prompts else [r["prompt_id"] for r in rows[: args.samples]]
        for row in rows:
            if row["prompt_id"] in wanted:
                print(f"\n--- {folder} {row['prompt_id']}\n{row['text']}")


if __name__ == "__main__":
    try:
        main()
    except FileNotFoundError as exc:
        sys.exit(f"error: {exc}")
