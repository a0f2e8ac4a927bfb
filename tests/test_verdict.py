"""The lossless verdict (taps.verdict) on real decodes.

A tiny random pair is given a near-tie in its weights: token B's embedding (tied, so also its
lm_head row) is token A's plus a small perturbation, so wherever A is the target's top token, B's
logit lies within bfloat16's rounding of it. Decoded in bfloat16, DDTree's tree forwards and AR's
one-row steps then round differently at some of those places and pick different tokens. The
decodes are searched (a fixed list of prompts, in order; CPU bfloat16 is deterministic, and the
search keeps the test independent of which prompt a machine's kernels flip) for such divergences:
each must be reported as a near-tie at its first differing token, with both margins below the
threshold. A decode whose walk is made to commit a wrong token must be reported as a bug there.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import TEST_DEVICE
from tiny import build_tiny_pair
from transformers import Qwen3ForCausalLM

import taps.session
from taps import DecodeConfig, DecodeSession, load_pair
from taps.eval import bench_report
from taps.eval.cli import main
from taps.eval.runner import Job, aggregate, format_table, run_prompt
from taps.policies import AR, DDTREE
from taps.studio.race import Race, decode_race, race_caption
from taps.studio.speed import summarize_repeats
from taps.verdict import (
    ULPS,
    Verdict,
    combine,
    first_difference,
    lossless_verdict,
    near_tie_threshold,
    rounding_unit,
    strict_verdict,
    verdict_text,
)
from taps.verify import walk as real_walk

A, B = 25, 5              # 'x' (the tiny pair's most frequent greedy token) and the token given A's row
PROMPTS = ["def f(x):", "hello world", "abc", "The cat", "x = 1 +", "for i in", "import os", "print(",
           "while True", "return"]
NEW = 32
BUDGET = 8


# How close B's row is built to A's, tried in order until a bfloat16 decode flips at the built tie:
# where it flips depends on the CPU's bfloat16 kernels (AVX-512 flips at 0.01 on these prompts,
# PyTorch's default kernels at 0.001), not on the engine.
SCALES = (0.01, 0.001, 0.003, 0.0003)


def _tie_dir(root, scale: float):
    folder = build_tiny_pair(root / f"tiny-{scale}")
    model = Qwen3ForCausalLM.from_pretrained(folder / "target")
    gen = torch.Generator().manual_seed(B)
    with torch.no_grad():
        rows = model.get_input_embeddings().weight               # tied: the lm_head's rows too
        rows[B] = rows[A] + scale * rows[A].abs().mean() * torch.randn(rows.shape[1], generator=gen)
    assert model.get_output_embeddings().weight.data_ptr() == rows.data_ptr()
    model.save_pretrained(folder / "target")
    return folder


@pytest.fixture(scope="module")
def tied(tmp_path_factory):
    """(pair, decodes, folder): the first scale of SCALES at which some prompt's bfloat16 DDTree decode
    leaves AR's tokens at the built tie (tokens A and B)."""
    root = tmp_path_factory.mktemp("tie")
    for scale in SCALES:
        folder = _tie_dir(root, scale)
        pair = load_pair(folder, device=TEST_DEVICE, dtype="bfloat16")
        runs = [(p, _decode(pair, p, DDTREE.name), _decode(pair, p, AR.name)) for p in PROMPTS]
        if any({run.generated[i], ar.generated[i]} == {A, B} for _, run, ar in runs
               if (i := first_difference(run.generated, ar.generated)) is not None and i < len(ar.generated)):
            return pair, runs, folder
    pytest.skip(f"no bfloat16 decode flipped at the built tie on this CPU at any scale of {SCALES}")


@pytest.fixture(scope="module")
def tie_pair(tied):
    return tied[0]


@pytest.fixture(scope="module")
def tie_pair_dir(tied):
    return tied[2]


def _config(selector: str, temperature: float = 0.0) -> DecodeConfig:
    return DecodeConfig(max_new_tokens=NEW, temperature=temperature, seed=3).with_run(selector, budget=BUDGET)


def _decode(pair, prompt: str, selector: str, temperature: float = 0.0) -> DecodeSession:
    session = DecodeSession(pair, prompt, _config(selector, temperature))
    session.run()
    return session


