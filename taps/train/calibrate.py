"""Stage 5: the reach calibration shipped with the scorer (`taps.calibrate`).

On pools drafted at anchors of the validation split's target-regenerated sequences (the drafter
stage's `val.npy`, or, where it is missing, `--regenerate N` sequences the stage regenerates itself
as the drafter stage does; nothing from HumanEval or the example prompts), each verified in full by
the target, at every temperature of `--temperatures`. At T > 0 the text after each sequence's
prompt is sampled again from the target at T (seeded), as a session at T writes its own context:
fitted on the greedy text instead, the maps were 7-14% over-confident in sessions at T = 0.7 on
validation and out-of-corpus prompts (`docs/calibration.md`).

1. per estimator (marginal product, learned scorer, and DFlash2's path selector where the pair has
   one), per trace and budget B in 8-64: the run-time
   pool (pool_factor x B nodes), the estimator's raw reach, and the B nodes of highest reach,
   as a session in reach mode verifies them, with each node's outcome (its path is the target's
   greedy path at T = 0; the product of the target's probabilities along it at T > 0);
2. a `ReachMap` per estimator and temperature fitted on those nodes (isotonic per depth band);
3. per estimator, temperature and budget, rank by rank the lower quartile of a pool's best calibrated
   reaches, best first (the cautious reach curve a batch plan starts from before it has drafted);
4. a report, out of fold (fitted on half the traces, judged on the other half): expected against
   measured tau per budget and the ECE, raw and calibrated, and the equal-budget tau of each.

The online estimator gets no map of its own: it starts from the marginal product's and learns
from the session's verdicts on top of it. `--estimators selector` refits one estimator's maps (here the
selector estimator's: DFlash2's path selector times the scorer) and keeps the others' as they are.

    python -m taps.train calibrate --out RUN                      # RUN/drafter_data/val.npy -> RUN/scorer
    python -m taps.train calibrate --out RUN --pair assets/models/taps-code-10m --regenerate 512
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from taps.calibrate import CURVE_QUANTILE, DEPTH_BANDS, FIT_TEMPERATURES, Calibration, ReachMap, depth_band
from taps.estimate import LearnedEstimator, MarginalEstimator, SelectorEstimator, reach_from_edges, scorer_tables
from taps.flags import spec
from taps.kernels import top_by_reach
from taps.train.common import add_config_arguments, apply_arguments, usable_cores
from taps.train.scorer import BUDGETS, ScorerTrainConfig, Trace, collect_traces, reliability, weights_fingerprint

ESTIMATORS_FITTED = ("marginal", "learned", "selector")
NO_DATA = ("no validation sequences at {data}: run the drafter stage first, give --data, or --regenerate N to "
           "regenerate N of them here")


@dataclass
class CalibrateConfig:
    pools: int = spec(300, "validation pools per temperature", 1)
    temperatures: str = ",".join(f"{t:g}" for t in FIT_TEMPERATURES)
    anchors_per_sequence: int = spec(6, "pools drafted per regenerated sequence", 1)
    pool_factor: int = spec(4, "run-time pools of pool_factor x budget nodes (DecodeConfig's)", 1)
    estimators: str = ",".join(ESTIMATORS_FITTED)
    seed: int = 5


def drafter_settings(drafter_folder: Path) -> dict:
    """The drafter stage's data settings (corpus, prompt and generated lengths, seed) from the
    drafter's training log, the stage's defaults where it has none."""
    from taps.train.drafter import DrafterTrainConfig

    settings = asdict(DrafterTrainConfig())
    log = Path(drafter_folder) / "training_log.json"
    if log.exists():
        settings.update(json.loads(log.read_text()).get("train_config", {}))
    return settings


def validation_sequences(out: Path, data: Path, pair, settings: dict, count: int) -> np.ndarray:
    """The validation split's target-regenerated sequences at `data`; where they are missing and
    `count` > 0, `count` of them regenerated there first (greedy, the drafter stage's prompts and
    seed, so the first rows are the drafter stage's own)."""
    if not data.exists():
        if count <= 0:
            raise FileNotFoundError(NO_DATA.format(data=data))
        from taps.train import data as corpus
        from taps.train.drafter import DrafterTrainConfig, regenerate

        tc = DrafterTrainConfig(**{k: v for k, v in settings.items() if k in DrafterTrainConfig.__dataclass_fields__})
        stream = corpus.token_stream(pair.tokenizer, "val", out / "data", tc.corpus, tc.max_files)
        data.parent.mkdir(parents=True, exist_ok=True)
        regenerate(pair.target, stream, count, tc, data, tc.seed + 1, pair.device)
    return np.load(data)


def sampled_contexts(target, seqs: np.ndarray, prompt_len: int, temperature: float, seed: int,
                     batch: int = 64) -> np.ndarray:
    """Each sequence's first `prompt_len` tokens continued to its length by the target sampled at
    `temperature` (seeded): the contexts a session at T drafts from."""
    from taps.train.drafter import continue_batch

    device = next(target.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    rows = []
    for start in range(0, len(seqs), batch):
        prompts = torch.as_tensor(seqs[start: start + batch, :prompt_len].astype(np.int64), device=device)
        rows.append(continue_batch(target, prompts, seqs.shape[1] - prompt_len, temperature, generator).cpu().numpy())
    return np.concatenate(rows).astype(seqs.dtype)


def temperatures(text: str) -> list[float]:
    try:
        values = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"--temperatures takes comma-separated numbers, got {text!r}") from None
    if not values or any(t < 0 or t > 5 for t in values):
        raise ValueError(f"--temperatures must be from 0 to 5, got {text!r}")
    return values


def node_outcomes(trace: Trace, nodes: int, temperature: float):
    """The run-time pool of `nodes` nodes and each node's outcome: 1/0 whether its path is the
    target's greedy path (T = 0), or the product of the target's probabilities along it (T > 0)."""
    pool, prob, greedy = trace.sub_pool(nodes)
    edge = np.concatenate([[1.0], prob if temperature > 0 else greedy])
    return pool, reach_from_edges(pool.parents, edge)


def selections(traces: list[Trace], estimator, temperature: float, reach_map: ReachMap | None = None,
               budgets=BUDGETS, pool_factor: int = 4) -> dict[int, list[tuple[np.ndarray, ...]]]:
    """Per budget, per trace: (reach, outcome, depth) of the nodes TAPS verifies in reach mode, the
    reach the estimator's raw one or, with `reach_map`, the calibrated one it selects by."""
    out = {}
    for budget in budgets:
        rows = []
        for t in traces:
            pool, outcome = node_outcomes(t, pool_factor * budget, temperature)
            reach = estimator.raw_reach(pool, t.lattice)
            if reach_map is not None:
                reach = reach_map.capped(pool.parents, pool.depths, reach)
            chosen = top_by_reach(reach, min(budget, pool.size), np.empty(0))[1:]
            rows.append((reach[chosen], outcome[chosen], pool.depths[chosen]))
        out[budget] = rows
    return out


def judge(sel: dict[int, list]) -> dict:
    """Expected (1 + sum of reach) and measured (1 + sum of outcomes) tau per budget, and the
    reliability of all selected nodes."""
    by_budget = {}
    for budget, rows in sel.items():
        expected = float(np.mean([1 + r.sum() for r, _, _ in rows]))
        measured = float(np.mean([1 + o.sum() for _, o, _ in rows]))
        by_budget[str(budget)] = {"expected": round(expected, 4), "measured": round(measured, 4),
                                  "ratio": round(expected / measured, 4)}
    pred, obs, _ = _pooled(sel)
    table, ece = reliability(pred, obs)
    return {"tau": by_budget, "ece": round(float(ece), 5), "reliability": table}


def _pooled(sel: dict[int, list]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows = [row for rows in sel.values() for row in rows]
    return tuple(np.concatenate([row[i] for row in rows]) for i in range(3))


def fit(traces: list[Trace], estimator, temperature: float, pool_factor: int, rounds: int = 3) -> ReachMap:
    """The isotonic map of the nodes the raw reach selects, then `rounds` passes that scale each
    band's knots so that, on the nodes the calibrated reach selects (capped as at run time), the
    band's summed reach equals its summed outcomes: the interpolation between knots and the caps
    would otherwise leave the expected tau a few percent low."""
    reach_map = ReachMap.fit(*_pooled(selections(traces, estimator, temperature, None, BUDGETS, pool_factor)))
    for _ in range(rounds):
        reach, outcome, depths = _pooled(selections(traces, estimator, temperature, reach_map, BUDGETS, pool_factor))
        reach_map = reach_map.scaled(depth_sums(outcome, depths) / np.maximum(depth_sums(reach, depths), 1e-9))
    return reach_map


def depth_sums(values: np.ndarray, depths: np.ndarray) -> np.ndarray:
    return np.bincount(depth_band(depths), weights=values, minlength=len(DEPTH_BANDS))


def calibrate_estimator(traces: list[Trace], estimator, temperature: float, pool_factor: int) -> tuple[ReachMap, dict]:
    """The map fitted on all traces, and the out-of-fold report (two halves, each judged by the
    other's map)."""
    halves = [traces[0::2], traces[1::2]]
    report = {}
    for kind in ("raw", "calibrated"):
        merged: dict[int, list] = {b: [] for b in BUDGETS}
        for i, half in enumerate(halves):
            reach_map = fit(halves[1 - i], estimator, temperature, pool_factor) if kind == "calibrated" else None
            for b, rows in selections(half, estimator, temperature, reach_map, BUDGETS, pool_factor).items():
                merged[b].extend(rows)
        report[kind] = judge(merged)
    return fit(traces, estimator, temperature, pool_factor), report


def reach_curves(traces: list[Trace], estimator, temperature: float, reach_map: ReachMap,
                 pool_factor: int) -> dict[int, list[float]]:
    """Per budget B: rank by rank, the CURVE_QUANTILE-th percentile over the traces of the B best
    calibrated reaches of the run-time pool, best first (zero where a pool has fewer nodes): the
    cautious curve a batch plan starts from (`Calibration.reach_curve`)."""
    out = {}
    for budget, rows in selections(traces, estimator, temperature, reach_map, BUDGETS, pool_factor).items():
        curves = np.zeros((max(len(rows), 1), budget))
        for i, (reach, _, _) in enumerate(rows):
            top = np.sort(reach)[::-1][:budget]
            curves[i, :len(top)] = top
        out[budget] = [float(v) for v in np.percentile(curves, CURVE_QUANTILE, axis=0)]
    return out


def print_report(name: str, temperature: float, report: dict) -> None:
    print(f"{name} at T={temperature:g}: ECE raw {report['raw']['ece']:.4f} -> calibrated "
          f"{report['calibrated']['ece']:.4f} (out of fold)")
    for b in report["raw"]["tau"]:
        r, c = report["raw"]["tau"][b], report["calibrated"]["tau"][b]
        print(f"  B={b:>2}: raw expected {r['expected']:.2f} / measured {r['measured']:.2f} ({r['ratio']:.3f}); "
              f"calibrated {c['expected']:.2f} / {c['measured']:.2f} ({c['ratio']:.3f})")


def cached_traces(out: Path, pair, seqs: np.ndarray, prompt_len: int, cc: CalibrateConfig, tc: ScorerTrainConfig,
                  temperature: float) -> list[Trace]:
    """The validation traces at `temperature`: read back from OUT/calibration_data when collected
    with this target and drafter (their weights; the scorer and its calibration play no part in a
    trace), these sequences and settings, else collected and saved there."""
    key = json.dumps([weights_fingerprint(pair.target, pair.drafter), int(seqs.shape[0]), int(seqs[:, :8].sum()),
                      prompt_len, {k: v for k, v in asdict(cc).items() if k != "estimators"}, temperature,
                      "sampled contexts" if temperature > 0 else "greedy"])
    path = out / "calibration_data" / f"traces-T{temperature:g}.pt"
    if path.exists():
        saved = torch.load(path, weights_only=False)
        if saved.get("key") == key:
            print(f"loaded {len(saved['traces'])} traces from {path}")
            return saved["traces"]
    if temperature > 0:
        seqs = sampled_contexts(pair.target, seqs, prompt_len, temperature, cc.seed)
    traces = collect_traces(pair, seqs, prompt_len, cc.pools, tc, np.random.default_rng(cc.seed),
                            f"validation, T={temperature:g}", temperature)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"key": key, "traces": traces}, path)
    return traces


