"""The side-by-side race (taps.studio.race): lanes decoded once and replayed on a clock, the finish
table's decomposition, captions written from the data, the race link; the sweep's caption."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from conftest import batch_profile, fixed_profile

pytest.importorskip("plotly", reason="the app's packages are not installed (a bare GPU server)")

from taps.config import DecodeConfig  # noqa: E402
from taps.eval.metrics import modelled_round_s, modelled_speedup  # noqa: E402
from taps.policies import AR, DDTREE, DFLASH, DFLASH2, ORACLE, TAPS  # noqa: E402
from taps.studio.figures.charts import lane_tree_figure  # noqa: E402
from taps.studio.link import RaceLink, example_of, parse_race_link, race_link_params  # noqa: E402
from taps.studio.race import (  # noqa: E402
    Decoded,
    batch_companions,
    batch_sweep,
    batch_sweep_caption,
    batch_sweep_series,
    curve_shape,
    decode_batch_race,
    decode_race,
    on_clock,
    race_caption,
    race_jobs,
    sweep_caption,
)
from taps.studio.speed import Spread  # noqa: E402

PROMPT = "def add(a, b):\n    return"
NEW = 24


@pytest.fixture(scope="module")
def decoded(tiny_pair) -> Decoded:
    config = DecodeConfig(budget=8, max_new_tokens=NEW, estimator="online", stop_at_eos=False)
    return decode_race(tiny_pair, PROMPT, config, profile=fixed_profile(tiny_pair), oracle=True, warm=False)


def test_every_lane_is_lossless_and_a_second_race_gives_the_same_result(tiny_pair, decoded):
    labels = [lane.label for lane in decoded.lanes]
    assert labels == [AR.run_label(), DFLASH.run_label(), DDTREE.run_label(), TAPS.run_label("online"),
                      ORACLE.run_label()]
    ar = decoded.lanes[0]
    for lane in decoded.lanes:
        assert lane.lossless and lane.texts[-1] == ar.texts[-1] and lane.tokens == ar.tokens == NEW
        assert len(lane.texts) == len(lane.rounds)
    again = decode_race(tiny_pair, PROMPT, decoded.config, profile=fixed_profile(tiny_pair), oracle=True, warm=False)
    profile = fixed_profile(tiny_pair)
    assert on_clock(again, "modelled", profile).results() == on_clock(decoded, "modelled", profile).results()
    assert [[r.committed_tokens for r in lane.rounds] for lane in again.lanes] == \
        [[r.committed_tokens for r in lane.rounds] for lane in decoded.lanes]


COMPANIONS = ["import os\n", "class Point:\n    def __init__(self", "x = [1, 2, 3]\nfor"]


def test_a_race_at_a_batch_shows_its_first_request_on_the_batched_steps_clock(tiny_pair, decoded):
    """Requests in a batch: every lane decodes the race's prompt with three others in one forward per
    round (`taps.batch`); its text is the solo race's, token for token, and each of its rounds lasts
    the whole batched step it was part of (every request's round cost and the forward of the batch)."""
    from taps.batch_cost import of_profile, step_seconds

    profile = batch_profile(tiny_pair)
    batched = decode_batch_race(tiny_pair, PROMPT, decoded.config, COMPANIONS, profile=profile, warm=False)
    assert batched.batch == 4 and batched.companions == COMPANIONS
    assert [lane.label for lane in batched.lanes] == [AR.run_label(), DFLASH.run_label(), DDTREE.run_label(),
                                                      TAPS.run_label("online"), "taps/online+taps-batch"]
    assert batched.lanes[-1].name == "TAPS (batch-aware)"
    solo_text = decoded.lanes[0].texts[-1]
    for lane in batched.lanes:
        assert lane.lossless and lane.verdict == "yes" and lane.texts[-1] == solo_text and lane.tokens == NEW
        assert len(lane.steps) == len(lane.step_s) == len(lane.rounds) == len(lane.texts)
        assert lane.steps[0][0] == 4 and all(1 <= n <= 4 for n, _, _ in lane.steps)
        assert [w for _, w, _ in lane.steps] >= [r.verified_nodes for r in lane.rounds]  # the widest tree's width
    race = on_clock(batched, "modelled", profile)
    grid = of_profile(profile)
    for lane, durations in zip(race.lanes, race.durations):
        assert durations == [step_seconds(profile, grid, lane.run, *step) for step in lane.steps]
    assert on_clock(batched, "measured", profile).durations == [lane.step_s for lane in batched.lanes]
    # at four requests each round costs more than alone: the same rounds' clock is slower
    solo = on_clock(decoded, "modelled", fixed_profile(tiny_pair))
    assert race.durations[0][0] > solo.durations[0][0]
    rows = race.results()
    assert [r["method"] for r in rows][-1] == "TAPS (batch-aware)" and "Every lane wrote the same text" in \
        race_caption(rows)


def test_a_race_at_a_batch_needs_its_verify_cost_and_takes_its_others_from_the_examples(tiny_pair, decoded):
    with pytest.raises(ValueError, match="verify cost at a batch, and the fixed latency profile .* has none"):
        decode_batch_race(tiny_pair, PROMPT, decoded.config, COMPANIONS, profile=fixed_profile(tiny_pair), warm=False)
    examples = [{"id": c, "prompt": c} for c in ["a", PROMPT, "b", "c"]]
    assert batch_companions(PROMPT, examples, 1) == []
    assert batch_companions(PROMPT, examples, 4) == ["a", "b", "c"]
    with pytest.raises(ValueError, match="choose 1 to 4 requests, not 8"):
        batch_companions(PROMPT, examples, 8)


def test_the_batch_sweep_races_each_batch_size_with_both_plans(tiny_pair, decoded):
    profile = batch_profile(tiny_pair)
    examples = [{"id": c, "prompt": c} for c in [PROMPT, *COMPANIONS]]
    seen = []
    rows = batch_sweep(tiny_pair, PROMPT, decoded.config, examples, [1, 2], profile=profile,
                       on_result=lambda done, total, what: seen.append((done, total, what)))
    methods = ["AR", "DFlash", "DDTree", "TAPS", "TAPS (batch-aware)", "confidence chain"]
    assert [(r["requests in a batch"], r["method"]) for r in rows] == [(b, m) for b in (1, 2) for m in methods]
    assert all(r["same text as AR"] == "yes" for r in rows)
    assert all(0.0 <= r["steps that drafted"] <= 1.0 for r in rows)
    assert all(r["steps that drafted"] == (0.0 if r["method"] == "AR" else 1.0) for r in rows
               if r["method"] not in ("TAPS (batch-aware)", "confidence chain"))
    assert seen[-1][1] == 12 and seen[-1][2].startswith("2 requests · ") and seen[0][2].startswith("1 request · ")
    series, colours, dashed = batch_sweep_series(rows)
    assert list(series) == methods[1:] and series["TAPS"] == [(1, rows[3]["speed-up (modelled)"]),
                                                               (2, rows[9]["speed-up (modelled)"])]
    assert colours["confidence chain"] == DFLASH.run_label() and colours["TAPS (batch-aware)"] == "taps/online"
    assert dashed == ("TAPS (batch-aware)", "confidence chain")
    with pytest.raises(ValueError, match="choose 1 to 4 requests, not 8"):       # checked before anything decodes
        batch_sweep(tiny_pair, PROMPT, decoded.config, examples, [1, 8], profile=profile)


def test_the_batch_sweeps_caption_reads_its_numbers():
    def rows(batch, **speeds):
        names = {"ar": "AR", "dflash": "DFlash", "ddtree": "DDTree", "taps": "TAPS", "plan": "TAPS (batch-aware)",
                 "chain": "confidence chain"}
        runs = {"ar": "ar", "dflash": "dflash", "ddtree": "ddtree", "taps": "taps/online",
                "plan": "taps/online+taps-batch", "chain": "taps/online+chain-batch"}
        return [{"requests in a batch": batch, "method": names[k], "run": runs[k], "speed-up (modelled)": v}
                for k, v in {"ar": 1.0, **speeds}.items()]

    table = (rows(1, dflash=2.0, ddtree=2.7, taps=2.5, plan=2.6, chain=1.9)
             + rows(8, dflash=0.7, ddtree=0.9, taps=0.8, plan=0.99, chain=0.95))
    caption = batch_sweep_caption(table)
    assert caption.startswith("Modelled, the fastest at each batch size: 1: DDTree (2.70×); 8: TAPS (batch-aware) "
                              "(0.99×).")
    assert "Below the best chain (by more than a tie): DDTree at 8; TAPS at 8." in caption
    assert caption.endswith("Nothing speculative beats AR at 8 requests.")
    assert "TAPS (batch-aware) stays at or above AR at every batch size (within a tie)" in caption    # 0.99x at 8
    even = rows(1, dflash=2.0, ddtree=2.7, taps=2.5, plan=2.6, chain=1.9)
    assert "No tree selector falls below the best chain" in batch_sweep_caption(even)
    assert "Nothing speculative" not in batch_sweep_caption(even)
    under = rows(1, dflash=2.0, ddtree=2.7, taps=2.5, plan=2.6, chain=1.9) + rows(16, plan=0.9, chain=0.8)
    assert "TAPS (batch-aware) falls below AR at 16." in batch_sweep_caption(under)


def test_paused_at_any_time_each_lane_holds_what_its_modelled_round_times_allow(tiny_pair, decoded):
    profile = fixed_profile(tiny_pair)
    race = on_clock(decoded, "modelled", profile)
    for lane, durations in zip(race.lanes, race.durations):     # each round lasts the profile's round time
        label = lane.label
        assert durations == [float(profile.round_time(label, r.verified_nodes)) for r in lane.rounds]
        if lane.selector == AR.name:
            assert set(durations) == {profile.ar_step_s}
    moments = [0.0, race.end / 3, race.end / 2, 0.77 * race.end, race.end] + [ends[2] for ends in race.ends]
    for t in moments:
        for lane, state in zip(race.lanes, race.lanes_at(t)):
            elapsed, tokens, done = 0.0, 0, 0
            for record in lane.rounds:                           # counted independently of Race.lanes_at
                elapsed += modelled_round_s(record, profile)
                if elapsed > t + 1e-12:
                    break
                tokens, done = tokens + record.tau, done + 1
            assert (state.tokens, state.rounds_done) == (tokens, done), (lane.label, t)
            assert state.text == (lane.texts[done - 1] if done else "")
            assert state.verified == sum(r.verified_nodes for r in lane.rounds[:done])
            assert state.waste == sum(r.waste_nodes for r in lane.rounds[:done])
            assert state.last is (lane.rounds[done - 1] if done else None)
            assert state.finished == (done == len(lane.rounds))
    assert [s.tokens for s in race.lanes_at(race.end)] == [NEW] * len(race.lanes)
    middle = race.lanes_at(race.end / 2)
    assert any(0 < s.tokens < NEW for s in middle)               # midway, someone is still running
    t = race.next_event(race.end / 2)
    assert t > race.end / 2 and any(t in ends for ends in race.ends)


def test_the_finish_table_decomposes_the_speed_up_and_equals_the_modelled_one(tiny_pair, decoded):
    profile = fixed_profile(tiny_pair)
    race = on_clock(decoded, "modelled", profile)
    rows = race.results()
    for lane, row in zip(race.lanes, rows):
        modelled = modelled_speedup(lane.rounds, profile)
        assert row["speed-up"] == round(modelled["speedup"], 2)
        assert row["τ"] == round(modelled["tau"], 2)
        assert row["t_round (ms)"] == round(1000 * modelled["round_s"], 3)
        assert row["t_AR (ms)"] == round(1000 * profile.ar_step_s, 3)
        # the same tokens: the speed-up is AR's finish time over the lane's
        assert modelled["speedup"] == pytest.approx(race.finish(0) / race.finish(race.lanes.index(lane)))
    measured = on_clock(decoded, "measured")
    assert measured.durations[1] == [r.time_s for r in decoded.lanes[1].rounds]
    with pytest.raises(ValueError, match="modelled clock prices rounds with a latency profile"):
        on_clock(decoded, "modelled", None)
    with pytest.raises(ValueError, match="unknown clock 'wall'"):
        on_clock(decoded, "wall", profile)


NUMBER = re.compile(r"(\d+\.\d+)×")


def test_the_caption_states_the_tables_numbers(tiny_pair, decoded):
    rows = on_clock(decoded, "modelled", fixed_profile(tiny_pair)).results()
    caption = race_caption(rows)
    by_method = {r["method"]: r for r in rows}
    for name, value in re.findall(r"(AR|DFlash|DDTree|TAPS) (?:at |is fastest on the modelled clock at )?(\d+\.\d+)×",
                                  caption):
        assert float(value) == by_method[name]["speed-up"], caption
    assert f"{by_method['Oracle']['speed-up']:.2f}×" in caption
    nodes = re.search(r"\(([\d.]+) against ([\d.]+)\)", caption)
    assert nodes and float(nodes[1]) == by_method["TAPS"]["verified / round"] \
        and float(nodes[2]) == by_method["DDTree"]["verified / round"]
    assert "Every lane wrote the same text as AR" in caption


def rows_of(*lanes) -> list[dict]:
    """Finish-table rows: (method, run, speed-up, τ, verified per round)."""
    return [{"method": m, "run": run, "budget": 64, "speed-up": s, "τ": tau, "verified / round": nodes,
             "same text as AR": True} for m, run, s, tau, nodes in lanes]


def test_captions_say_tie_within_noise_and_name_only_what_the_numbers_show():
    ar = ("AR", "ar", 1.0, 1.0, 0.0)
    tie = rows_of(ar, ("DFlash", "dflash", 0.9, 1.5, 15.0), ("DDTree", "ddtree", 1.20, 3.0, 64.0),
                  ("TAPS", "taps/online", 1.19, 3.0, 44.0))
    caption = race_caption(tie)
    assert caption.startswith("Here DDTree and TAPS tie on the modelled clock (DDTree 1.20×, TAPS 1.19×")
    assert "at budget 64 TAPS verifies 31% fewer nodes per round than DDTree (44.0 against 64.0) for the same τ " \
           "(3.00)" in caption
    assert "tie" in race_caption(tie, "measured") and "noise" in race_caption(tie, "measured")
    clear = rows_of(ar, ("DDTree", "ddtree", 1.20, 3.0, 64.0), ("TAPS", "taps/online", 1.40, 2.5, 66.0))
    caption = race_caption(clear)
    assert "TAPS is fastest on the modelled clock at 1.40× AR, ahead of DDTree at 1.20×" in caption
    assert "about as many nodes per round as DDTree (66.0 against 64.0) for τ 2.50 against 3.00" in caption
    assert "tie" not in caption
    more = rows_of(ar, ("DDTree", "ddtree", 1.0, 2.0, 10.0), ("TAPS", "taps/online", 1.3, 2.0, 20.0))
    assert "100% more nodes per round" in race_caption(more)
    lost = [dict(r) for r in clear]
    lost[2]["same text as AR"] = False
    assert "Not lossless here: TAPS" in race_caption(lost)


def test_race_jobs_leave_the_oracle_out_at_temperature_above_zero():
    config = DecodeConfig(budget=16, estimator="learned")
    assert [j.selector for j in race_jobs(config)] == [DFLASH.name, DDTREE.name, TAPS.name]
    assert [j.selector for j in race_jobs(config, oracle=True)][-1] == ORACLE.name
    assert ORACLE.name not in [j.selector for j in race_jobs(replace(config, temperature=0.7), oracle=True)]
    assert race_jobs(config)[2].estimator == "learned" and race_jobs(config)[1].budget == 16
    assert [j.selector for j in race_jobs(config, oracle=True, dflash2=True)] == [
        DFLASH.name, DFLASH2.name, DDTREE.name, TAPS.name, ORACLE.name]


def test_a_dflash2_lane_races_lossless_on_the_shipped_pair(shipped_pair):
    """The race's DFlash2 lane (the shipped pair has a path selector): after DFlash, lossless, and
    on the modelled clock like the others."""
    config = DecodeConfig(budget=16, max_new_tokens=24)
    profile = fixed_profile(shipped_pair)
    decoded = decode_race(shipped_pair, PROMPT, config, profile=profile, warm=False, dflash2=True)
    assert [lane.selector for lane in decoded.lanes] == [AR.name, DFLASH.name, DFLASH2.name, DDTREE.name, TAPS.name]
    assert all(lane.lossless for lane in decoded.lanes), [lane.verdict for lane in decoded.lanes]
    assert len({lane.texts[-1] for lane in decoded.lanes}) == 1
    race = on_clock(decoded, "modelled", profile)
    assert race.end > 0


def test_bad_race_settings_get_a_message_before_anything_decodes(tiny_pair):
    with pytest.raises(ValueError, match="the prompt is empty"):
        decode_race(tiny_pair, "  ", DecodeConfig(), profile=fixed_profile(tiny_pair))
    with pytest.raises(ValueError, match="latency profile"):
        decode_race(tiny_pair, PROMPT, DecodeConfig(max_new_tokens=4), profile=None, warm=False)


def test_curve_shapes_are_read_from_the_points():
    assert curve_shape([(4, 1.0), (16, 1.2), (64, 1.3)]) == "still rising at the largest budget tried (64: 1.30×)"
    assert curve_shape([(4, 1.0), (16, 1.4), (64, 1.21)]) == "peaks at 16 (1.40×), then falls to 1.21× at 64"
    assert curve_shape([(4, 1.0), (16, 1.4), (64, 1.399)]).startswith("flat from 16")
    assert curve_shape([(4, 1.0), (16, 1.4), (64, 1.401)]).startswith("levels off from 16")
    assert curve_shape([(8, 1.1)]) == "one budget tried (8: 1.10×)"
    assert curve_shape([(8, float("nan"))]).startswith("not priced")


def test_the_sweep_caption_never_claims_a_peak_the_modelled_curves_do_not_show():
    spread = Spread(10.0, 9.0, 11.0, 3)
    summary = [{"label": "ar", "selector": "ar", "budget": 1, "modelled_speedup": 1.0, "tokens_per_s": spread}]
    for budget, ddtree, taps in ((4, 1.0, 1.1), (16, 1.2, 1.3), (64, 1.3, 1.2)):
        summary += [{"label": "ddtree", "selector": "ddtree", "budget": budget, "modelled_speedup": ddtree},
                    {"label": "taps/online", "selector": "taps", "budget": budget, "modelled_speedup": taps}]
    best = [{"selector": "ddtree", "clear": False, "tied": [4, 16, 64], "best budget (measured)": "within noise"},
            {"selector": "taps/online", "clear": True, "tied": [], "best budget (measured)": "16"}]
    caption = sweep_caption(summary, best)
    assert "ddtree still rising at the largest budget tried (64: 1.30×)" in caption
    assert "taps/online peaks at 16 (1.30×), then falls to 1.20× at 64" in caption
    assert "above the noise: taps/online 16" in caption and "ddtree are within noise" in caption
    assert "middle budget" not in caption


def test_the_race_link_round_trips_and_bad_values_get_messages():
    """The race's link is the link module's (`taps.studio.link`): one parser core and one writer with
    Step through's conventions (the last of repeated values, the engine's checks, one prompt limit,
    one message style)."""
    examples = [{"id": "fib", "title": "Fibonacci", "prompt": "def fib(n):"}]
    link = race_link_params(RaceLink("def fib(n):", example_of("def fib(n):", examples), 16, "learned", 0.0,
                                     "modelled", "reference-cpu-taps-code-10m"))
    assert link == {"example": "fib", "budget": "16", "estimator": "learned", "temperature": "0", "clock": "modelled",
                    "profile": "reference-cpu-taps-code-10m"}
    values, problems = parse_race_link(link, examples)
    assert not problems and (values.example, values.prompt, values.budget, values.estimator, values.temperature,
                             values.clock, values.profile) == ("fib", "def fib(n):", 16, "learned", 0.0, "modelled",
                                                               "reference-cpu-taps-code-10m")
    own = race_link_params(RaceLink("x = 1", example_of("x = 1", examples), 8, "online", 0.5, "measured"))
    assert own["prompt"] == "x = 1" and "example" not in own and "profile" not in own
    assert parse_race_link(own, examples)[0].prompt == "x = 1"
    assert "batch" not in link
    batched = race_link_params(RaceLink("def fib(n):", "fib", batch=4))
    assert batched["batch"] == "4" and parse_race_link(batched, examples)[0].batch == 4
    values, problems = parse_race_link({"example": "nope", "budget": "5000", "estimator": "magic", "temperature": "hot",
                                        "clock": "sundial", "profile": "<script>", "batch": "3"}, examples)
    assert values.given == set()
    assert "unknown example 'nope': choose one of fib" in problems[0]
    assert any("budget must be from 1 to 1024" in p for p in problems)
    assert any("unknown estimator 'magic'" in p for p in problems)
    assert any("temperature must be a number, got 'hot'" in p for p in problems)
    assert any("unknown clock 'sundial'" in p for p in problems)
    assert any("is not a profile id" in p for p in problems)
    assert "Link parameter batch: unknown number of requests in a batch '3': choose one of 1, 2, 4, 8; using 1 " \
           "(one request)." in problems and values.batch == 1
    assert all(p.startswith("Link parameter ") for p in problems) and len(problems) == 7
    assert "longer than a link carries" in parse_race_link({"prompt": "x" * 9000}, examples)[1][0]
    assert parse_race_link({"budget": "2.5"}, examples)[1] == [
        "Link parameter budget: budget must be a whole number, got '2.5'; using the default (32)."]
    assert "x" * 9000 not in race_link_params(RaceLink("x" * 9000)).values()    # too long for a link: left out


def test_a_lanes_small_tree_draws_the_round_it_is_given(decoded):
    record = max(decoded.lanes[2].rounds, key=lambda r: r.verified_nodes)
    fig = lane_tree_figure(record, height=150, title="round 3")
    drawn = {t.name: len([x for x in t.x if x is not None]) for t in fig.data if t.mode == "markers"}
    assert drawn["accepted"] == len(record.accepted) and drawn["root: last token"] == 1
    assert drawn["rejected sibling"] == record.rejected_siblings
    assert drawn["rejected-prefix waste"] == record.waste_nodes and drawn["bonus: target's token"] == 1
    assert fig.layout.height == 150 and fig.layout.meta["round"] == record.number
    assert not lane_tree_figure(None).data
