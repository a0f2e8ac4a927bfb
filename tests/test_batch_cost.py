"""Verify cost at a batch and the batch's shared width (issue 52, `taps.batch_cost`): the grid prices
what it measured and interpolates between, its plane fit says how far it is, the shared width is the
best of expected tokens per second and shrinks as the forward's rows cost more, the roofline's batch
of one is its solo verify, and the measurement and the batch command run on a real pair."""

from __future__ import annotations

import numpy as np
import pytest

from taps.batch_cost import BatchVerify, expected_tokens, of_profile, shared_width


def plane(a=0.01, b=0.001, c=0.0005, batches=(1, 2, 4, 8), widths=(0, 2, 4, 8, 16)) -> BatchVerify:
    seconds = [[a + b * n + c * n * (w + 1) for w in widths] for n in batches]
    return BatchVerify(batches=list(batches), widths=list(widths), seconds=seconds, context_length=64)


def test_the_grid_prices_its_points_interpolates_between_and_extends_by_its_plane():
    grid = plane()
    for i, n in enumerate(grid.batches):
        assert np.allclose(grid.time(n, np.asarray(grid.widths)), grid.seconds[i])
    exact = lambda n, w: 0.01 + 0.001 * n + 0.0005 * n * (w + 1)   # noqa: E731
    assert grid.time(3, 6) == pytest.approx(exact(3, 6))           # the plane is linear: interpolation is exact
    assert grid.time(32, 8) == pytest.approx(exact(32, 8))         # past the largest batch, by the plane
    assert grid.time(4, 40) == pytest.approx(exact(4, 40))         # past the widest, too
    fit = grid.fit()
    assert fit["coefficients"] == pytest.approx((0.01, 0.001, 0.0005)) and fit["max_error"] < 1e-9
    assert BatchVerify.from_dict(grid.as_dict()) == grid and "median error 0.0%" in grid.describe()
    raw = grid.as_dict()
    raw["seconds"][1][2] *= 1.5                                     # a point off the plane: the fit says so
    assert BatchVerify.from_dict(raw).fit()["max_error"] > 0.1


def test_a_grid_with_a_wrong_shape_or_order_is_refused():
    with pytest.raises(ValueError, match="needs 2 x 2 times"):
        BatchVerify(batches=[1, 2], widths=[0, 1], seconds=[[1.0, 2.0]])
    with pytest.raises(ValueError, match="ascending"):
        BatchVerify(batches=[2, 1], widths=[0, 1], seconds=[[1.0, 2.0], [1.0, 2.0]])
    with pytest.raises(ValueError, match="kind must be"):
        BatchVerify(batches=[1], widths=[0], seconds=[[1.0]], kind="guessed")


def test_expected_tokens_sum_each_requests_best_reaches():
    table = expected_tokens([np.array([0.9, 0.5]), np.array([0.8, 0.7, 0.6])], 3)
    assert np.allclose(table, [[1, 1.9, 2.4, 2.4], [1, 1.8, 2.5, 3.1]])


def best_by_hand(reaches, overhead, grid, widest):
    rates = [sum(1 + sum(sorted(r, reverse=True)[:w]) for r in reaches) / (overhead + grid.time(len(reaches), w))
             for w in range(widest + 1)]
    return int(np.argmax(rates))


def test_the_shared_width_is_the_best_rate_and_shrinks_as_rows_cost_more():
    rng = np.random.default_rng(0)
    reaches = [np.sort(rng.random(24) ** 3)[::-1] for _ in range(8)]
    for c in (0.0, 1e-4, 5e-4, 2e-3):
        grid = plane(c=c)
        for n in (1, 2, 4, 8):
            assert shared_width(reaches[:n], 0.002 * n, grid, 16) == best_by_hand(reaches[:n], 0.002 * n, grid, 16)
    assert shared_width(reaches, 0.016, plane(c=0.0), 16) == 16      # a free forward: the whole budget
    widths = [shared_width(reaches[:n], 0.002 * n, plane(a=0.004, b=0.0, c=2e-4), 16) for n in (1, 2, 4, 8)]
    assert widths == sorted(widths, reverse=True) and widths[0] > widths[-1]   # bigger batch, smaller trees
    assert shared_width([np.zeros(5)], 0.001, plane(), 4) == 0       # nothing to gain: the root alone (a tie)
    assert shared_width([], 0.0, plane(), 4) == 0


