"""A batch of requests in the engine (issue 52): B prompts of different lengths decoded together, one
target forward verifying every request's tree, each request's cache committed in its own row. Each
request's tokens equal plain decoding and its own solo run, token for token, for every selector, at
T=0 and at T>0 with its seed, requests finishing at different rounds (their rows padding after)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import batch_profile

from taps import DecodeSession, greedy_continuation, sample_continuation
from taps.batch import BatchSession

PROMPTS = ([5, 17, 33, 2, 60, 8], [40, 41, 42], [7, 7, 7, 9, 11, 3, 70, 2, 5, 61, 12, 13, 90, 4], [88, 3],
           [9])                                  # a one-token prompt: a lone session takes it, so does a batch
RUNS = [("ar", "marginal"), ("dflash", "marginal"), ("dflash2", "marginal"), ("ddtree", "marginal"),
        ("taps", "online"), ("taps", "marginal"), ("oracle", "marginal")]
NEW = 20


def settings(selector: str, estimator: str, temperature: float, budget: int = 8) -> dict:
    return dict(selector=selector, estimator=estimator, budget=budget, temperature=temperature, seed=11,
                max_new_tokens=NEW, stop_at_eos=False)


@pytest.mark.parametrize("batch_draft", [False, True], ids=["own-drafts", "one-drafter-pass"])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("selector,estimator", RUNS)
def test_each_request_of_a_batch_is_its_solo_run(tiny_pair, selector, estimator, temperature, batch_draft):
    """Drafting request by request, each request is its solo run, round for round; with one drafter
    pass for every request's block its tokens are still the target's, token for token (the pass's
    float rounding may propose other tokens than a solo pass, never commit other ones)."""
    if selector == "oracle" and temperature > 0:
        pytest.skip("the oracle is greedy only")
    options = settings(selector, estimator, temperature)
    batch = BatchSession(tiny_pair, [list(p) for p in PROMPTS], batch_draft=batch_draft, **options)
    batch.run()
    for prompt, request in zip(PROMPTS, batch.requests):
        reference = (greedy_continuation(tiny_pair, list(prompt), NEW) if temperature == 0
                     else sample_continuation(tiny_pair, list(prompt), NEW, temperature, 11))
        assert request.generated == reference, (selector, prompt)
        if batch_draft:
            continue
        solo = DecodeSession(tiny_pair, list(prompt), **options)
        solo.run()
        assert [r.committed_tokens for r in request.rounds] == [r.committed_tokens for r in solo.rounds]
        assert [r.verified_nodes for r in request.rounds] == [r.verified_nodes for r in solo.rounds]
    assert len({len(r.rounds) for r in batch.requests}) > 1 or selector == "ar"    # they finish apart


def test_one_drafter_pass_for_several_blocks_is_each_blocks_own_pass(tiny_pair):
    """`FastDrafter.blocks`: sequences of different context lengths, with and without queued target
    features, through one pass: each one's hidden states are its own pass's (to float rounding), and
    each context advances as its own draft would advance it."""
    import torch

    from taps.fast_drafter import DraftContext, fast_drafter

    fast = fast_drafter(tiny_pair)
    width = tiny_pair.feature_layers and len(tiny_pair.feature_layers) * tiny_pair.target.config.hidden_size

    def contexts():
        made = []
        for first, later in ((7, 3), (12, 0), (4, 5)):      # committed, then queued (0: none queued)
            ctx = DraftContext(fast, tiny_pair.mask_token_id)
            ctx.add(torch.randn(first, width, generator=torch.Generator().manual_seed(first)))
            ctx.draft(5, 3, tiny_pair.embed)
            if later:
                ctx.add(torch.randn(later, width, generator=torch.Generator().manual_seed(later)))
            made.append(ctx)
        return made

    roots, depths = [9, 14, 2], [7, 15, 4]
    with torch.inference_mode():                  # as a session drafts
        alone = [ctx.draft(root, depth, tiny_pair.embed) for ctx, root, depth in zip(contexts(), roots, depths)]
        together_contexts = contexts()
        together = DraftContext.draft_many(together_contexts, roots, depths, tiny_pair.embed)
    for a, b in zip(alone, together):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5, rtol=1e-4)
    assert [ctx.length for ctx in together_contexts] == [7 + 3, 12 + 0, 4 + 5] and all(
        ctx.pending is None for ctx in together_contexts)


def test_a_batch_of_one_and_bad_input(tiny_pair):
    batch = BatchSession(tiny_pair, [[5, 17, 33]], **settings("taps", "online", 0.0, 32))
    batch.run()
    assert batch.requests[0].generated == greedy_continuation(tiny_pair, [5, 17, 33], NEW)
    with pytest.raises(RuntimeError, match="every request of this batch has finished"):
        batch.step()
    with pytest.raises(ValueError, match="at least one prompt"):
        BatchSession(tiny_pair, [])
    alone = BatchSession(tiny_pair, [[9], [40]], **settings("ddtree", "marginal", 0.0))    # nothing prefilled at all
    alone.run()
    assert [r.generated for r in alone.requests] == [greedy_continuation(tiny_pair, [t], NEW) for t in (9, 40)]


def test_the_batch_command_prints_throughput_per_batch_and_selector(tiny_pair_dir, tmp_path, capsys):
    from taps.bench import main

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "prompt": "def f():"}\n{"id": "b", "prompt": "import os"}\n'
                       '{"id": "c", "prompt": "x = 1"}\n')
    assert main(["--pair", str(tiny_pair_dir), "--prompt-file", str(prompts), "--selectors", "ddtree,taps",
                 "--batch", "1,3", "--budget", "8", "--max-new-tokens", "8", "--ignore-eos", "--repeats", "1"]) == 0
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in capsys.readouterr().out.splitlines()
            if line.startswith("| ") and not line.startswith("| batch")]
    assert [(r[0], r[1]) for r in rows] == [(b, s) for b in ("1", "3") for s in ("ar", "ddtree", "taps")]
    assert all(r[-1] == "yes" for r in rows)                   # every request's tokens are AR's
    assert all(r[6] == "1.00x" and r[7] == "1.00-1.00x" for r in rows if r[1] == "ar")
    assert all(float(r[5]) > 0 for r in rows) and all(re.fullmatch(r"\d+\.\d\d-\d+\.\d\dx", r[7]) for r in rows)
    assert all(r[3] == "0.0" for r in rows if r[1] == "ar") and all(0 < float(r[3]) <= 8 for r in rows if r[1] != "ar")


def test_the_batch_command_runs_what_the_other_commands_run_by_default(tiny_pair_dir, tmp_path, capsys):
    """Without --selectors the batch mode runs every policy the pair can run, as compare and the
    sweep do, and says why it leaves the batch plans out: a profile with no verify cost at a batch."""
    from taps.bench import main
    from taps.policies import REGISTRY

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "prompt": "def f():"}\n')
    profile = tmp_path / "profile.json"
    from conftest import fixed_profile

    from taps.pair import load_pair

    pair = load_pair(str(tiny_pair_dir), device="cpu")
    fixed_profile(pair).save(profile)
    assert main(["--pair", str(tiny_pair_dir), "--prompt-file", str(prompts), "--batch", "1", "--budget", "4",
                 "--max-new-tokens", "4", "--ignore-eos", "--repeats", "1", "--profile", str(profile)]) == 0
    captured = capsys.readouterr()
    shown = [line.split(" | ")[1] for line in captured.out.splitlines()
             if line.startswith("| ") and not line.startswith("| batch")]
    assert shown == [name for name, entry in REGISTRY.items() if entry.runs_on(pair)]
    assert "taps-batch, chain-batch left out: this profile has no verify cost at a batch" in captured.err


BAD_NUMBERS = [(["bench", "--batch", "0"], "--batch must be sizes of at least 1"),
               (["bench", "--batch", "2", "--repeats", "0"], "--repeats must be a whole number of at least 1"),
               (["headroom", "--depths", "0"], "--depths must be a whole number of at least 1"),
               (["headroom", "--limit", "0"], "--limit must be a whole number of at least 1"),
               (["bench", "--batch", "2", "--limit", "0"], "--limit must be a whole number of at least 1")]


@pytest.mark.parametrize("flags,message", BAD_NUMBERS)
def test_the_suite_commands_refuse_bad_numbers_with_a_message(tiny_pair_dir, capsys, flags, message):
    from taps.bench import main as bench
    from taps.eval.cli import main

    command = (lambda argv: bench(argv[1:])) if flags[0] == "bench" else main
    assert command([*flags, "--pair", str(tiny_pair_dir)]) == 2
    assert message in capsys.readouterr().err


# ---------------------------------------------------------------------------- the batch plans
@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("plan", ["taps-batch", "chain-batch"])
def test_each_request_of_a_planned_batch_is_the_targets_own_text(tiny_pair, plan, temperature):
    profile = batch_profile(tiny_pair)
    options = settings("taps", "online", temperature, budget=16)
    batch = BatchSession(tiny_pair, [list(p) for p in PROMPTS], profile=profile, plan=plan, **options)
    batch.run()
    for prompt, request in zip(PROMPTS, batch.requests):
        reference = (greedy_continuation(tiny_pair, list(prompt), NEW) if temperature == 0
                     else sample_continuation(tiny_pair, list(prompt), NEW, temperature, 11))
        assert request.generated == reference, (plan, prompt)
        for record in request.rounds:
            assert record.verified_nodes <= 16
    # one width per step: every request's tree within it, and the chain's trees are chains
    assert [n for n, _ in batch.widths][0] == len(PROMPTS)
    for request in batch.requests:
        for record, (_, width) in zip(request.rounds, batch.widths):
            assert record.verified_nodes <= width
            if plan == "chain-batch":
                assert [record.pool_depths[i] for i in record.selected] == list(range(len(record.selected)))


def test_a_planned_batch_verifies_less_per_request_when_the_forward_costs_more(tiny_pair):
    """The same prompts with a free forward (verify flat in the width) and one whose rows cost much:
    batch-aware TAPS verifies the whole budget in the first and shrinks its trees in the second."""
    prompts = [list(p) for p in PROMPTS]
    nodes = {}
    for name, plane in (("flat", {"c": 0.0}), ("steep", {"c": 0.002})):
        batch = BatchSession(tiny_pair, prompts, profile=batch_profile(tiny_pair, **plane), plan="taps-batch",
                             **settings("taps", "online", 0.0, budget=16))
        batch.run()
        nodes[name] = [w for _, w in batch.widths]
        for prompt, request in zip(prompts, batch.requests):
            assert request.generated == greedy_continuation(tiny_pair, prompt, NEW)
    assert max(nodes["steep"]) < 16 and sum(nodes["steep"]) < sum(nodes["flat"])
    assert nodes["flat"][0] == 16


def test_a_plan_needs_the_verify_cost_at_a_batch(tiny_pair):
    from conftest import fixed_profile

    with pytest.raises(ValueError, match=r"python -m taps.bench --batch \.\.\. --measure"):
        BatchSession(tiny_pair, [[5, 17, 33]], profile=fixed_profile(tiny_pair), plan="taps-batch")
    with pytest.raises(ValueError, match="unknown batch plan 'tree-batch'"):
        BatchSession(tiny_pair, [[5, 17, 33]], profile=batch_profile(tiny_pair), plan="tree-batch")


def test_a_plan_stops_drafting_when_no_width_pays_and_starts_again_when_the_batch_shrinks(tiny_pair):
    """Rows that cost much and an AR step's host work that costs little: after the first step (which
    drafts: there is nothing to judge by yet) batch-aware TAPS takes plain autoregressive steps at a
    batch of five, with no drafter pass, and probes again only after as many as its running estimate
    says (`probe_wait`: the further from paying, the later); the text stays the target's; alone, a
    request drafts."""
    from taps.batch_cost import host_seconds, plan_rates, probe_wait

    profile = batch_profile(tiny_pair, c=0.01)
    profile.batch_verify["host_s"] = {"ar": 0.0001, "taps/online": 0.0006}
    prompts = [list(p) for p in PROMPTS]
    batch = BatchSession(tiny_pair, prompts, profile=profile, plan="taps-batch", **settings("taps", "online", 0.0, 16))
    batch.step()
    plan = plan_rates([batch._curves[b] for b in range(len(prompts))], host_seconds(profile, batch.batch_verify,
                      "taps/online", 5), host_seconds(profile, batch.batch_verify, "ar", 5), batch.batch_verify, 16)
    wait = probe_wait(plan)
    assert not plan.drafts and 0 < wait < NEW - 2 - max(r.rounds[0].tau for r in batch.requests)
    batch.run()
    assert batch.drafted[0] and not any(batch.drafted[1:1 + wait]) and batch.drafted[1 + wait]   # a probe
    assert all(width == 0 for (_, width), drafted in zip(batch.widths, batch.drafted) if not drafted)
    for prompt, request in zip(prompts, batch.requests):
        assert request.generated == greedy_continuation(tiny_pair, prompt, NEW)
    cheap = batch_profile(tiny_pair, c=0.0)
    cheap.batch_verify["host_s"] = {"ar": 0.0001, "taps/online": 0.0002}
    alone = BatchSession(tiny_pair, prompts[:1], profile=cheap, plan="taps-batch",
                         **settings("taps", "online", 0.0, 16))
    alone.run()
    assert all(alone.drafted) and alone.requests[0].generated == greedy_continuation(tiny_pair, prompts[0], NEW)


def test_a_plan_with_a_saved_reach_curve_judges_its_first_step_by_it(tiny_pair):
    """Batch-aware TAPS starts from the curve saved with the pair's reach calibration: where by that
    curve drafting does not pay (costly rows, reaches of 0.01), its very first step is a plain one,
    as are the steps after (no probe within the decode: far from paying), and the text is the
    target's; where the curve says it pays (free rows, reaches of 0.9), it drafts from the first."""
    from taps.batch_cost import plan_rates, probe_wait
    from taps.calibrate import Calibration

    prompts = [list(p) for p in PROMPTS]
    saved = tiny_pair.calibration
    try:
        for reach, c, drafts in ((0.01, 0.01, False), (0.9, 0.0, True)):
            tiny_pair.calibration = Calibration({}, {}, {"marginal": {0.0: {16: [reach] * 16}}})
            profile = batch_profile(tiny_pair, c=c)
            profile.batch_verify["host_s"] = {"ar": 0.0001, "taps/online": 0.006 if c else 0.0002}
            batch = BatchSession(tiny_pair, prompts, profile=profile, plan="taps-batch",
                                 **settings("taps", "online", 0.0, 16))
            assert batch._curves[0].tolist() == [reach] * 16
            if not drafts:
                plan = plan_rates([batch._curves[b] for b in range(len(prompts))], *batch._hosts(len(prompts)),
                                  batch.batch_verify, 16)
                assert not plan.drafts and probe_wait(plan) > NEW
            batch.step()
            if drafts:                               # a drafted round's own curve replaces the saved one
                own = np.zeros(16)
                top = np.sort(np.asarray(batch.requests[0].rounds[0].pool_reach)[1:])[::-1][:16]
                own[:len(top)] = top
                np.testing.assert_allclose(batch._curves[0], own)
            batch.run()
            assert batch.drafted[0] is drafts and any(batch.drafted) is drafts
            for prompt, request in zip(prompts, batch.requests):
                assert request.generated == greedy_continuation(tiny_pair, prompt, NEW)
    finally:
        tiny_pair.calibration = saved