@pytest.fixture(scope="module")
def decodes(tied):
    """(prompt, DDTree session, AR session) for every prompt, bfloat16, greedy."""
    return tied[1]


def _verdict(pair, run: DecodeSession, ar: DecodeSession) -> Verdict:
    cfg = run.config
    return lossless_verdict(pair, run.prompt_ids, run.generated, ar.generated, cfg.temperature, cfg.seed,
                            run_rounds=run.rounds, ar_rounds=ar.rounds)


def _check_near_tie(verdict: Verdict, run: DecodeSession, ar: DecodeSession) -> None:
    position = next(i for i, (a, b) in enumerate(zip(run.generated, ar.generated)) if a != b)
    assert not verdict.same and verdict.kind == "near-tie", verdict.detail
    assert verdict.position == position
    assert (verdict.run_token, verdict.ar_token) == (run.generated[position], ar.generated[position])
    # each run's own forward (replayed exactly) favours, or ties to, its own token, by less than rounding
    assert 0 <= verdict.margin_run < verdict.threshold and 0 <= verdict.margin_ar < verdict.threshold
    assert verdict.text == f"near-tie at token {position + 1} (margin {verdict.margin:.2g} < {verdict.threshold:.2g})"
    assert "near-tie (bfloat16 rounding)" in verdict.detail and "--dtype float32" in verdict.detail


def test_a_bfloat16_divergence_at_the_built_near_tie_is_reported_as_rounding(tie_pair, decodes):
    diverged = [(p, run, ar) for p, run, ar in decodes if run.generated != ar.generated]
    assert diverged, "no bfloat16 decode left AR's tokens: the built near-tie did not flip anywhere"
    built = []
    for _prompt, run, ar in diverged:
        verdict = _verdict(tie_pair, run, ar)
        _check_near_tie(verdict, run, ar)            # every divergence of this lossless engine is a near-tie
        if {verdict.run_token, verdict.ar_token} == {A, B}:
            built.append(verdict)
    assert built, "no divergence at the built near-tie (tokens A and B)"
    # bfloat16 resolution at the logits there, through 4 layers: a few hundredths of a logit
    assert all(v.threshold < 0.5 and v.margin < v.threshold for v in built)


def test_the_same_divergence_at_t_above_zero_is_a_near_tie_too(tie_pair):
    """Sampling: the Gumbel noise is the same in both runs, so a flip is again a near-tie."""
    for prompt in PROMPTS:
        run, ar = _decode(tie_pair, prompt, DDTREE.name, 0.8), _decode(tie_pair, prompt, AR.name, 0.8)
        if run.generated != ar.generated:
            _check_near_tie(_verdict(tie_pair, run, ar), run, ar)
            return
    pytest.skip("no sampled decode diverged on this machine")


def test_a_committed_wrong_token_is_reported_as_a_bug(tie_pair, decodes, monkeypatch):
    """The walk of the third round is made to commit the target's least likely token as its bonus."""
    prompt, _, ar = next((p, run, ar) for p, run, ar in decodes if run.generated == ar.generated)
    calls = []

    def wrong_walk(tree, head, temperature, seed, start):
        result = real_walk(tree, head, temperature, seed, start)
        calls.append(start)
        if len(calls) == 3:
            node = result.accepted[-1] if result.accepted else 0
            result.bonus_token = int(head.get([node])[0].argmin())
        return result

    monkeypatch.setattr(taps.session, "walk", wrong_walk)
    run = _decode(tie_pair, prompt, DDTREE.name)
    monkeypatch.undo()
    third = run.rounds[2]
    position = sum(r.tau for r in run.rounds[:2]) + len(third.accepted)
    assert run.generated[:position] == ar.generated[:position] and run.generated[position] != ar.generated[position]
    verdict = _verdict(tie_pair, run, ar)
    assert verdict.kind == "bug" and verdict.position == position
    assert verdict.margin_run < 0 and verdict.margin > 10 * verdict.threshold     # its own target did not pick it
    assert verdict.text == f"NO: bug at token {position + 1} (margin {verdict.margin:.2g})"
    assert "A bug" in verdict.detail