def test_the_rooflines_batch_of_one_is_its_solo_verify():
    from taps.roofline import roofline_profile

    profile = roofline_profile("h200", "qwen3-8b")
    grid = of_profile(profile)
    assert grid.kind == "roofline" and grid.context_length == profile.context_length
    for w in grid.widths:
        assert grid.time(1, w) == pytest.approx(float(profile.verify_time(w)), rel=1e-9)
    assert grid.time(16, 32) > grid.time(1, 32) and grid.time(16, 0) < 16 * grid.time(1, 0)


def test_measured_on_a_real_pair_and_saved_by_the_batch_command(tiny_pair_dir, tmp_path, capsys):
    from conftest import fixed_profile

    from taps.bench import main
    from taps.cost_model import LatencyProfile
    from taps.eval import measure
    from taps.pair import load_pair

    pair = load_pair(tiny_pair_dir)
    grid = measure.measure_batch_verify(pair, [1, 3], [0, 2, 5], context_length=16, repeats=2)
    assert grid.kind == "measured" and np.asarray(grid.seconds).shape == (2, 3)
    assert all(np.all(np.diff(row) >= 0) and min(row) > 0 for row in grid.seconds)

    path = tmp_path / "profile.json"
    fixed_profile(pair).save(path)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "prompt": "def f():"}\n{"id": "b", "prompt": "import os"}\n')
    real = measure.measure_batch_verify
    measure.measure_batch_verify = lambda p, batches, widths: real(p, batches[:2], widths[:3], 16, 1)
    try:
        assert main(["--pair", str(tiny_pair_dir), "--prompt-file", str(prompts), "--profile", str(path),
                     "--measure", "--selectors", "taps-batch,chain-batch", "--batch", "2", "--budget", "4",
                     "--max-new-tokens", "6", "--ignore-eos", "--repeats", "1"]) == 0
    finally:
        measure.measure_batch_verify = real
    saved = of_profile(LatencyProfile.load(path))
    assert saved is not None and saved.batches == [1, 2] and saved.widths == [0, 1, 2]
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in capsys.readouterr().out.splitlines()
            if line.startswith("| ") and not line.startswith("| batch")]
    assert [r[1] for r in rows] == ["ar", "TAPS (batch-aware)", "confidence chain"]
    assert all(r[-1] == "yes" for r in rows)


def test_the_batch_command_prices_rounds_on_a_roofline_and_names_bad_methods(tiny_pair_dir, tmp_path, capsys):
    from taps.bench import main

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "prompt": "def f():"}\n{"id": "b", "prompt": "x = 1"}\n')
    common = ["--pair", str(tiny_pair_dir), "--prompt-file", str(prompts), "--batch", "2", "--budget", "4",
              "--max-new-tokens", "6", "--ignore-eos", "--repeats", "1"]
    assert main([*common, "--selectors", "dflash,taps-batch", "--price", "roofline-h200-qwen3-8b",
                 "--plot", str(tmp_path / "plots")]) == 0
    out = capsys.readouterr().out
    drawn = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert drawn in (["speedup_vs_batch_roofline-h200-qwen3-8b.png"],
                     ["speedup_vs_batch_roofline-h200-qwen3-8b.html"])          # HTML where kaleido cannot draw
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in out.splitlines()
            if line.startswith("| ") and not line.startswith("| batch")]
    assert "roofline batch verify grid" in out and [r[1] for r in rows] == ["ar", "dflash", "TAPS (batch-aware)"]
    assert rows[0][9] == "1.00x" and all(float(r[8]) > 0 for r in rows)      # the priced columns, after the range
    assert main([*common, "--selectors", "tree-batch"]) == 2
    err = capsys.readouterr().err
    assert "unknown selector 'tree-batch'" in err and "taps-batch, chain-batch" in err


def test_drafting_pays_only_while_its_tokens_per_second_beat_an_autoregressive_step():
    from taps.batch_cost import plan_step

    reaches = [np.array([0.9, 0.8, 0.6, 0.3])] * 4
    assert plan_step(reaches, 0.001, 0.0005, plane(c=0.0), 4) == (True, 4)       # a free forward: draft, all of it
    draft, _ = plan_step(reaches, 0.001, 0.0005, plane(c=0.05), 4)               # rows dearer than their tokens
    assert not draft
    assert not plan_step([np.zeros(4)] * 2, 0.001, 0.0005, plane(), 4)[0]         # nothing to gain: no draft