def test_a_plan_probes_only_while_enough_steps_are_left_to_use_what_it_learns(tiny_pair):
    """By a saved curve that nearly pays, a plan starts plain and probes after `probe_wait` plain
    steps, while at least that many steps are left; a decode that ends sooner is all plain steps."""
    from taps.batch_cost import plan_rates, probe_wait
    from taps.calibrate import Calibration

    prompts = [list(p) for p in PROMPTS[:4]]
    saved = tiny_pair.calibration
    tiny_pair.calibration = Calibration({}, {}, {"marginal": {0.0: {16: [0.05] * 16}}})
    try:
        profile = batch_profile(tiny_pair, c=0.01)
        profile.batch_verify["host_s"] = {"ar": 0.0001, "taps/online": 0.0006}
        probe = BatchSession(tiny_pair, prompts, profile=profile, plan="taps-batch",
                             **settings("taps", "online", 0.0, 16))
        plan = plan_rates([probe._curves[b] for b in range(len(prompts))], *probe._hosts(len(prompts)),
                          probe.batch_verify, 16)
        wait = probe_wait(plan)
        assert not plan.drafts and 0 < wait < NEW // 2
        probe.run()
        assert not any(probe.drafted[:wait]) and probe.drafted[wait]
        short = BatchSession(tiny_pair, prompts, profile=profile, plan="taps-batch",
                             **{**settings("taps", "online", 0.0, 16), "max_new_tokens": wait + 2})
        short.run()
        assert not any(short.drafted) and len(short.drafted) == wait + 2
        for prompt, request in zip(prompts, short.requests):
            assert request.generated == greedy_continuation(tiny_pair, prompt, wait + 2)
    finally:
        tiny_pair.calibration = saved