def test_the_bench_rows_and_tables_carry_the_verdict(tie_pair, decodes):
    prompt = next(p for p, run, ar in decodes if run.generated != ar.generated)
    rows = run_prompt(tie_pair, {"id": "p", "prompt": prompt}, [Job(DDTREE.name, "marginal", BUDGET)],
                      _config(DDTREE.name))
    ar_row, row = rows
    assert ar_row.verdict == "yes" and ar_row.verdict_kind == "identical" and ar_row.lossless
    assert not row.lossless and row.verdict_kind == "near-tie" and row.verdict.startswith("near-tie at token ")
    dicts = [r.as_dict() for r in rows]
    summary = aggregate(dicts)
    assert {s["selector"]: s["verdict"] for s in summary} == {AR.name: "yes", DDTREE.name: row.verdict}
    assert row.verdict in format_table(summary)
    table = bench_report.summary_markdown(bench_report.summarise(dicts, [DDTREE.name]), _meta(tie_pair))
    assert f"| {row.verdict} | 1 |" in table and "| yes | 1 |" in table


def test_strict_rerun_in_float32(tie_pair, decodes):
    """The strict check reruns AR and the run on a float32 copy: the near-tie is gone there."""
    prompt = next(p for p, run, ar in decodes if run.generated != ar.generated)
    strict = strict_verdict(tie_pair, prompt, _config(DDTREE.name))
    assert strict.dtype == "float32" and strict.kind in ("identical", "near-tie")
    assert tie_pair.dtype == torch.bfloat16 and tie_pair.target.dtype == torch.bfloat16   # the pair is untouched
    rows = run_prompt(tie_pair, {"id": "p", "prompt": prompt}, [Job(DDTREE.name, "marginal", BUDGET)],
                      _config(DDTREE.name), strict=True)
    assert rows[1].verdict_kind == "near-tie" and "; float32: " in rows[1].verdict
    assert ("; float32: identical" in rows[1].verdict) == strict.same


# ------------------------------------------------------------------------------- without a decode
def test_identical_runs_and_a_length_difference(tiny_pair):
    ids = tiny_pair.encode_prompt("def f(x):")
    same = lossless_verdict(tiny_pair, ids, [5, 6, 7], [5, 6, 7])
    assert same.same and same.kind == "identical" and same.text == "yes" and same.position is None
    short = lossless_verdict(tiny_pair, ids, [5, 6], [5, 6, 7])
    assert short.kind == "bug" and short.position == 2 and short.text == "NO: bug at token 3 (the lengths differ)"
    assert first_difference([1, 2, 3], [1, 9, 3]) == 1 and first_difference([1], [1]) is None


def test_without_round_records_the_margins_are_recomputed(tie_pair, decodes):
    """No rounds: AR's one-row steps and one multi-row forward for the run's side."""
    prompt, run, ar = next((p, run, ar) for p, run, ar in decodes if run.generated != ar.generated)
    verdict = lossless_verdict(tie_pair, run.prompt_ids, run.generated, ar.generated)
    exact = _verdict(tie_pair, run, ar)
    assert verdict.kind == "near-tie" and verdict.position == exact.position
    assert verdict.margin_ar == exact.margin_ar        # AR's steps are one row each either way


def test_the_threshold_is_eps_through_the_layers():
    eps16, eps32 = torch.finfo(torch.bfloat16).eps, torch.finfo(torch.float32).eps
    assert eps16 == 2 ** -7
    unit = rounding_unit(torch.bfloat16, layers=4, hidden=32)
    assert unit == pytest.approx(2 * (eps16 + math.sqrt(32) * eps32))
    assert near_tie_threshold(torch.bfloat16, -16.0, 4, 32) == pytest.approx(ULPS * unit * 16)
    assert near_tie_threshold(torch.bfloat16, 0.25, 4, 32) == pytest.approx(ULPS * unit)      # |logit| at least 1
    assert near_tie_threshold(torch.float32, 16.0, 36, 2560) < 1e-2 * near_tie_threshold(torch.bfloat16, 16.0, 36, 2560)


