"""Benchmark suite, latency profile and sharding, end to end on the tiny random pair."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import fixed_profile, needs_humaneval, needs_png_export

from taps import bench
from taps import profile as taps_profile
from taps.cost_model import LatencyProfile

ROOT = Path(__file__).resolve().parent.parent
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DETERMINISTIC = ["prompt_id", "selector", "estimator", "budget", "token_ids", "tau", "verified_nodes", "rounds"]
# per prompt: ar + dflash x2 + ddtree x2 + taps x (2 estimators x 2) + oracle x2
RUNS_PER_PROMPT = 1 + 2 + 2 + 4 + 2


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    path.write_text('{"id": "a", "prompt": "def f():"}\n{"id": "b", "prompt": "import os"}\n'
                    '{"id": "c", "prompt": "x = 1"}\n')
    return path


@pytest.fixture(scope="module")
def profile_out(tiny_pair_dir, tmp_path_factory) -> Path:
    """`python -m taps.profile` into its own cache folder (the other tests keep the fixed profile)."""
    out = tmp_path_factory.mktemp("profile")
    shared = os.environ["TAPS_CACHE"]
    os.environ["TAPS_CACHE"] = str(out / "cache")
    try:
        assert taps_profile.main(["--pair", str(tiny_pair_dir), "--device", "cpu", "--max-nodes", "16",
                                  "--context", "32", "--repeats", "2", "--out", str(out)]) == 0
    finally:
        os.environ["TAPS_CACHE"] = shared
    return out


@pytest.fixture(scope="module")
def bench_profile(tiny_pair, tmp_path_factory) -> Path:
    """`fixed_profile` saved: the bench's trees sized from made-up costs, not from a profile measured
    while the machine is loaded (one measured under load once sized every taps/marginal tree to its
    root, and its run had no verified node to report)."""
    path = tmp_path_factory.mktemp("fixed") / "profile.json"
    fixed_profile(tiny_pair).save(path)
    return path


@pytest.fixture(scope="module")
def bench_args(tiny_pair_dir, prompts_file, bench_profile) -> list[str]:
    """2 prompts (--limit 2 of 3), 2 budgets; one fixed latency profile so that TAPS's size choice,
    and so every deterministic column, is the same in every process and however busy the machine."""
    return ["--pair", str(tiny_pair_dir), "--prompts", str(prompts_file), "--limit", "2", "--device", "cpu",
            "--selectors", "ar,dflash,ddtree,taps,oracle", "--estimators", "marginal,online", "--budgets", "4,8",
            "--max-new-tokens", "12", "--profile", str(bench_profile)]


@pytest.fixture(scope="module")
def bench_out(bench_args, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bench") / "results"
    assert bench.main([*bench_args, "--out", str(out)]) == 0
    return out


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]


def _deterministic(rows: list[dict]) -> list[tuple]:
    return sorted(tuple(json.dumps(row[c]) for c in DETERMINISTIC) for row in rows)


def test_profile_writes_curve_and_saves_it_for_sessions(profile_out):
    with open(profile_out / "verify_latency.csv") as fh:
        table = list(csv.DictReader(fh))
    assert list(table[0]) == ["tree_size", "verify_ms", "verify_raw_ms", "spread", "draft_ms"]
    assert [int(r["tree_size"]) for r in table][-1] == 16
    fitted = [float(r["verify_ms"]) for r in table]
    assert all(v > 0 for v in fitted) and fitted == sorted(fitted) and float(table[0]["draft_ms"]) > 0
    with open(profile_out / "round_costs.csv") as fh:
        costs = {r["policy"]: float(r["overhead_ms"]) for r in csv.DictReader(fh)}
    # every policy the tiny pair runs (it has a path selector, no scorer): TAPS with the selector estimator too
    assert set(costs) == {"dflash", "dflash2", "ddtree", "taps/marginal", "taps/online", "taps/selector"}
    assert min(costs.values()) > 0
    (saved_path,) = (profile_out / "cache" / "profiles").glob("tiny-random-cpu-float32-*.json")
    saved = LatencyProfile.load(saved_path)
    assert saved.sizes == LatencyProfile.load(profile_out / "profile.json").sizes
    assert max(saved.sizes) == 16 and saved.context_length == 32 and saved.key["threads"] >= 1


@needs_png_export
def test_profile_plots_the_curve(profile_out):
    assert (profile_out / "verify_latency.png").read_bytes()[:8] == PNG_MAGIC


def test_profile_rejects_a_tree_the_context_cannot_hold(tiny_pair_dir, tmp_path, capsys):
    assert taps_profile.main(["--pair", str(tiny_pair_dir), "--device", "cpu", "--max-nodes", "256",
                              "--out", str(tmp_path)]) == 2
    assert "does not fit" in capsys.readouterr().err


@needs_png_export
def test_bench_plots(bench_out):
    for name in ("tau_vs_budget.png", "tokens_per_s_vs_budget.png", "reliability.png"):
        assert (bench_out / name).read_bytes()[:8] == PNG_MAGIC, name


def test_bench_writes_rows_and_summary(bench_out):
    for name in ("rows.jsonl", "rows.csv", "summary.csv", "summary.md", "bench.json"):
        assert (bench_out / name).exists(), name
    rows = _rows(bench_out)
    assert len(rows) == 2 * RUNS_PER_PROMPT
    assert {r["prompt_id"] for r in rows} == {"a", "b"}          # --limit 2 keeps the first two
    assert all(r["lossless"] for r in rows)
    with open(bench_out / "rows.csv") as fh:
        assert len(list(csv.DictReader(fh))) == len(rows)
    with open(bench_out / "summary.csv") as fh:
        reader = csv.DictReader(fh)
        summary = list(reader)
    assert reader.fieldnames[:11] == ["selector", "estimator", "budget", "mode", "tau", "tokens_per_s",
                                      "speedup_vs_ar", "speedup_p25", "speedup_p75", "waste_share", "select_share"]
    assert {(r["selector"], r["mode"]) for r in summary} == {
        ("ar", ""), ("dflash", ""), ("ddtree", "budget"), ("taps", "cost"), ("oracle", "")}
    ddtree = next(r for r in summary if r["selector"] == "ddtree")
    assert float(ddtree["speedup_p25"]) <= float(ddtree["speedup_p75"])
    assert len(summary) == RUNS_PER_PROMPT and summary[0]["selector"] == "ar"
    assert {(r["selector"], r["budget"]) for r in summary} >= {("ddtree", "4"), ("taps", "8"), ("oracle", "8")}
    md = (bench_out / "summary.md").read_text()
    assert "## Results" in md and "TAPS against DFlash and DDTree" in md and "DDTree@" in md
    assert "tiny-random" in md and "cpu" in md and "UTC" in md
    assert "TAPS reach calibration online" in md


def test_bench_reports_expected_against_accepted_tau_and_the_reliability_of_each_run(bench_out):
    """Every tree run's expected tau (its own prediction, round-weighted) beside its accepted tau,
    and per run label the verified nodes binned by predicted reach: the counts add up to the rows'."""
    rows = _rows(bench_out)
    md = (bench_out / "summary.md").read_text()
    assert "## Calibration: expected against accepted tau" in md and "## Reliability" in md
    for label in ("taps/marginal", "taps/online", "ddtree", "dflash"):
        assert f"| {label} | " in md, label
    assert "| oracle | " not in md.split("## Calibration")[1]
    taps_rows = [r for r in rows if r["selector"] == "taps" and r["estimator"] == "online"]
    counts = np.sum([np.asarray(r["reliability"]) for r in taps_rows], axis=0)
    assert counts[:, 0].sum() == sum(r["verified_nodes"] for r in taps_rows)
    for r in taps_rows:
        assert r["accepted_tau"] >= r["tau"] - 1e-9          # a stop rule only ever cuts the last round
    with open(bench_out / "summary.csv") as fh:
        summary = {(r["selector"], r["estimator"], r["budget"]): r for r in csv.DictReader(fh)}
    entry = summary[("taps", "online", "8")]
    selected = [r for r in taps_rows if r["budget"] == 8]
    rounds = sum(r["rounds"] for r in selected)
    weighted = sum(r["expected_tau"] * r["rounds"] for r in selected) / rounds
    assert float(entry["expected_tau"]) == pytest.approx(weighted)