class Scheduled(BatchSession):
    """A batch plan whose steps draft or not by a fixed schedule (True: draft), whatever the costs:
    drafting that stops and resumes, at chosen steps."""

    def __init__(self, *args, schedule, **kwargs):
        super().__init__(*args, **kwargs)
        self.schedule = list(schedule)

    def _drafts_now(self, active):
        step = len(self.drafted)
        return self.schedule[step] if step < len(self.schedule) else True


SCHEDULE = [True, False, False, True, False, False, False, False, True, True, False, True]


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("plan", ["taps-batch", "chain-batch"])
def test_drafting_that_stops_and_resumes_is_lossless(tiny_pair, plan, temperature):
    """A plan's steps that do not draft queue each request's context features and its drafter
    catches up on all of them in one pass when the batch drafts again: every request's tokens stay
    the target's, at T=0 and T>0, requests of every prompt length (the one-token prompt too),
    finishing apart."""
    options = settings("taps", "online", temperature, budget=16)
    batch = Scheduled(tiny_pair, [list(p) for p in PROMPTS], profile=batch_profile(tiny_pair), plan=plan,
                      schedule=SCHEDULE, **options)
    batch.run()
    assert batch.drafted[:len(SCHEDULE)] == SCHEDULE
    for prompt, request in zip(PROMPTS, batch.requests):
        reference = (greedy_continuation(tiny_pair, list(prompt), NEW) if temperature == 0
                     else sample_continuation(tiny_pair, list(prompt), NEW, temperature, 11))
        assert request.generated == reference, (plan, prompt)
    assert len({len(r.rounds) for r in batch.requests}) > 1


