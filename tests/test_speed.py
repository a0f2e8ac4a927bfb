"""Modelled and measured speed (taps.studio.speed): spreads, notes, repeats and when a best budget may be
named."""

from __future__ import annotations

import math

import pytest

from taps.studio.speed import (
    MachineLoad,
    Spread,
    best_budgets,
    compact_rounds,
    modelled_of,
    spread_notes,
    spread_of,
    summarize_repeats,
    validate_repeats,
)


class Profile:
    """A made-up profile: AR step 2 ms; a round costs 1 ms plus 0.1 ms a node."""

    def round_time(self, policy, size):
        return 0.002 if policy == "ar" else 0.001 + 0.0001 * size


def test_spreads():
    s = spread_of([3.0, 1.0, 2.0])
    assert (s.median, s.low, s.high, s.count) == (2.0, 1.0, 3.0, 3) and s.wide
    assert s.text(1) == "2.0× (1.0–3.0×)"
    narrow = spread_of([1.0, 1.05, 1.02])
    assert not narrow.wide and narrow.relative == pytest.approx(0.05 / 1.02)
    quartiles = spread_of(range(1, 101), "middle half")
    assert (quartiles.low, quartiles.high) == pytest.approx((25.75, 75.25))
    assert math.isnan(spread_of([]).median) and spread_of([float("nan"), 2.0]).count == 1
    assert Spread(1.0, 1.0, 1.0, 1).text() == "1.00×"


def test_repeats_are_checked():
    assert validate_repeats(3) == 3
    for bad in (2, 21, 3.5, True, "3"):
        with pytest.raises(ValueError, match="repeats must be a whole number from 3 to 20"):
            validate_repeats(bad)


def test_busy_machine_note():
    assert MachineLoad(3.2, 2).busy and "busy (load 3.2 on 2 cores)" in MachineLoad(3.2, 2).note()
    assert MachineLoad(0.3, 2).note() == ""


def row(label, selector, budget, rate, speedup, shape=1, tau=2.0, nodes=20, rounds=5, counts=None):
    return {"label": label, "selector": selector, "estimator": "marginal", "budget": budget, "tau": tau,
            "rounds": rounds, "new_tokens": 10, "verified_nodes": nodes, "waste_share": 0.0, "lossless": True,
            "tokens_per_s": rate, "speedup_vs_ar": speedup, "round_shape": shape,
            "round_counts": counts or [[2, 4]] * rounds}


def test_summaries_over_repeats_and_the_modelled_figure():
    repeats = [[row("ar", "ar", 1, 50.0, 1.0, counts=[[1, 0]] * 10), row("ddtree", "ddtree", 4, r, r / 50)]
               for r in (80.0, 90.0, 70.0)]
    summary = summarize_repeats(repeats, Profile())
    ddtree = next(s for s in summary if s["label"] == "ddtree")
    assert ddtree["tokens_per_s"].median == 80.0 and ddtree["repeats"] == 3 and ddtree["same_rounds"]
    assert ddtree["modelled_speedup"] == pytest.approx(2 * 0.002 / 0.0014)   # tau x AR step / round
    ar = next(s for s in summary if s["label"] == "ar")
    assert ar["modelled_speedup"] == pytest.approx(1.0)
    repeats[2][1]["round_shape"] = 2
    assert not next(s for s in summarize_repeats(repeats) if s["label"] == "ddtree")["same_rounds"]
    assert math.isnan(next(s for s in summarize_repeats(repeats) if s["label"] == "ddtree")["modelled_speedup"])


def test_compact_rounds_keeps_what_the_figures_need():
    records = [{"tau": 3, "verified_nodes": 5, "selected": [0, 1, 2], "accepted": [1, 2]},
               {"tau": 1, "verified_nodes": 2, "selected": [0, 1], "accepted": []}]
    compact = compact_rounds({"selector": "ddtree", "estimator": "marginal", "round_records": records})
    assert "round_records" not in compact and compact["round_counts"] == [[3, 5], [1, 2]]
    again = compact_rounds({"selector": "ddtree", "estimator": "marginal", "round_records": [dict(r) for r in records]})
    assert again["round_shape"] == compact["round_shape"]
    modelled = modelled_of(compact, Profile())
    assert modelled["tau"] == 2.0 and modelled["round_s"] == pytest.approx(0.00135)