def test_bench_resume_skips_finished_rows(bench_out, bench_args, tmp_path, capsys):
    out = tmp_path / "results"
    shutil.copytree(bench_out, out)
    first = _rows(out)
    assert bench.main([*bench_args, "--no-plots", "--out", str(out)]) == 0
    assert "22 already in" in capsys.readouterr().err
    assert _rows(out) == first                                       # nothing ran again

    # drop one finished run: only it and its prompt's AR run again, in a new run
    kept = [r for r in first if not (r["prompt_id"] == "b" and r["selector"] == "ddtree" and r["budget"] == 8)]
    (out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    (out / "tau_vs_budget.png").unlink(missing_ok=True)
    assert bench.main([*bench_args, "--no-plots", "--out", str(out)]) == 0
    assert not (out / "tau_vs_budget.png").exists()                   # --no-plots: rows and summaries only
    rows = _rows(out)
    assert len(rows) == len(first)
    old_run = first[0]["run_id"]
    rerun = sorted((r["prompt_id"], r["selector"], r["budget"]) for r in rows if r["run_id"] != old_run)
    assert rerun == [("b", "ar", 1), ("b", "ddtree", 8)]
    assert "Resumed: rows come from 2 runs" in (out / "summary.md").read_text()

    # other decode settings into the same folder are refused
    assert bench.main([*bench_args, "--max-new-tokens", "6", "--out", str(out)]) == 2
    assert "other settings (max_new_tokens 12 there, 6 now)" in capsys.readouterr().err


def test_bench_runs_each_size_choice_as_its_own_run(bench_out, bench_args, tmp_path, capsys):
    """--ddtree-mode budget,cost (and --taps-mode cost,reach) in one sweep: each size choice is a run
    of its own, with its own rows and summary line; adding one to a finished folder runs only it."""
    out = tmp_path / "results"
    shutil.copytree(bench_out, out)
    args = [*bench_args, "--selectors", "ar,ddtree,taps", "--estimators", "marginal",
            "--ddtree-mode", "budget,cost", "--taps-mode", "cost,reach", "--no-plots", "--out", str(out)]
    assert bench.main(args) == 0
    rows, old_run = _rows(out), _rows(bench_out)[0]["run_id"]
    fresh = sorted({(r["selector"], r["mode"]) for r in rows if r["run_id"] != old_run})
    assert fresh == [("ar", ""), ("ddtree", "cost"), ("taps", "reach")]
    assert all(r["lossless"] for r in rows)
    with open(out / "summary.csv") as fh:
        summary = list(csv.DictReader(fh))
    modes = {(r["selector"], r["budget"], r["mode"]) for r in summary}
    assert {("ddtree", "8", "budget"), ("ddtree", "8", "cost"), ("taps", "8", "cost"), ("taps", "8", "reach")} <= modes
    md = (out / "summary.md").read_text()
    assert "DDTree size choice 'budget', 'cost'" in md and "| ddtree | - | 8 | cost |" in md
    ddtree_best = max((r for r in summary if r["selector"] == "ddtree"), key=lambda r: float(r["tokens_per_s"]))
    assert f"DDTree@{ddtree_best['budget']}, {ddtree_best['mode']}" in md


def test_bench_rejects_an_unknown_size_choice(bench_args, tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.main([*bench_args, "--ddtree-mode", "budget,sideways", "--out", str(tmp_path / "r")])
    assert "choose from budget, cost" in capsys.readouterr().err


@needs_humaneval
def test_bench_suites(monkeypatch, tmp_path):
    from taps.eval import prompts as suites

    name, prompts = suites.suite_prompts("humaneval")
    assert name == "humaneval" and len(prompts) == 164 and prompts[0]["id"] == "HumanEval/0"
    monkeypatch.setattr(suites, "EXAMPLES_PATH", tmp_path / "missing.jsonl")
    with pytest.raises(FileNotFoundError, match="examples suite"):
        suites.suite_prompts("examples")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_torchrun_two_processes_match_one(bench_out, bench_args, tmp_path):
    out = tmp_path / "sharded"
    torchrun = Path(sys.executable).parent / "torchrun"
    launcher = [str(torchrun)] if torchrun.exists() else [sys.executable, "-m", "torch.distributed.run"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    if Path("/sys/class/net/lo").exists():
        env["GLOO_SOCKET_IFNAME"] = "lo"                             # keep gloo on loopback
    result = subprocess.run(
        [*launcher, "--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
         "--master_port", str(_free_port()), "-m", "taps.bench", *bench_args, "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = _rows(out)
    assert {r["rank"] for r in rows} == {0, 1}                       # both processes ran a prompt
    assert _deterministic(rows) == _deterministic(_rows(bench_out))
    assert not list(out.glob("rows.rank*.jsonl"))                    # journals merged by rank 0
    assert (out / "summary.csv").exists() and "Processes: 2" in (out / "summary.md").read_text()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (scripts/gpu_check.sh runs it there)")
def test_bench_on_cuda_bfloat16(tiny_pair_dir, prompts_file, tmp_path):
    out = tmp_path / "cuda"
    assert bench.main(["--pair", str(tiny_pair_dir), "--prompts", str(prompts_file), "--limit", "2",
                       "--device", "cuda", "--dtype", "bfloat16", "--selectors", "ar,dflash,ddtree,taps",
                       "--estimators", "online", "--budgets", "8", "--max-new-tokens", "12", "--out", str(out)]) == 0
    md = (out / "summary.md").read_text()
    assert "cuda" in md and "bfloat16" in md and torch.cuda.get_device_name(0) in md
    with open(out / "summary.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 4


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _text_quality():
    return _script("text_quality")


def test_distinct_share_counts_repeated_four_grams():
    tq = _text_quality()
    assert tq.distinct_share("a b c d e".split()) == 1.0
    assert tq.distinct_share("a b c d a b c d".split()) == 4 / 5      # abcd comes back once
    assert tq.distinct_share("a a a a a a".split()) == 1 / 3
    assert tq.distinct_share("a b c".split()) is None                  # no 4-gram at all
    assert tq.word_share("a b c d a b c d") == 4 / 5
    assert tq.word_share("#" * 40) == 0.0                              # one run of symbols: all repeat


def test_text_quality_counts_continuations_without_four_words_as_repeats(tmp_path):
    """A continuation of 128 tokens with fewer than 4 words ('####...') is the most repetitive text
    there is: it counts as 0 in the mean share of words, it does not drop out of it."""
    tq = _text_quality()
    rows = [{"selector": "ar", "prompt_id": "a", "token_ids": [5, 6, 7, 8, 9], "text": "one two three four five"},
            {"selector": "ar", "prompt_id": "b", "token_ids": [3] * 6, "text": "######"},
            {"selector": "dflash", "prompt_id": "a", "token_ids": [5], "text": "x"}]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    q = tq.quality(tmp_path)
    assert q["prompts"] == 2 and q["under_4_words"] == 1
    assert q["words"] == 0.5                                           # (1.0 + 0) / 2, not 1.0
    assert q["tokens"] == (1.0 + 1 / 3) / 2


def test_by_repetition_splits_the_bench_summary_by_prompt(bench_out):
    """Each part is the bench's own summary of that part's rows: with every prompt on one side, that
    side's tau and speed-up are the whole run's, and the other side is left out."""
    tq = _text_quality()
    with open(bench_out / "summary.csv") as fh:
        summary = {(r["selector"], r["estimator"] if r["selector"] == "taps" else "-", r["budget"], r["mode"] or "-"): r
                   for r in csv.DictReader(fh)}
    for threshold, kept in ((0.0, "share >= 0"), (1.01, "share < 1.01 (loops)")):
        table = tq.by_repetition(bench_out, threshold)
        header, _, *body = [line for line in table.splitlines() if line.startswith("|")]
        assert f"{kept}: tau" in header and header.count(": tau") == 2        # "all" and the one part
        assert len(body) == len(summary) - 1                                    # every group but AR
        for line in body:
            cells = [c.strip() for c in line.strip("|").split("|")]
            row = summary[tuple(cells[:4])]
            assert cells[4] == cells[6] == f"{float(row['tau']):.2f}"
            assert cells[5] == cells[7] == f"{float(row['speedup_vs_ar']):.2f}x"


def _summary(folder: Path, rows: list[tuple]) -> Path:
    """A bench summary.csv of (selector, estimator, budget, mode, tau, speed-up) rows."""
    folder.mkdir(parents=True)
    with open(folder / "summary.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["selector", "estimator", "budget", "mode", "tau", "tokens_per_s", "speedup_vs_ar",
                    "speedup_p25", "speedup_p75", "waste_share", "select_share", "lossless", "prompts"])
        for sel, est, budget, mode, tau, speedup in rows:
            w.writerow([sel, est, budget, mode, tau, 100 * speedup, speedup, speedup * 0.9, speedup * 1.1,
                        0, 0, True, 4])
    return folder


def test_compare_pairs_reads_each_runs_own_ratios_and_checks_the_bars(tmp_path):
    """Best speed-ups per method, equal-budget taus and the issue's bars, from two bench summaries."""
    cp = _script("compare_pairs")
    old = _summary(tmp_path / "old", [
        ("ar", "none", 1, "", 1.0, 1.0), ("dflash", "marginal", 16, "", 3.7, 2.1),
        ("ddtree", "marginal", 8, "budget", 3.9, 2.3), ("ddtree", "marginal", 16, "budget", 4.5, 2.5),
        ("taps", "learned", 8, "reach", 4.0, 2.3), ("taps", "learned", 16, "reach", 4.8, 2.6)])
    new = _summary(tmp_path / "new", [
        ("ar", "none", 1, "", 1.0, 1.0), ("dflash", "marginal", 16, "", 2.9, 1.4),
        ("ddtree", "marginal", 8, "budget", 3.5, 1.8), ("ddtree", "marginal", 16, "budget", 3.6, 2.6),
        ("ddtree", "marginal", 16, "cost", 3.4, 2.0),
        ("taps", "learned", 8, "reach", 3.4, 1.7), ("taps", "learned", 16, "reach", 3.9, 2.0)])
    table = cp.compare(cp.read_summary(old), cp.read_summary(new), ("old", "new"))
    assert "| DDTree | 2.50x @16, budget (IQR 2.25-2.75x), tau 4.50 | 2.60x @16, budget" in table
    assert "| TAPS/learned | 2.60x @16, reach" in table and "| 0.77 |" in table
    assert "| 8 | 3.90 / 4.00 | 3.50 / 3.40 |" in table and "| 16 | 4.50 / 4.80 | 3.60 / 3.90 |" in table
    assert "- NOT met: DFlash tau at least 3 (best 2.90)" in table
    assert "- NOT met: TAPS/learned tau above DDTree at every equal budget (1 of 2 budgets)" in table
    assert "- met: DDTree best speed-up at least old's (2.60x against 2.50x)" in table
    assert "- NOT met: TAPS/learned best speed-up at least old's (2.00x against 2.60x)" in table
    with pytest.raises(SystemExit, match="summary.csv is missing"):
        cp.read_summary(tmp_path)


def test_compare_pairs_rule_averages_the_unrounded_ratios_over_runs(tmp_path):
    """--rule: per method, new / old best speed-up in each run and their mean; the verdict needs a
    mean of at least 1.00 for DDTree and every TAPS estimator (DFlash is shown, not judged)."""
    cp = _script("compare_pairs")

    def run(name, dflash, ddtree, marginal, online, learned):
        return cp.read_summary(_summary(tmp_path / name, [
            ("ar", "none", 1, "", 1.0, 1.0), ("dflash", "marginal", 16, "", 3.5, dflash),
            ("ddtree", "marginal", 16, "budget", 4.5, ddtree), ("taps", "marginal", 16, "reach", 4.5, marginal),
            ("taps", "online", 16, "reach", 4.4, online), ("taps", "learned", 16, "cost", 4.8, learned)]))

    old1, old2 = run("o1", 2.0, 2.5, 2.5, 2.5, 2.80), run("o2", 2.0, 2.5, 2.5, 2.5, 2.66)
    new1, new2 = run("n1", 1.0, 2.6, 2.5, 2.6, 2.70), run("n2", 1.0, 2.6, 2.5, 2.6, 2.75)
    table, ok = cp.rule([(old1, new1), (old2, new2)], ("old", "new"))
    mean = (2.70 / 2.80 + 2.75 / 2.66) / 2                  # 0.99929: the rounded ratios would pass
    assert not ok and f"| TAPS/learned best | 2.80x / 2.66x | 2.70x / 2.75x | 0.964 / 1.034 | **{mean:.3f}** |" in table
    assert "| DFlash best | 2.00x / 2.00x | 1.00x / 1.00x | 0.500 / 0.500 | 0.500 (not judged) |" in table
    assert table.endswith("every TAPS estimator): NOT met")
    new2 = run("n2b", 1.0, 2.6, 2.5, 2.6, 2.76)
    assert cp.rule([(old1, new1), (old2, new2)], ("old", "new"))[1]
    with pytest.raises(SystemExit, match="OLD NEW pairs"):
        cp.main([str(tmp_path / "o1"), str(tmp_path / "n1"), str(tmp_path / "o2")])


def test_by_repetition_can_split_by_another_runs_ar_text(bench_out, tmp_path):
    """--split-by: the parts come from another folder's AR text (the old pair's, say), so that two
    runs of the same prompts compare on the same prompts; a folder lacking a prompt is refused."""
    from taps.eval.bench_report import summarise

    tq = _text_quality()
    rows = _rows(bench_out)
    ids = sorted({r["prompt_id"] for r in rows})
    assert len(ids) >= 2
    other = tmp_path / "other"
    other.mkdir()
    with open(other / "rows.jsonl", "w") as fh:                # the first prompt loops there, no other
        for i, pid in enumerate(ids):
            text = "a b c d " * 8 if i == 0 else " ".join(f"w{k}" for k in range(32))
            fh.write(json.dumps({"prompt_id": pid, "selector": "ar", "text": text}) + "\n")
    table = tq.by_repetition(bench_out, 0.5, split_by=other)
    assert f"share >= 0.5: {len(ids) - 1}" in table and "share < 0.5 (loops): 1" in table
    header, _, *body = [line for line in table.splitlines() if line.startswith("|")]
    selectors = list(dict.fromkeys(r["selector"] for r in rows if r["selector"] != "ar"))
    looped = {tq._key(e): e for e in summarise([r for r in rows if r["prompt_id"] == ids[0]], selectors)}
    for line in body:
        cells = [c.strip() for c in line.strip("|").split("|")]
        key = next(k for k in looped if (k[0], k[1] if k[0] == "taps" else "-", str(k[2]), k[3] or "-")
                   == tuple(cells[:4]))
        assert cells[8] == f"{looped[key]['tau']:.2f}" and cells[9] == f"{looped[key]['speedup_vs_ar']:.2f}x"
    with open(other / "rows.jsonl", "w") as fh:                # a prompt missing: refused, by name
        fh.write(json.dumps({"prompt_id": ids[0], "selector": "ar", "text": "x"}) + "\n")
    with pytest.raises(SystemExit, match="no AR row for"):
        tq.by_repetition(bench_out, 0.5, split_by=other)


def test_depth_table_reads_each_pairs_own_runs(tmp_path):
    """scripts/depth_table.py on the committed depth study: each row from its own pair's runs."""
    dt = _script("depth_table")
    text = dt.table(ROOT / "results" / "target-depth", ["old", "d12"])
    old, grown = text.splitlines()[2:]
    assert old.startswith("| old | taps-stdlib-6m (5.77M parameters) |") and "| 4.54 / 2.72x |" in old
    assert grown.startswith("| d12 | taps-code-6m-grown12 (10.49M parameters) |") and "| 3.78 / 2.46x |" in grown
    assert old.endswith("| yes |") and grown.endswith("| yes |")
    with pytest.raises(SystemExit, match="no summary.csv"):
        dt.table(tmp_path, ["old"])


def test_paper_table_marks_ddtree_s_best_and_gives_both_ratios(tmp_path):
    """scripts/paper_table.py: DDTree's best budget marked, TAPS's best cost-sized run, and TAPS over
    DDTree-512 and over DDTree's best, from a summary.csv's own figures."""
    import pandas as pd

    rows = [("ar", "none", 1, "", 1.0, 100.0), ("dflash", "marginal", 16, "", 2.5, 150.0),
            ("ddtree", "marginal", 16, "budget", 3.0, 180.0), ("ddtree", "marginal", 64, "budget", 3.5, 200.0),
            ("ddtree", "marginal", 512, "budget", 4.0, 50.0), ("ddtree", "marginal", 64, "cost", 3.4, 260.0),
            ("taps", "learned", 16, "cost", 3.2, 210.0), ("taps", "learned", 64, "cost", 3.6, 220.0),
            ("taps", "online", 64, "cost", 3.6, 400.0)]
    frame = pd.DataFrame(rows, columns=["selector", "estimator", "budget", "mode", "tau", "tokens_per_s"])
    frame["speedup_vs_ar"], frame["lossless"] = frame.tokens_per_s / 100.0, True
    folder = tmp_path / "suite"
    folder.mkdir()
    frame.to_csv(folder / "summary.csv", index=False)
    (folder / "summary.md").write_text("# Benchmark: humaneval prompts, pair tiny\n")
    text = "\n".join(_script("paper_table").suite_table(folder))
    assert "| DDTree @64 **(best)** | 3.50 | 200.0 | 2.00x |" in text      # the cost-mode DDTree row is not a budget
    assert "DDTree @512 |" in text and "(best)" not in text.split("DDTree @512")[1].split("\n")[0]
    assert "TAPS/learned, cost-sized trees (best: budget 64) | 3.60 | 220.0 | 2.20x |" in text   # online is not it
    assert "TAPS over DDTree-512: **4.40x**" in text and "TAPS over DDTree's best (@64): **1.10x**" in text


def test_calibration_table_gives_each_runs_ratio_its_largest_gap_and_equal_budget_tau(tmp_path):
    """scripts/calibration_table.py: expected / accepted tau per budget from a summary.csv, the
    largest gap marked against the 5% aim for TAPS runs, and TAPS's reach-mode tau over DDTree's."""
    import pandas as pd

    rows = [("ar", "none", 1, "", 1.0, None, None),
            ("ddtree", "marginal", 8, "budget", 3.0, 2.7, 3.1), ("ddtree", "marginal", 16, "budget", 3.5, 3.2, 3.6),
            ("taps", "learned", 8, "reach", 3.3, 3.3, 3.4), ("taps", "learned", 16, "reach", 3.85, 4.2, 3.9),
            ("taps", "learned", 8, "cost", 3.2, 3.25, 3.3)]
    frame = pd.DataFrame(rows, columns=["selector", "estimator", "budget", "mode", "tau", "expected_tau",
                                        "accepted_tau"])
    folder = tmp_path / "suite"
    folder.mkdir()
    frame.to_csv(folder / "summary.csv", index=False)
    (folder / "summary.md").write_text("# Benchmark: humaneval prompts, pair tiny\n")
    (folder / "bench.json").write_text('{"temperature": 0.7, "calibration": "online"}')
    text = "\n".join(_script("calibration_table").table(folder))
    assert "### humaneval, T=0.7, calibration online" in text
    assert "| taps/learned | reach | 3.30 / 3.40 (0.971) | 4.20 / 3.90 (1.077) | 7.7% **over 5%** |" in text
    assert "| taps/learned | cost | 3.25 / 3.30 (0.985) | - | 1.5% within 5% |" in text
    assert "| ddtree | budget | 2.70 / 3.10 (0.871) | 3.20 / 3.60 (0.889) | 12.9% |" in text
    assert "| taps/learned | 1.100x (3.30 vs 3.00) | 1.100x (3.85 vs 3.50) |" in text


def test_edge_table_takes_each_runs_best_of_both_and_checks_the_bar(tmp_path, capsys, monkeypatch):
    """scripts/edge_table.py: per run, TAPS/learned's best tokens/s over DDTree's best (any budget or
    size choice), then the mean and the lowest run per suite against the bar and the floor."""
    import pandas as pd

    folders = []
    for n, (taps_rate, ddtree_rate) in enumerate([(220.0, 200.0), (190.0, 200.0)]):
        rows = [("ar", "none", 1, "", 1.0, 100.0), ("ddtree", "marginal", 16, "budget", 3.0, ddtree_rate),
                ("ddtree", "marginal", 32, "cost", 3.1, ddtree_rate - 5),
                ("taps", "learned", 32, "cost", 3.4, taps_rate), ("taps", "online", 32, "cost", 3.4, 999.0)]
        folder = tmp_path / f"humaneval-run{n + 1}"
        folder.mkdir()
        pd.DataFrame(rows, columns=["selector", "estimator", "budget", "mode", "tau", "tokens_per_s"]).to_csv(
            folder / "summary.csv", index=False)
        (folder / "summary.md").write_text("# Benchmark: humaneval prompts, pair tiny\n")
        folders.append(str(folder))
    monkeypatch.setattr(sys, "argv", ["edge_table.py", *folders])
    _script("edge_table").main()
    text = capsys.readouterr().out
    assert "| humaneval | humaneval-run1 | 0 | @32, cost | 220.0 | 3.40 | @16, budget | 200.0 | 3.00 | 1.100x |" in text
    assert "| humaneval | 0 | 2 | 1.025x | 0.950x | no (bar 1.08x, floor 1.00x) |" in text


def command_flags() -> dict[str, dict[str, object]]:
    """Every command's flags, by option string: taps generate/compare/headroom, taps.bench's sweep and
    its batch mode."""
    import argparse

    from taps.eval.batching import build_parser as batch_parser
    from taps.eval.bench import build_parser
    from taps.eval.cli import build_parser as cli_parser

    commands = next(a for a in cli_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    parsers = {name: commands[name] for name in ("generate", "compare", "headroom")}
    parsers |= {"bench": build_parser(), "bench --batch": batch_parser()}
    return {name: {flag: action for action in parser._actions for flag in action.option_strings if flag != "-h"}
            for name, parser in parsers.items()}


def meaning(action) -> tuple:
    """What a flag does: what it stores, where, by default, from which choices, under which names, and
    what its type makes of sample values."""
    parsed = []
    for sample in ("8", "8,16", "0.5", "x"):
        try:
            parsed.append(action.type(sample) if action.type is not None else sample)
        except Exception:
            parsed.append("refused")
    return (type(action).__name__, action.dest, repr(action.default), tuple(action.choices or ()),
            tuple(map(str, parsed)), tuple(sorted(action.option_strings)))


# flags that share a name and meaning but not a default, each for a reason a user is told in its help
OWN_DEFAULT = {"--out": "an output folder in every command; without one the sweep writes to results/, "
                        "compare writes nothing"}
SEVERAL = ("--taps-mode", "--ddtree-mode")     # the sweep takes several, comma-separated, each a run of its own


def test_a_flag_means_the_same_in_every_command_with_the_same_default():
    """A flag two commands share is one flag: the same dest, default, choices, type and aliases (the
    prompt file, --limit, --suite, --selectors, --budgets, --estimators, every decode setting); the
    sweep's size modes are lists of what the others take one of, with the same default; `--out` is
    the same output folder everywhere, with a default of its own."""
    flags = command_flags()
    shared = {flag for name, mine in flags.items() for flag in mine
              if sum(flag in other for other in flags.values()) > 1}
    for flag in sorted(shared - set(SEVERAL)):
        seen = {name: meaning(mine[flag]) for name, mine in flags.items() if flag in mine}
        if flag in OWN_DEFAULT:
            seen = {name: m[:2] + m[3:] for name, m in seen.items()}          # all but the default
        assert len(set(seen.values())) == 1, (flag, seen)
    for flag in SEVERAL:
        one = flags["generate"][flag]
        assert all(meaning(flags[name][flag]) == meaning(one) for name in ("compare", "headroom", "bench --batch"))
        several = flags["bench"][flag]
        assert several.dest == one.dest and several.default == [one.default]
        assert all(several.type(choice) == [choice] for choice in one.choices)
    for flag in ("--prompt-file", "--limit", "--suite"):          # every command that reads a suite or a file
        assert all(flag in flags[name] for name in ("headroom", "bench", "bench --batch")), flag
    assert flags["bench"]["--limit"].default is None and flags["bench --batch"]["--limit"].default is None
    assert flags["compare"]["--budgets"].default == flags["bench"]["--budgets"].default
    assert flags["bench --batch"]["--selectors"].default is None
    assert not {"--budget", "--selector", "--estimator"} & set(flags["bench"])   # the sweep takes lists of them
    assert set(OWN_DEFAULT) <= shared


def out_parsers() -> dict[str, tuple]:
    """Every command with an --out: its parser (taps compare's own) and a file it writes there."""
    import argparse

    from taps.eval import profile, shape_profile, vllm_check
    from taps.eval.bench import build_parser
    from taps.eval.cli import build_parser as cli_parser

    commands = next(a for a in cli_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    return {"compare": (commands["compare"], "compare.json"), "bench": (build_parser(), "rows.jsonl"),
            "profile": (profile.build_parser(), "profile.json"),
            "shape_profile": (shape_profile.build_parser(), "measurements.json"),
            "vllm_check": (vllm_check.build_parser(), "vllm_check.md")}


def test_out_is_an_output_folder_in_every_command(tmp_path, capsys):
    """`--out` is a folder in every command that writes files (the sweep, taps compare, taps.profile,
    the shape profiles, the vLLM check): "output folder" in its help, which names what it writes
    there; a folder is taken as given (one that exists, even named like a file, and a trailing slash
    too); a path that ends in .json, .md or .csv, or names a file, is refused with one line saying
    --out is a folder and what the command writes in it, before anything is written."""
    kept = tmp_path / "notes.txt"
    kept.write_text("mine")
    made = tmp_path / "old.json"
    made.mkdir()                                              # a folder an old sweep made: still a folder
    for name, (parser, writes) in out_parsers().items():
        action = next(a for a in parser._actions if "--out" in a.option_strings)
        assert action.help.startswith("output folder; writes ") and writes in action.help, (name, action.help)
        assert action.metavar == "DIR" and action.dest == "out"
        for folder in (tmp_path / "new", made, f"{tmp_path / 'rows.json'}/"):
            assert parser.parse_args(["--out", str(folder)]).out == str(folder)
        for given, why in ((tmp_path / "rows.json", "ends in .json"), (tmp_path / "table.md", "ends in .md"),
                           (tmp_path / "rows.csv", "ends in .csv"), (kept, "is a file")):
            with pytest.raises(SystemExit) as exit:
                parser.parse_args(["--out", str(given)])
            assert exit.value.code == 2
            errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
            assert len(errors) == 1 and "--out is a folder: this command writes" in errors[0], (name, errors)
            assert writes in errors[0] and f"{str(given)!r} {why}" in errors[0], (name, errors)
    assert kept.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "old.json"]


def test_one_name_for_a_prompt_file_and_help_lists_every_mode(capsys):
    """`--prompt-file` names a prompt file in every command (the sweep, its batch mode, taps
    generate/compare/headroom); the sweep still takes its old `--prompts`; `--help` names every
    mode: the sweep's names the batch mode, the CLI's its three commands."""
    from taps.eval.batching import build_parser as batch_parser
    from taps.eval.bench import build_parser
    from taps.eval.cli import build_parser as cli_parser

    assert build_parser().parse_args(["--prompt-file", "p.jsonl"]).prompt_file == "p.jsonl"
    assert build_parser().parse_args(["--prompts", "p.jsonl"]).prompt_file == "p.jsonl"
    assert batch_parser().parse_args(["--batch", "1", "--prompt-file", "p.jsonl"]).prompt_file == "p.jsonl"
    assert cli_parser().parse_args(["compare", "--prompt-file", "p.jsonl"]).prompt_file == "p.jsonl"
    help_text = build_parser().format_help()
    assert "--batch 1,2,4,8,16" in help_text and "--prompt-file" in help_text
    cli_help = cli_parser().format_help()
    assert all(name in cli_help for name in ("generate", "compare", "headroom", "python -m taps.bench"))
