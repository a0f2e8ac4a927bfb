"""Reach calibration (taps.calibrate): the isotonic fit, the maps shipped with a scorer, the online
correction from a session's own verdicts, and that none of it changes a single output token."""

from __future__ import annotations

import json

import numpy as np
import oracles
import pytest
import torch

from taps import DecodeSession, greedy_continuation, sample_continuation
from taps.calibrate import (
    DEPTH_BANDS,
    Calibration,
    DepthCorrection,
    ReachMap,
    cap_down,
    isotonic,
)
from taps.eval.metrics import reliability_counts, reliability_table


def test_isotonic_pools_violators_into_their_weighted_mean():
    x = np.array([0.1, 0.2, 0.3, 0.4])
    y = np.array([0.5, 0.1, 0.3, 0.9])
    w = np.array([1.0, 1.0, 2.0, 1.0])
    kx, ky = isotonic(x, y, w)
    assert np.all(np.diff(ky) >= 0)
    # the first two violate and pool into their mean, (0.5 + 0.1) / 2 = 0.3 at x 0.15; the third
    # (0.3) ties that block and stays apart
    assert ky.tolist() == pytest.approx([0.3, 0.3, 0.9]) and kx.tolist() == pytest.approx([0.15, 0.3, 0.4])


def test_a_fitted_map_learns_an_over_confident_estimate_and_stays_monotone():
    rng = np.random.default_rng(0)
    pred = rng.uniform(0, 1, 120000)
    depths = rng.integers(1, 16, 120000)
    observed = (rng.uniform(0, 1, 120000) < pred * np.where(depths >= 4, 0.5, 1.0)).astype(float)
    reach_map = ReachMap.fit(pred, observed, depths)
    grid = np.linspace(0, 1, 101)
    for d in (1, 2, 5, 12):
        mapped = reach_map.apply(grid, np.full(101, d))
        assert np.all(np.diff(mapped) >= -1e-12)
        expected = grid * (0.5 if d >= 4 else 1.0)
        assert np.abs(mapped - expected)[10:90].max() < 0.06, d
    again = ReachMap.from_json(json.loads(json.dumps(reach_map.to_json())))
    assert np.array_equal(again.apply(grid, np.full(101, 5)), reach_map.apply(grid, np.full(101, 5)))


def test_too_few_nodes_give_the_identity_and_bad_knots_are_refused():
    reach_map = ReachMap.fit(np.array([0.3, 0.4]), np.array([0.0, 1.0]), np.array([1, 1]))
    assert reach_map.apply(np.array([0.25, 0.75]), np.array([1, 1])).tolist() == [0.25, 0.75]
    bad = ReachMap.identity().to_json()
    bad["y"][2] = [0.5, 0.2]
    with pytest.raises(ValueError, match="non-decreasing"):
        ReachMap.from_json(bad)


def test_cap_down_keeps_reach_prefix_monotone_and_siblings_within_their_parent():
    parents = np.array([-1, 0, 0, 1, 1, 2])
    depths = np.array([0, 1, 1, 2, 2, 2])
    out = cap_down(parents, depths, np.array([1.0, 0.9, 0.6, 0.95, 0.4, 0.7]))
    assert out[0] == 1.0
    assert out[1] + out[2] <= 1.0 + 1e-12
    assert out[3] + out[4] <= out[1] + 1e-12
    assert out[5] <= out[2] + 1e-12
    assert np.all(out[1:] <= out[parents[1:]] + 1e-12)


def test_cap_down_never_lifts_a_lone_child_above_its_parent_by_rounding():
    rng = np.random.default_rng(3)
    for _ in range(5000):      # x * (p / x) > p for about one x in six
        parent_reach = rng.uniform(0.01, 0.9)
        out = cap_down(np.array([-1, 0, 1]), np.array([0, 1, 2]),
                       np.array([1.0, parent_reach, rng.uniform(parent_reach, 1.0)]))
        assert out[2] <= out[1]