def test_a_step_that_does_not_draft_does_no_drafter_work(tiny_pair, monkeypatch):
    """Counted calls, not time: a plan's plain step runs no drafter pass, no pool, estimate or
    selection and no estimator feedback; each request's drafter context only queues the features of
    the token it committed (its projected length unchanged), and the step that drafts again projects
    everything queued in that one pass."""
    from taps.estimate import Estimator
    from taps.fast_drafter import DraftContext, FastDrafter

    calls = {"drafter pass": 0, "buffers": 0, "pool": 0, "select": 0, "feedback": 0}

    def counted(name, method):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return method(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(FastDrafter, "block", counted("drafter pass", FastDrafter.block))
    monkeypatch.setattr(FastDrafter, "blocks", counted("drafter pass", FastDrafter.blocks))
    monkeypatch.setattr(DraftContext, "_make_room", counted("buffers", DraftContext._make_room))
    monkeypatch.setattr(Estimator, "observe_round", counted("feedback", Estimator.observe_round))
    batch = Scheduled(tiny_pair, [list(p) for p in PROMPTS[:3]], profile=batch_profile(tiny_pair), plan="taps-batch",
                      schedule=[True, False, False, False, True], **settings("taps", "online", 0.0, 16))
    for request in batch.requests:
        monkeypatch.setattr(request.selector, "pool", counted("pool", request.selector.pool))
        monkeypatch.setattr(request.selector, "select", counted("select", request.selector.select))
    batch.step()
    assert calls["drafter pass"] == 1 and calls["pool"] == calls["select"] == 3
    lengths = [r.draft_context.length for r in batch.requests]
    for step in range(3):                                    # three plain steps
        before = dict(calls)
        batch.step()
        assert calls == before, step
        assert [r.draft_context.length for r in batch.requests] == lengths
        assert [r.draft_context.queued for r in batch.requests] == [r.rounds[0].tau + 1 + step
                                                                   for r in batch.requests]
    queued = [r.draft_context.queued for r in batch.requests]
    batch.step()                                             # drafting resumes: one pass catches up
    assert calls["drafter pass"] == 2
    assert [r.draft_context.length for r in batch.requests] == [n + q for n, q in zip(lengths, queued)]
    assert [r.draft_context.queued for r in batch.requests] == [r.rounds[-1].tau for r in batch.requests]


def test_a_plan_scales_its_reach_by_the_draft_tokens_its_trees_had_accepted(tiny_pair):
    """The reach of a tree's best nodes runs high; a plan judges with every reach scaled by the draft
    tokens its verified trees had accepted per token their reach expected (from the decoded rounds
    alone), starting at 1."""
    from taps.batch import REALISED_PRIOR
    from taps.batch_cost import plan_rates

    batch = BatchSession(tiny_pair, [list(p) for p in PROMPTS], profile=batch_profile(tiny_pair), plan="taps-batch",
                         **settings("taps", "online", 0.0, 16))
    assert batch._realised_factor() == 1.0
    batch.run()
    verified = [r for request in batch.requests for r in request.rounds if r.verified_nodes]
    expected = sum(r.expected_tau - 1 for r in verified)
    accepted = sum(len(r.accepted) for r in verified)
    assert verified and batch._realised == pytest.approx([expected, accepted])
    factor = (accepted + REALISED_PRIOR) / (expected + REALISED_PRIOR)
    assert batch._realised_factor() == pytest.approx(factor) and factor != 1.0
    active = [0]
    batch._judged = None
    batch._drafts_now(active)
    plan = plan_rates([factor * batch._curves[0]], *batch._hosts(1), batch.batch_verify, 16)
    assert batch._judged[1] == pytest.approx(plan)