def summary_of(rates: dict[int, list[float]], same_work: set[int] = frozenset()) -> list[dict]:
    repeats = []
    for n in range(3):
        rows = [row("ar", "ar", 1, 50.0, 1.0)]
        for budget, values in rates.items():
            work = dict(tau=2.0, nodes=20, rounds=5) if budget in same_work else dict(tau=budget, nodes=budget * 5,
                                                                                       rounds=5)
            rows.append(row("dflash", "dflash", budget, values[n], values[n] / 50, **work))
        repeats.append(rows)
    return summarize_repeats(repeats, Profile())


def test_a_best_budget_is_named_only_above_the_noise():
    clear = best_budgets(summary_of({8: [100, 104, 102], 16: [90, 95, 93]}))
    assert clear[0]["best budget (measured)"] == "8" and clear[0]["clear"]
    summary = summary_of({8: [100, 80, 102], 16: [90, 95, 93]})
    noisy = best_budgets(summary)
    assert noisy[0]["best budget (measured)"] == "within noise" and not noisy[0]["clear"]
    modelled = max((r for r in summary if r["label"] == "dflash"), key=lambda r: r["modelled_speedup"])
    assert noisy[0]["tied"] == [8, 16] and noisy[0]["best budget (modelled)"] == modelled["budget"]
    # identical work at 16, 32 and 64 (the lecturer's DFlash): never a winner, whatever the clock said
    same = best_budgets(summary_of({16: [120, 121, 122], 32: [60, 61, 62], 64: [45, 46, 47]}, {16, 32, 64}))
    assert same[0]["best budget (measured)"] == "within noise" and same[0]["tied"] == [16, 32, 64]


def test_wide_spreads_get_a_note():
    summary = summary_of({8: [100, 40, 102]})
    notes = spread_notes(summary, MachineLoad(0.1, 2))
    assert len(notes) == 1 and "Wide spread between repeats" in notes[0] and "dflash@8" in notes[0]
    assert len(spread_notes(summary, MachineLoad(4.0, 2))) == 2


def test_a_measured_speed_up_is_shown_only_where_it_means_something():
    """No lone one-round figure beside a modelled one, and none read as a result on a busy machine:
    a dash with why (greyed on the page), and the figure with its spread once there are enough
    rounds on a quiet machine."""
    from taps.studio.speed import MIN_MEASURED_ROUNDS, MachineLoad, measured_shown, spread_of

    assert measured_shown(None).value == "—" and not measured_shown(None).shown
    one = measured_shown(spread_of([0.24], "middle half"))
    assert one.value == "—" and not one.shown and one.note == f"from round {MIN_MEASURED_ROUNDS}"
    assert "0.24" not in one.value + one.note and "1 round so far" in one.sentence
    enough = spread_of([1.6, 1.8, 1.9, 2.0, 2.2], "middle half")
    quiet, busy = MachineLoad(load=0.3, cores=2), MachineLoad(load=3.5, cores=2)
    shown = measured_shown(enough, quiet)
    assert shown.shown and shown.value == "1.90×" and shown.note == "1.80–2.00× middle half"
    greyed = measured_shown(enough, busy)
    assert not greyed.shown and greyed.value == "—" and greyed.note == "1.90× rough: machine busy"
    assert "busy (load 3.5 on 2 cores)" in greyed.sentence
    assert measured_shown(enough).shown                          # a saved run: no load to judge, enough rounds


def test_a_measured_figure_says_when_its_ar_baseline_is_still_being_timed():
    """Two pages on one shared round read 2.32x and 2.41x (issue 51 point 6): the AR steps behind
    the figure are timed in the background after a page draws. The caption says so until they all are."""
    from types import SimpleNamespace

    from taps.studio.speed import ar_progress_note, step_speed

    rounds = [SimpleNamespace(tau=3, time_s=0.01, verified_nodes=8, selector="taps", estimator="online")] * 6
    ar = [SimpleNamespace(time_s=0.004)] * 8
    partial = step_speed(rounds, ar, None, ar_needed=18)
    assert partial.ar_timed == 8 and "8 of 18 AR steps timed so far" in ar_progress_note(partial)
    whole = step_speed(rounds, [SimpleNamespace(time_s=0.004)] * 18, None, ar_needed=18)
    assert ar_progress_note(whole) == ""
    assert ar_progress_note(step_speed(rounds, [], None, ar_needed=18)) == ""          # no AR run: nothing to say
