"""A bench folder's rows (`python -m taps.bench`, `taps.eval.bench`): which prompts leave room for
the new tokens, which runs a folder holds already (resuming), and rows.jsonl / rows.csv read and
written. One row per prompt x run: `runner.RunRow` plus the prompt's sha, the run's id and rank, and
the time of the AR run it was paired with."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pandas as pd

from ..config import ESTIMATORS
from ..policies import AR
from .prompts import chat_format
from .runner import AR_JOB, Job, group_key

AR_KEY = AR_JOB.key


def fit_prompts(pair, prompts: list[dict], max_new_tokens: int, chat: bool = False) -> tuple[list[dict], list[dict]]:
    """Split prompts into those that leave room for max_new_tokens in the context and the rest.
    With `chat`, each prompt is first formatted by the tokenizer's chat template (`prompts.chat_format`:
    "prompt" becomes its token ids, "text" keeps the text, and its sha is that of the ids)."""
    ids = [p["id"] for p in prompts]
    if len(set(ids)) != len(ids):
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"prompt ids must be unique (resuming matches rows by id): repeated {repeated[:5]}")
    if chat:
        prompts = chat_format(prompts, pair.tokenizer, pair.name)
    kept, skipped = [], []
    for prompt in prompts:
        given = prompt["prompt"]                       # the text, or with `chat` its token ids
        tokens = given if chat else pair.tokenizer.encode(given, add_special_tokens=False)
        length = len(tokens)
        if length == 0 or length + max_new_tokens > pair.max_context - 1:
            skipped.append({"id": prompt["id"], "tokens": length})
        else:
            digest = json.dumps(tokens) if chat else given
            kept.append({**prompt, "sha": hashlib.sha1(digest.encode()).hexdigest()[:12]})
    return kept, skipped


def row_key(row: dict) -> tuple:
    return (row["prompt_id"], *group_key(row))


def finished_rows(folder: Path) -> list[dict]:
    """A finished bench folder's rows (rows.jsonl); FileNotFoundError saying how to regenerate them
    when the folder has none (per-run rows are not kept in git)."""
    path = Path(folder) / "rows.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: per-run rows are not kept in git; rerun the command on the "
                                f"'Command' line of {folder}/summary.md into a fresh folder (--out DIR)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_rows(out: Path) -> dict[tuple, dict]:
    """Rows already in the folder (rows.jsonl, then any rank journals); later rows win."""
    rows: dict[tuple, dict] = {}
    for path in [out / "rows.jsonl", *sorted(out.glob("rows.rank*.jsonl"))]:
        if not path.exists():
            continue
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            try:
                row = json.loads(line)
                rows[row_key(row)] = row
            except (json.JSONDecodeError, KeyError, TypeError):
                print(f"warning: {path}:{n} is not a complete row (interrupted write?); it will be rerun",
                      file=sys.stderr)
    return rows


def pending_work(prompts: list[dict], jobs: list[Job], done: set[tuple]) -> list[tuple[dict, list[Job]]]:
    """Per prompt, the jobs not yet done for this prompt text; prompts with nothing left drop out."""
    work = []
    for prompt in prompts:
        left = [job for job in jobs
                if (prompt["id"], *job.key, prompt["sha"]) not in done]
        ar_done = (prompt["id"], *AR_KEY, prompt["sha"]) in done
        if left or not ar_done:
            work.append((prompt, left))
    return work


def row_order(prompts: list[dict], selectors: list[str]):
    """The rows' order: prompts as given, AR then the selectors as given, estimators, budgets, size choices."""
    prompt_rank = {p["id"]: i for i, p in enumerate(prompts)}
    selector_rank = {s: i for i, s in enumerate([AR.name, *selectors])}
    estimator_rank = {e: i for i, e in enumerate(["none", *ESTIMATORS])}

    def key(row: dict):
        return (prompt_rank.get(row["prompt_id"], len(prompt_rank)), str(row["prompt_id"]),
                selector_rank.get(row["selector"], len(selector_rank)),
                estimator_rank.get(row["estimator"], len(estimator_rank)), int(row["budget"]),
                row.get("mode") or "")
    return key


def write_rows(out: Path, rows: list[dict]) -> None:
    tmp = out / "rows.jsonl.tmp"
    with tmp.open("w") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    os.replace(tmp, out / "rows.jsonl")
    frame = pd.DataFrame(rows)
    if "token_ids" in frame:
        frame["token_ids"] = frame["token_ids"].map(json.dumps)
    frame.to_csv(out / "rows.csv", index=False)