def test_a_plan_that_does_not_draft_probes_seldom_the_further_drafting_is_from_paying():
    """`probe_wait`: none while drafting pays; when it does not, the plain steps between probes grow
    with the shortfall, so that probing costs at most PROBE_LOSS of the throughput by the estimate."""
    from taps.batch_cost import PROBE_LOSS, StepPlan, plan_rates, probe_wait

    assert probe_wait(StepPlan(4, 120.0, 100.0, 0.03, 0.02)) == 0                    # it pays: it drafts
    rates = (99.5, 98.0, 90.0, 70.0, 40.0)
    waits = [probe_wait(StepPlan(2, rate, 100.0, 0.03, 0.02)) for rate in rates]
    assert waits[0] == 0 and waits == sorted(waits) and waits[-1] > 50
    for rate, wait in zip(rates, waits):
        shortfall = 1 - rate / 100.0
        assert shortfall * 0.03 / (wait * 0.02 + 0.03) <= PROBE_LOSS + 1e-12          # probing's cost, at most
        if wait:
            assert shortfall * 0.03 / ((wait - 1) * 0.02 + 0.03) > PROBE_LOSS        # the least wait that keeps it
    reaches = [np.array([0.9, 0.8, 0.6, 0.3])] * 4
    plan = plan_rates(reaches, 0.001, 0.0005, plane(c=0.05), 4)
    assert not plan.drafts and plan.plain_s == pytest.approx(4 * 0.0005 + plane(c=0.05).time(4, 0))
    assert plan.drafted_rate == pytest.approx((4 + 4 * sum(reaches[0][:plan.width])) / plan.drafted_s)


def test_the_host_cost_at_a_batch_is_measured_in_real_batched_decodes(tiny_pair):
    from taps.batch_cost import host_seconds
    from taps.eval import measure
    from taps.policies import DDTREE, DFLASH, DFLASH2

    grid = measure.measure_batch_verify(tiny_pair, [1, 2], [0, 8], context_length=16, repeats=2)
    host = measure.measure_batch_host(tiny_pair, grid, batch=2, rounds=3)
    drafting = {e.run_label() for e in (DFLASH, DFLASH2, DDTREE) if e.runs_on(tiny_pair)}
    # the tiny pair has a path selector: the selector estimator's TAPS is measured beside the online one
    assert set(host) == {"ar", "taps/online", "taps/selector", *drafting} and {"dflash", "ddtree"} <= drafting
    assert all(v >= 0 for v in host.values())
    grid.host_s = host
    assert host_seconds(None, grid, "ar") == host["ar"]
    hosts = measure.measure_batch_hosts(tiny_pair, grid, [1, 2], rounds=2)
    assert set(hosts) == set(host) and all(set(by) == {"1", "2"} for by in hosts.values())


def test_the_host_cost_per_request_follows_the_batch_size_measured():
    """A batch drafts in one pass, so a request's host share depends on the batch: priced at the
    batch sizes measured, interpolated between them, the nearest past them; a grid without them
    prices every batch at its one measured size."""
    from taps.batch_cost import host_seconds, step_seconds

    grid = plane()
    grid.host_s = {"taps/online": 0.003}
    assert host_seconds(None, grid, "taps/online", 4) == 0.003
    grid.host_batches = {"taps/online": {"1": 0.004, "4": 0.002, "16": 0.001}, "ar": {"1": 0.0004, "16": 0.0002}}
    assert [host_seconds(None, grid, "taps/online", n) for n in (1, 2, 4, 10, 16, 32)] == pytest.approx(
        [0.004, 0.004 - 0.002 / 3, 0.002, 0.0015, 0.001, 0.001])
    assert host_seconds(None, grid, "taps/online") == 0.003                 # no batch size given: the one measured
    assert step_seconds(None, grid, "taps/online", 4, 8) == pytest.approx(4 * 0.002 + grid.time(4, 8))
    assert step_seconds(None, grid, "taps/online", 4, 0, drafted=False) == pytest.approx(
        4 * host_seconds(None, grid, "ar", 4) + grid.time(4, 0))