def main(args: argparse.Namespace) -> None:
    from taps.pair import load_pair

    cc = CalibrateConfig()
    apply_arguments(args, cc)
    temps = temperatures(cc.temperatures)
    torch.set_num_threads(usable_cores())
    out = Path(args.out)
    data = Path(args.data) if args.data else out / "drafter_data" / "val.npy"
    if not data.exists() and args.regenerate <= 0:          # before the pair loads
        raise FileNotFoundError(NO_DATA.format(data=data))
    if args.pair:
        pair = load_pair(args.pair)
    else:
        pair = load_pair(None, target=str(out / "target"), drafter=str(out / "drafter"), scorer=str(out / "scorer"))
    if pair.scorer is None or pair.drafter is None:
        raise ValueError("calibration needs a pair with a drafter and a scorer")
    scorer_folder = Path(args.scorer_folder) if args.scorer_folder else _part_folder(args, out, "scorer")
    settings = drafter_settings(_part_folder(args, out, "drafter"))
    seqs = validation_sequences(out, data, pair, settings, args.regenerate)
    prompt_len = int(settings["prompt_len"])
    tc = ScorerTrainConfig(anchors_per_sequence=cc.anchors_per_sequence, pool_factor=cc.pool_factor)
    chosen = [e.strip() for e in cc.estimators.split(",") if e.strip()]
    unknown = sorted(set(chosen) - set(ESTIMATORS_FITTED))
    if unknown or not chosen:
        raise ValueError(f"--estimators takes some of {', '.join(ESTIMATORS_FITTED)}, got {cc.estimators!r}")
    if "selector" in chosen and getattr(pair, "path_selector", None) is None:
        chosen.remove("selector")            # a pair without DFlash2's path selector has no selector estimator
    kept = Calibration.load(scorer_folder)
    maps: dict[str, dict[float, ReachMap]] = {name: dict(by_t) for name, by_t in (kept.maps if kept else {}).items()
                                              if name not in chosen}
    curves = {name: dict(by_t) for name, by_t in (kept.curves if kept else {}).items() if name not in chosen}
    reports: dict = {name: {} for name in chosen}
    t0 = time.time()
    for temperature in temps:
        traces = cached_traces(out, pair, seqs, prompt_len, cc, tc, temperature)
        for name in chosen:
            estimator = fitted_estimator(name, pair, temperature)
            maps.setdefault(name, {})[temperature], reports[name][f"{temperature:g}"] = calibrate_estimator(
                traces, estimator, temperature, cc.pool_factor)
            print_report(name, temperature, reports[name][f"{temperature:g}"])
            curves.setdefault(name, {})[temperature] = reach_curves(
                traces, estimator, temperature, maps[name][temperature], cc.pool_factor)
    meta = {"pair": pair.name, "fitted_on": f"{cc.pools} pools per temperature from {data.name} (validation split; "
                                            "at T>0 its prompts continued by the target sampled at T)",
            "budgets": list(BUDGETS), "config": asdict(cc)}
    path = Calibration(maps, meta, curves).save(scorer_folder)
    (out / "calibration_report.json").parent.mkdir(parents=True, exist_ok=True)
    (out / "calibration_report.json").write_text(json.dumps({**meta, "seconds": round(time.time() - t0, 1),
                                                             "report": reports}, indent=1) + "\n")
    print(f"saved {path} and {out / 'calibration_report.json'} ({(time.time() - t0) / 60:.1f} min)")


def fitted_estimator(name: str, pair, temperature: float):
    """A fresh, uncalibrated estimator of this name for fitting its map at `temperature`."""
    if name == "marginal":
        return MarginalEstimator()
    if name == "learned":
        return LearnedEstimator(scorer_tables(pair))
    return SelectorEstimator(pair.path_selector, temperature, LearnedEstimator(scorer_tables(pair)))


def _part_folder(args: argparse.Namespace, out: Path, part: str) -> Path:
    """The folder of the pair's `part` (scorer, drafter): the run's, or the one `--pair` names."""
    if not args.pair:
        return out / part
    from taps.pair import _pair_manifest

    return Path(_pair_manifest(Path(args.pair))[part])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="run folder (drafter_data/val.npy; the report)")
    parser.add_argument("--pair", default=None, help="pair folder or name to calibrate (default: OUT's parts)")
    parser.add_argument("--data", default=None, help="validation sequences (default OUT/drafter_data/val.npy)")
    parser.add_argument("--regenerate", type=int, default=0,
                        help="where those sequences are missing, regenerate this many from the validation split first")
    parser.add_argument("--scorer-folder", default=None,
                        help="where calibration.json goes (default: the pair's scorer folder)")
    add_config_arguments(parser, CalibrateConfig)