def test_a_group_of_runs_shows_its_worst_verdict():
    tie = {"lossless": False, "verdict_kind": "near-tie", "verdict": verdict_text("near-tie", 36, 0.031, 0.062)}
    bug = {"lossless": False, "verdict_kind": "bug", "verdict": verdict_text("bug", 11, 4.1, 0.06)}
    same = {"lossless": True, "verdict_kind": "identical", "verdict": "yes"}
    assert tie["verdict"] == "near-tie at token 37 (margin 0.031 < 0.062)"
    assert bug["verdict"] == "NO: bug at token 12 (margin 4.1)"
    assert combine([same, same]) == "yes" and combine([]) == "yes"
    assert combine([tie]) == tie["verdict"]
    assert combine([same, tie, bug]) == f"{bug['verdict']}; 2 of 3 runs differ"
    assert combine([{"lossless": False}, same]) == "NO; 1 of 2 runs differ"       # rows from before verdicts
    assert combine([{"lossless": True}]) == "yes"


def _meta(pair) -> dict:
    machine = {"cpu": "test", "cores": 2, "threads": 1, "os": "linux", "python": "3", "torch": torch.__version__,
               "device": "cpu", "dtype": "bfloat16"}
    info = pair.describe()
    return {"machine": machine, "pair": info, "suite": "test", "date": "today", "command": "pytest", "prompts": 1,
            "suite_size": 1, "limit": None, "skipped": [], "max_new_tokens": NEW, "temperature": 0.0, "seed": 3,
            "taps_mode": "cost", "ddtree_mode": "budget", "profile_source": "", "world_size": 1, "run_ids": ["r"]}




def test_the_race_shows_the_verdict(tie_pair, decodes):
    """The race's finish table and caption show each lane's verdict, a near-tie said apart from a bug."""
    prompt = next(p for p, run, ar in decodes if run.generated != ar.generated)
    config = DecodeConfig(max_new_tokens=NEW, budget=BUDGET, taps_mode="reach")
    decoded = decode_race(tie_pair, prompt, config, warm=False)
    race = Race(decoded, "modelled", [[0.001] * len(lane.rounds) for lane in decoded.lanes])
    rows = race.results()
    by_lane = {lane.name: lane for lane in decoded.lanes}
    assert all(r["same text as AR"] == by_lane[r["method"]].verdict for r in rows)
    ddtree = by_lane[DDTREE.label]
    assert ddtree.verdict.startswith("near-tie at token ") and not ddtree.lossless
    caption = race_caption(rows)
    assert f"left AR's text at a near-tie ({ddtree.verdict}" in caption and "not a bug" in caption
    assert "Not lossless here" not in caption or "NO: bug" in caption
    bug = [dict(r, **{"same text as AR": "NO: bug at token 12 (margin 4.1)"}) if r["method"] == DDTREE.label else r
           for r in rows]
    assert f"Not lossless here: {DDTREE.label} wrote other text than AR (NO: bug at token 12 (margin 4.1))" \
        in race_caption(bug)


def test_repeated_races_show_the_verdict():
    rows = [{"label": DDTREE.name, "selector": DDTREE.name, "estimator": "marginal", "budget": 8, "tau": 2.0,
             "rounds": 4, "new_tokens": 8, "verified_nodes": 32, "waste_share": 0.0, "lossless": False,
             "verdict": "near-tie at token 5 (margin 0.016 < 0.2)", "verdict_kind": "near-tie",
             "tokens_per_s": 10.0, "speedup_vs_ar": 1.2}]
    summary = summarize_repeats([rows, rows])
    assert summary[0]["verdict"] == "near-tie at token 5 (margin 0.016 < 0.2); 2 of 2 runs differ"


def test_generate_prints_the_verdict_when_asked(tie_pair_dir, decodes, capsys):
    prompt, run, ar = next((p, run, ar) for p, run, ar in decodes if run.generated != ar.generated)
    args = ["generate", "--pair", str(tie_pair_dir), "--device", TEST_DEVICE, "--dtype", "bfloat16", "--prompt",
            prompt, "--selector", DDTREE.name, "--budget", str(BUDGET), "--max-new-tokens", str(NEW)]
    assert main(args) == 0 and "same as AR" not in capsys.readouterr().out
    assert main(args + ["--check"]) == 0
    out = capsys.readouterr().out
    position = next(i for i, (a, b) in enumerate(zip(run.generated, ar.generated)) if a != b)
    assert f"# same as AR: near-tie at token {position + 1} (margin " in out and "--dtype float32" in out
    assert main(args + ["--strict"]) == 0
    out = capsys.readouterr().out
    assert f"# same as AR: near-tie at token {position + 1} (margin " in out and "; float32: " in out