@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_pass_equals_the_static_map_then_the_online_correction(seed):
    """`Calibrator.both` (kernels.calibrated_reach) against its numpy twin (tests/oracles.py), on random
    pools, with and without a map, before and after the session has seen verdicts."""
    from taps.calibrate import Calibrator
    from taps.pool import Lattice, heap_tree

    rng = np.random.default_rng(seed)
    lattice = Lattice.from_logits(torch.as_tensor(rng.normal(0, 2, (9, 40))), 8)
    pool = heap_tree(3, lattice, 60, 60)
    raw = np.exp(pool.path_logprob) * rng.uniform(0.2, 1.0) ** pool.depths
    xs = [sorted(set([0.0, *rng.uniform(0, 1, 4).round(3), 1.0])) for _ in DEPTH_BANDS]
    ys = [sorted(rng.uniform(0, 1, len(x))) for x in xs]
    for reach_map in (None, ReachMap(xs, ys, [50] * len(DEPTH_BANDS))):
        cal = Calibrator(reach_map, "online")
        for _ in range(2):
            static, final = cal.both(pool, raw)
            want_static, want_final = oracles.calibrated_reach(cal, pool, raw)
            np.testing.assert_allclose(static, want_static, rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(final, want_final, rtol=1e-12, atol=1e-15)
            assert np.all(final[1:] <= final[pool.parents[1:]])
            cal.correction.observe(pool.depths[1:12], static[1:12], rng.uniform(0, 1, 11))


def test_calibration_files_round_trip_pick_the_nearest_temperature_and_refuse_damage(tmp_path):
    half = ReachMap([[0.0, 1.0]] * len(DEPTH_BANDS), [[0.0, 0.5]] * len(DEPTH_BANDS), [100] * len(DEPTH_BANDS))
    cal = Calibration({"learned": {0.0: ReachMap.identity(), 0.7: half}}, {"fitted_on": "test"})
    cal.save(tmp_path)
    loaded = Calibration.load(tmp_path)
    assert loaded.meta["fitted_on"] == "test"
    assert loaded.reach_map("learned", 0.0).apply(np.array([0.8]), np.array([1]))[0] == pytest.approx(0.8)
    assert loaded.reach_map("learned", 1.0).apply(np.array([0.8]), np.array([1]))[0] == pytest.approx(0.4)
    assert loaded.reach_map("marginal", 0.0) is None
    assert Calibration.load(tmp_path / "nowhere") is None
    (tmp_path / "calibration.json").write_text('{"format": 1, "depth_bands": [1, 2]}')
    with pytest.raises(ValueError, match="taps.train calibrate"):
        Calibration.load(tmp_path)


def test_the_saved_reach_curves_round_trip_and_are_read_at_the_nearest_temperature_and_budget(tmp_path):
    """A batch plan's starting curve: the one fitted nearest the session's temperature and budget,
    cut or padded with zeros to the budget; the online estimator reads the marginal's; none saved,
    none read."""
    curves = {"marginal": {0.0: {8: [0.9, 0.5] + [0.1] * 6, 16: [0.95, 0.6] + [0.2] * 14},
                           0.7: {8: [0.4] * 8}}}
    Calibration({"marginal": {0.0: ReachMap.identity()}}, {}, curves).save(tmp_path)
    loaded = Calibration.load(tmp_path)
    assert loaded.curves == curves
    np.testing.assert_allclose(loaded.reach_curve("marginal", 0.1, 8), curves["marginal"][0.0][8])
    np.testing.assert_allclose(loaded.reach_curve("online", 0.0, 20), curves["marginal"][0.0][16] + [0.0] * 4)
    np.testing.assert_allclose(loaded.reach_curve("marginal", 0.0, 4), [0.9, 0.5, 0.1, 0.1])
    np.testing.assert_allclose(loaded.reach_curve("marginal", 1.0, 12), [0.4] * 8 + [0.0] * 4)
    assert loaded.reach_curve("learned", 0.0, 8) is None
    assert Calibration({}, {}).reach_curve("marginal", 0.0, 8) is None


def test_the_online_correction_is_the_accepted_over_predicted_ratio_per_depth():
    correction = DepthCorrection(prior=4.0)
    assert correction.ratios(3).tolist() == [1.0, 1.0, 1.0, 1.0]
    for _ in range(20):
        correction.observe(np.array([1, 1, 2, 5]), np.array([0.9, 0.1, 0.8, 0.6]), np.array([1.0, 0.0, 0.0, 0.0]))
    rho = correction.ratios(6)
    assert rho[1] == pytest.approx((20 + 4) / (20 + 4)) and rho[2] == pytest.approx(4 / (16 + 4))
    assert rho[5] == pytest.approx(4 / (12 + 4)) and rho[3] == rho[6] == 1.0


def test_the_online_correction_scales_reach_by_its_depths_ratio_where_no_cap_binds():
    from taps.calibrate import Calibrator
    from taps.tree import DraftTree

    pool = DraftTree(tokens=np.arange(5), parents=np.array([-1, 0, 0, 1, 3]), depths=np.array([0, 1, 1, 2, 3]),
                     ranks=np.zeros(5, dtype=np.int64), marginal_logprob=np.zeros(5), path_logprob=np.zeros(5),
                     reach=np.ones(5))
    static = np.array([1.0, 0.5, 0.3, 0.4, 0.2])
    cal = Calibrator(None, "online")
    assert cal.both(pool, static)[1] is static                   # nothing seen yet: the static reach
    cal.correction.observe(np.array([1, 2, 3]), np.array([10.0, 10.0, 10.0]), np.array([12.0, 6.0, 5.0]))
    rho = cal.correction.ratios(3)
    out = cal.both(pool, static)[1]
    assert out[1] == pytest.approx(0.5 * rho[1]) and out[2] == pytest.approx(0.3 * rho[1])
    assert out[3] == pytest.approx(0.4 * rho[2]) and out[4] == pytest.approx(0.2 * rho[3])
    assert np.all(out[1:] <= out[pool.parents[1:]])


def _planted(pair, calibration):
    saved = pair.calibration
    pair.calibration = calibration
    return saved


def test_an_over_confident_map_is_pulled_back_by_the_sessions_verdicts(tiny_pair):
    """A map that doubles every reach: with calibration 'online' the session's ratios fall below 1
    and its expected tau comes closer to the accepted one than with 'static'; the tokens are AR's."""
    doubled = ReachMap([[0.0, 0.5, 1.0]] * len(DEPTH_BANDS), [[0.0, 1.0, 1.0]] * len(DEPTH_BANDS),
                       [100] * len(DEPTH_BANDS))
    saved = _planted(tiny_pair, Calibration({"marginal": {0.0: doubled}}))
    try:
        prompt = [5, 17, 33, 2, 60, 8]
        reference = greedy_continuation(tiny_pair, prompt, 40)
        gaps = {}
        for mode in ("static", "online"):
            s = DecodeSession(tiny_pair, prompt, selector="taps", estimator="marginal", budget=16, taps_mode="reach",
                              calibration=mode, max_new_tokens=40, stop_at_eos=False)
            s.run()
            assert s.generated == reference, mode
            expected = np.mean([r.expected_tau for r in s.rounds])
            accepted = np.mean([1 + len(r.accepted) for r in s.rounds])
            gaps[mode] = abs(expected - accepted)
            for r in s.rounds:       # reach never grows along a path, so the verified tree is prefix-closed
                reach, parents = np.asarray(r.pool_reach), np.asarray(r.pool_parents)
                assert np.all(reach[1:] <= reach[parents[1:]] + 1e-12)
        assert s.estimator.calibrator.correction.ratios(8)[1:].min() < 1.0
        assert gaps["online"] < gaps["static"]
    finally:
        tiny_pair.calibration = saved


@pytest.mark.parametrize("mode", ["off", "static", "online"])
@pytest.mark.parametrize("estimator", ["marginal", "online"])
def test_every_calibration_mode_is_lossless_greedy_and_sampled(tiny_pair, mode, estimator):
    squeezed = ReachMap([[0.0, 0.2, 1.0]] * len(DEPTH_BANDS), [[0.0, 0.6, 0.7]] * len(DEPTH_BANDS),
                        [100] * len(DEPTH_BANDS))
    # the online estimator starts from the marginal's map
    saved = _planted(tiny_pair, Calibration({"marginal": {0.0: squeezed, 1.0: ReachMap.identity()}}))
    try:
        prompt = [9, 4, 71, 3]
        for temperature, seed in ((0.0, 0), (0.8, 3)):
            reference = (greedy_continuation(tiny_pair, prompt, 24) if temperature == 0 else
                         sample_continuation(tiny_pair, prompt, 24, temperature, seed))
            for taps_mode in ("reach", "cost"):
                s = DecodeSession(tiny_pair, prompt, selector="taps", estimator=estimator, budget=8,
                                  taps_mode=taps_mode, calibration=mode, temperature=temperature, seed=seed,
                                  max_new_tokens=24, stop_at_eos=False)
                s.run()
                assert s.generated == reference, (mode, estimator, temperature, taps_mode)
    finally:
        tiny_pair.calibration = saved


def _random_pool(seed: int):
    from taps.pool import Lattice, heap_tree

    rng = np.random.default_rng(seed)
    lattice = Lattice.from_logits(torch.as_tensor(rng.normal(0, 2, (9, 40))), 8)
    return heap_tree(3, lattice, 60, 60), lattice, rng


@pytest.mark.parametrize("seed", range(3))
def test_the_online_estimator_starts_as_the_mapped_marginal_and_is_mapped_only_once(tiny_pair, seed):
    """Before any verdict the online estimator's reach is the marginal estimator's static reach (the
    marginal map, capped); its verdicts then move q from there, and no map or depth correction is
    laid over its reach again (that counted the correction twice at T>0)."""
    from taps.estimate import make_estimator

    halving = ReachMap([[0.0, 1.0]] * len(DEPTH_BANDS), [[0.0, 0.5]] * len(DEPTH_BANDS), [100] * len(DEPTH_BANDS))
    saved = _planted(tiny_pair, Calibration({"marginal": {0.0: halving}}))
    try:
        pool, lattice, rng = _random_pool(seed)
        marginal = make_estimator("marginal", tiny_pair, calibration="static")
        online = make_estimator("online", tiny_pair, calibration="online")
        assert online.calibrator is None and online.wants_feedback
        want = marginal.reach(pool, lattice)
        np.testing.assert_allclose(online.reach(pool, lattice), want, rtol=1e-9, atol=1e-15)
        assert want[1:].max() <= 0.5 + 1e-12                     # the map halved it, once
        # every verdict an acceptance: the buckets lift q above the mapped start, never reach past 1
        online.observe(pool, np.where(np.arange(pool.size + 1) > 0, 1.0, np.nan))
        lifted = online.reach(pool, lattice)
        assert lifted[1:].sum() > want[1:].sum()
        assert np.all(lifted[1:] <= lifted[pool.parents[1:]] + 1e-12)
        # calibration 'off': the raw marginal, no map
        raw = make_estimator("online", tiny_pair, calibration="off")
        np.testing.assert_allclose(raw.reach(pool, lattice), make_estimator("marginal", tiny_pair, calibration="off")
                                   .reach(pool, lattice), rtol=1e-9, atol=1e-15)
    finally:
        tiny_pair.calibration = saved


def test_an_unknown_calibration_is_refused_with_the_choices(tiny_pair):
    with pytest.raises(ValueError, match="online, static, off"):
        DecodeSession(tiny_pair, [5, 6], selector="taps", calibration="sometimes")


def test_reliability_counts_bin_the_verified_nodes_by_their_reach(tiny_pair):
    s = DecodeSession(tiny_pair, [5, 17, 33], selector="taps", estimator="marginal", budget=8, max_new_tokens=16,
                      stop_at_eos=False)
    s.run()
    counts = np.asarray(reliability_counts(s.rounds))
    assert counts[:, 0].sum() == sum(r.verified_nodes for r in s.rounds)
    assert counts[:, 2].sum() == sum(len(r.accepted) for r in s.rounds)
    table = reliability_table(counts)
    assert all(row["nodes"] > 0 and 0 <= row["observed"] <= 1 for row in table)
    for row in table:
        low = float(row["bin"].split("-")[0])
        assert low - 1e-9 <= row["predicted"] <= low + 0.1 + 1e-9
