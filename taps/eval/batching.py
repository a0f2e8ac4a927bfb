"""`python -m taps.bench --batch 1,2,4,8,16 ...`: a suite's prompts decoded B at a time (`taps.batch`),
for AR, the chosen selectors and the batch plans, at each batch size; one table of throughput (every
request's tokens per second of decoding, prefill apart) and speed-up over batched AR at the same
batch, measured side by side in one process with the runs alternated (the best of --repeats kept,
and the range of each repeat's speed-up over the same repeat's AR beside it),
each run checked lossless against AR's tokens; with --plot, the speed-up against the batch size
(drawn by the caller's `plots`, `taps/bench.py`).

--measure  measures the verify forward at a batch here (`taps.eval.measure.measure_batch_verify`)
           and saves it into the profile the command uses, before decoding;
--price    prices every batched round on a roofline profile too (`taps.roofline`, e.g.
           roofline-h200-qwen3-8b): each step costs its requests' round overheads plus the roofline's
           forward of B x (width + 1) rows; the plans and cost-sized trees are then sized from that
           profile, so its column says what the trees the H200 would choose would earn there (an
           estimate: this pair's acceptance, the target's shapes and the device's peaks).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

from ..batch import PLANS, BatchSession
from ..batch_cost import of_profile, step_seconds
from ..policies import AR, DFLASH, TAPS, names, policy
from .cli import (
    _csv,
    add_decode_arguments,
    add_pair_arguments,
    add_prompt_arguments,
    add_selectors_argument,
    load_profile,
    suite_setup,
)


def build_parser() -> argparse.ArgumentParser:
    bat = argparse.ArgumentParser(prog="python -m taps.bench --batch", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_arguments(bat)
    add_decode_arguments(bat, exclude=("selector",))
    add_selectors_argument(bat, ", and the batch plans taps-batch (batch-aware TAPS) and chain-batch (the "
                                "confidence-scheduled chain) where the profile holds a verify cost at a batch")
    bat.add_argument("--batch", type=_csv(int), required=True, help="batch sizes, e.g. 1,2,4,8,16")
    add_prompt_arguments(bat)
    bat.add_argument("--repeats", type=int, default=2, help="alternated runs per batch size (the best is kept)")
    bat.add_argument("--measure", action="store_true",
                     help="measure the verify cost at a batch here first and save it into the profile (the --profile "
                          "file, else this machine's saved profile)")
    bat.add_argument("--price", metavar="ROOFLINE_ID",
                     help="also price every batched round on a roofline profile (e.g. roofline-h200-qwen3-8b): the "
                          "plans and cost-sized trees are then sized from it, and the table gains its modelled "
                          "throughput (an estimate)")
    bat.add_argument("--plot", metavar="FOLDER", help="write the speed-up against batch size plots (PNG) there")
    return bat


def _runs(methods: list[str], config) -> dict:
    """Per method: (its settings, its batch plan or None); a clear message for an unknown name."""
    runs = {}
    for name in methods:
        if name in PLANS:
            runs[name] = (replace(config, selector=TAPS.name, taps_mode="reach"), name)
        elif name in names():
            runs[name] = (replace(config, selector=policy(name).name), None)
        else:
            raise ValueError(f"unknown selector '{name}': choose from {', '.join([*names(), *PLANS])}")
    return runs


def _profile(args, pair, runs: dict):
    """The profile every run reads: the --price roofline's, else the --profile file or this machine's
    saved one (measured now when none fits); with --measure, its batch verify grid measured and saved."""
    from ..profiles import profile_path
    from .measure import BATCH_WIDTHS, BATCHES, measure_batch_hosts, measure_batch_verify, profile_for

    if args.price:
        from ..roofline import roofline_profile, split_id

        device, model = split_id(args.price)
        return roofline_profile(device, model, pair=pair)
    configs = [c for c, _ in runs.values()]
    profile = load_profile(args, pair, configs)
    if profile is None and (args.measure or any(plan for _, plan in runs.values())):
        profile = profile_for(pair, max_nodes=max(64, *(c.budget for c in configs)))
    if args.measure:
        print(f"# measuring the verify forward at batches {BATCHES} x widths {BATCH_WIDTHS} on {pair.device}",
              file=sys.stderr)
        grid = measure_batch_verify(pair, sorted({*BATCHES, *args.batch}), BATCH_WIDTHS)
        grid.host_batches = measure_batch_hosts(pair, grid, BATCHES)
        grid.host_s, grid.host_batch = {label: by[str(8)] for label, by in grid.host_batches.items()}, 8
        profile.batch_verify = grid.as_dict()
        where = args.profile or profile_path(pair)
        profile.save(where)
        print(f"# saved into {where}", file=sys.stderr)
    return profile


def _chosen(args, pair, config) -> tuple[list[str], dict, object]:
    """The methods that run (AR first; without --selectors every policy the pair can run and the batch
    plans, these only where the profile has a verify cost at a batch), their runs and the profile."""
    chosen = args.selectors or [*(name for name in names() if policy(name).runs_on(pair)), *PLANS]
    methods = [AR.name, *(m for m in chosen if m != AR.name)]
    runs = _runs(methods, config)
    for settings, _ in runs.values():
        settings.validate(pair)
    profile = _profile(args, pair, runs)
    if not args.selectors and of_profile(profile) is None:      # the default's plans need a verify cost at a batch
        methods = [m for m in methods if m not in PLANS]
        print(f"# {', '.join(PLANS)} left out: this profile has no verify cost at a batch (--measure measures it)",
              file=sys.stderr)
    return methods, {m: runs[m] for m in methods}, profile


def modelled_seconds(profile, label: str, steps: list[tuple[int, int, bool]]) -> float:
    """Seconds of batched steps [(requests, width, drafted)] on `profile`'s clock: each request's
    round cost besides the forward for `label` (AR's for AR and for a plan's steps that drafted
    nothing) plus one forward of the batch at the width."""
    grid = of_profile(profile)
    return sum(step_seconds(profile, grid, label, n, width, drafted) for n, width, drafted in steps)


def run_batch_command(args, plots=None) -> int:
    """The command; `plots(figures, folder)` draws --plot's figures (`taps.studio.plots.write_batch_plots`)."""
    suite, prompts, pair, config = suite_setup(args)
    methods, runs, profile = _chosen(args, pair, config)
    grid = of_profile(profile)
    if args.price and grid is None:
        raise ValueError(f"{args.price} has no verify cost at a batch to price rounds with")

    def label(name: str) -> str:
        settings, plan = runs[name]
        return TAPS.run_label(settings.estimator) if plan else settings.policy.run_label(settings.estimator)

    def decode(name: str, size: int) -> dict:
        settings, plan = runs[name]
        out = {"seconds": 0.0, "tokens": 0, "rounds": 0, "nodes": 0, "outputs": [], "steps": []}
        for first in range(0, len(prompts), size):
            batch = BatchSession(pair, [p["prompt"] for p in prompts[first:first + size]], settings,
                                 profile=profile, plan=plan)
            start = time.perf_counter()
            batch.run()
            out["seconds"] += time.perf_counter() - start
            out["tokens"] += sum(len(r.generated) for r in batch.requests)
            out["rounds"] += sum(len(r.rounds) for r in batch.requests)
            out["nodes"] += sum(record.verified_nodes for r in batch.requests for record in r.rounds)
            out["outputs"] += [r.generated for r in batch.requests]
            out["steps"] += [(n, width, drafted) for (n, width), drafted in zip(batch.widths, batch.drafted)]
        return out

    decode(AR.name, 1)                                   # warm-up: kernels, caches
    print(f"# pair {pair.name} on {pair.device}, {len(prompts)} {suite} prompts, budget {config.budget}, "
          f"T={config.temperature}, {config.max_new_tokens} new tokens; throughput = every request's tokens per "
          f"second of decoding (prefill apart), the best of {args.repeats} alternated runs")
    if grid is not None:
        print(f"# verify at a batch: {grid.describe()}")
        if grid.host_batches:
            print(f"# {grid.describe_host()}")
    priced = f" | {args.price} tokens/s (estimate) | its speed-up over AR" if args.price else ""
    print(f"| batch | selector | tau | draft nodes per request-round | steps that drafted | tokens/s "
          f"| speed-up over AR at this batch | its range over the repeats{priced} | lossless |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if args.price else "") + "---|")
    measured: dict[str, list[tuple[int, float]]] = {}           # per method's label: (batch, speed-up)
    estimated: dict[str, list[tuple[int, float]]] = {}
    for size in args.batch:
        best: dict[str, dict] = {}
        speeds: dict[str, list[float]] = {name: [] for name in methods}      # per repeat, in order
        for repeat in range(args.repeats):
            order = methods if repeat % 2 == 0 else methods[::-1]
            for name in order:
                result = decode(name, size)
                result["speed"] = result["tokens"] / result["seconds"]
                speeds[name].append(result["speed"])
                if name not in best or result["speed"] > best[name]["speed"]:
                    best[name] = result
        ar = best[AR.name]
        ar_model = ar["tokens"] / modelled_seconds(profile, AR.run_label(), ar["steps"]) if args.price else 0.0
        for name in methods:
            row = best[name]
            same = row["outputs"] == ar["outputs"]
            drafted = sum(d for _, _, d in row["steps"]) / len(row["steps"])
            # each repeat's speed-up over the same repeat's AR: how much the best-of figure varies
            ratios = [mine / theirs for mine, theirs in zip(speeds[name], speeds[AR.name])]
            cells = [str(size), PLANS.get(name, name), f"{row['tokens'] / row['rounds']:.2f}",
                     f"{row['nodes'] / row['rounds']:.1f}", f"{drafted:.0%}", f"{row['speed']:.1f}",
                     f"{row['speed'] / ar['speed']:.2f}x", f"{min(ratios):.2f}-{max(ratios):.2f}x"]
            shown = PLANS.get(name) or policy(name).label                 # the plot's name for it
            measured.setdefault(shown, []).append((size, row["speed"] / ar["speed"]))
            if args.price:
                model = row["tokens"] / modelled_seconds(profile, label(name), row["steps"])
                cells += [f"{model:.0f}", f"{model / ar_model:.2f}x"]
                estimated.setdefault(shown, []).append((size, model / ar_model))
            print("| " + " | ".join(cells) + f" | {'yes' if same else 'NO'} |", flush=True)
    if args.plot and plots is not None:
        _plot(args, pair, suite, len(prompts), config, methods, label, measured, estimated, plots)
    return 0


def _plot(args, pair, suite: str, count: int, config, methods: list[str], label, measured: dict,
          estimated: dict, plots) -> None:
    """speedup_vs_batch.png (measured here) or, priced, speedup_vs_batch_<roofline id>.png in --plot."""
    from pathlib import Path

    # a method's colour: its policy's (the confidence chain a chain's: DFlash's), the plans dashed
    names = {PLANS.get(m) or policy(m).label: DFLASH.run_label() if m == "chain-batch" else label(m)
             for m in methods if m != AR.name}
    dashed = tuple(PLANS[m] for m in methods if m in PLANS)
    what = f"{pair.name}, {count} {suite} prompts, budget {config.budget}"
    if args.price:        # the trees were sized for the priced device: its estimate is the plot
        figures = {f"speedup_vs_batch_{args.price}": dict(
            series={k: v for k, v in estimated.items() if k != AR.label}, policies=names, dashed=dashed,
            title=f"{what}, priced by the {args.price} (an estimate)")}
    else:
        figures = {"speedup_vs_batch": dict(series={k: v for k, v in measured.items() if k != AR.label},
                                            policies=names, title=f"{what}, measured on {pair.device}", dashed=dashed)}
    written = plots(figures, Path(args.plot))
    print(f"# wrote {', '.join(str(p) for p in written)}")


__all__ = ["build_parser", "run_batch_command", "modelled_seconds"]
