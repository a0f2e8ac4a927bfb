"""The latency profile: robust medians, a monotone fit, keyed saving, and tree sizes that read
nothing but the profile."""

from __future__ import annotations

import json
from dataclasses import replace

import conftest
import numpy as np
import pytest

from taps import DecodeSession, cost_model, greedy_continuation
from taps.cost_model import monotone_fit
from taps.eval import measure
from taps.profiles import profile_key, profile_path, saved_profile


def test_monotone_fit_is_the_closest_non_decreasing_curve():
    assert monotone_fit([1, 3, 2, 4]) == [1, 2.5, 2.5, 4]
    assert monotone_fit([5, 4, 3]) == [4, 4, 4]
    assert monotone_fit([1, 2, 3]) == [1, 2, 3]
    rng = np.random.default_rng(0)
    for _ in range(20):
        values = list(rng.normal(size=12))
        fit = monotone_fit(values)
        assert fit == sorted(fit) and abs(sum(fit) - sum(values)) < 1e-9   # PAVA keeps the mean


def test_best_size_counts_the_policy_s_whole_round(tiny_pair):
    profile = conftest.fixed_profile(tiny_pair)
    reach = np.array([0.9, 0.8, 0.5, 0.3, 0.2, 0.1, 0.05])
    cheap = profile.best_size(reach, 7, "dflash")
    dear = replace(profile, overhead_s={"dflash": 0.05}).best_size(reach, 7, "dflash")
    assert dear >= cheap and dear == 7            # a costly round makes every extra node worth more
    flat = replace(profile, verify_s=[0.002] * len(profile.sizes))
    assert flat.best_size(reach, 5, "ddtree") == 5   # free nodes: take the budget
    assert profile.best_size(reach, 0, "ddtree") == 0


def test_saved_profile_is_used_only_when_it_fits(tiny_pair_f32, tmp_path, monkeypatch):
    monkeypatch.setenv("TAPS_CACHE", str(tmp_path))
    profile, why = saved_profile(tiny_pair_f32)
    assert profile is None and "no latency profile saved" in why
    good = conftest.fixed_profile(tiny_pair_f32)
    good.save(profile_path(tiny_pair_f32))
    assert saved_profile(tiny_pair_f32, 64)[0] == good
    assert "covers trees up to 1024" in saved_profile(tiny_pair_f32, 2048)[1]
    stale = replace(good, key={**good.key, "threads": good.key["threads"] + 7, "fingerprint": "other"})
    stale.save(profile_path(tiny_pair_f32))
    profile, why = saved_profile(tiny_pair_f32)
    assert profile is None and "another setting (fingerprint, threads)" in why
    profile_path(tiny_pair_f32).write_text("{not json")
    assert "cannot be read" in saved_profile(tiny_pair_f32)[1]


def test_reference_profiles_are_offered_only_for_their_own_pair(tiny_pair_f32, tmp_path, monkeypatch):
    """A shipped reference profile prices rounds of the pair it was timed with; another pair's
    rounds are not priced with it, and a file that does not load is skipped."""
    monkeypatch.setattr(cost_model, "REFERENCE_PROFILES", tmp_path)
    mine = conftest.fixed_profile(tiny_pair_f32)
    mine.save(tmp_path / "gpu-a.json")
    replace(mine, pair="another-pair").save(tmp_path / "gpu-b.json")
    (tmp_path / "broken.json").write_text("{not json")
    assert sorted(cost_model.reference_profiles()) == ["gpu-a", "gpu-b"]
    assert list(cost_model.reference_profiles(tiny_pair_f32.name)) == ["gpu-a"]
    assert cost_model.reference_profiles(tiny_pair_f32.name)["gpu-a"] == mine
    assert cost_model.reference_profiles("no-such-pair") == {}


def test_profile_for_measures_once_with_a_message_then_reads_it(tiny_pair_f32, tmp_path, monkeypatch):
    monkeypatch.setenv("TAPS_CACHE", str(tmp_path))
    measure.forget_profiles()
    said = []
    profile = conftest.REAL_PROFILE_FOR(tiny_pair_f32, 8, announce=said.append)
    assert len(said) == 1 and "measuring a latency profile" in said[0] and "no latency profile saved" in said[0]
    assert profile.source == "measured" and max(profile.sizes) == 64 and profile.verify_s == sorted(profile.verify_s)
    assert set(profile.overhead_s) == {"dflash", "dflash2", "ddtree", "taps/marginal", "taps/online", "taps/selector"}
    assert profile.ar_step_s > 0
    assert json.loads(profile_path(tiny_pair_f32).read_text())["key"] == profile_key(tiny_pair_f32)
    # the shared schema: what it is, where, at which precision, for which shape
    assert profile.kind == "measured" and profile.dtype == "float32" and profile.device_name.startswith("CPU, ")
    assert profile.model["layers"] == tiny_pair_f32.target.config.num_hidden_layers and profile.model["params"] > 0
    measure.forget_profiles()
    again = conftest.REAL_PROFILE_FOR(tiny_pair_f32, 32, announce=said.append)
    assert len(said) == 1 and again == profile        # read from disk, not measured again


def test_tree_sizes_read_only_the_profile(tiny_pair, monkeypatch):
    """Sessions never measure once they run: the same profile gives the same rounds."""
    profile = conftest.fixed_profile(tiny_pair)
    runs = []
    for _ in range(2):
        s = DecodeSession(tiny_pair, "def f(x):", selector="taps", estimator="online", budget=32, max_new_tokens=20,
                          stop_at_eos=False, profile=profile)
        monkeypatch.setattr(measure, "measure_profile", lambda *a, **k: pytest.fail("measured during a decode"))
        s.run()
        runs.append([(r.selected, r.tau) for r in s.rounds])
    assert runs[0] == runs[1]


@pytest.mark.parametrize("budget", [4, 64])
def test_ddtree_cost_mode_is_lossless_and_within_budget(tiny_pair, budget):
    prompt = [5, 17, 33, 2, 60, 8]
    reference = greedy_continuation(tiny_pair, prompt, 24)
    dear = replace(conftest.fixed_profile(tiny_pair), overhead_s={"ddtree": 0.05})
    for profile in (conftest.fixed_profile(tiny_pair), dear):
        s = DecodeSession(tiny_pair, prompt, selector="ddtree", ddtree_mode="cost", budget=budget, max_new_tokens=24,
                          stop_at_eos=False, profile=profile)
        s.run()
        assert s.generated == reference
        assert all(r.verified_nodes <= budget for r in s.rounds)
    plain = DecodeSession(tiny_pair, prompt, selector="ddtree", budget=budget, max_new_tokens=24, stop_at_eos=False)
    plain.run()
    assert [r.verified_nodes for r in s.rounds][:1] == [r.verified_nodes for r in plain.rounds][:1]  # dear: full


# ---------------------------------------------------------------------------- one schema, shipped profiles
def test_profiles_share_one_schema_and_old_files_still_load(tmp_path):
    from taps.paths import PROFILES_DIR

    old = cost_model.LatencyProfile.load(PROFILES_DIR / "nvidia-h200-bfloat16.json")     # written before the schema
    assert old.kind == "measured" and old.model == {} and old.device_label() == "NVIDIA H200"
    ref = cost_model.LatencyProfile.load(PROFILES_DIR / "reference-cpu-taps-code-10m.json")
    assert (ref.kind, ref.dtype, ref.device_label(), ref.pair) == ("measured", "float32", "2-core reference CPU",
                                                                   "taps-code-10m")
    assert ref.model["layers"] == 12 and ref.model["hidden"] == 256 and ref.key["format"] == cost_model.PROFILE_FORMAT
    ref.save(tmp_path / "again.json")
    assert cost_model.LatencyProfile.load(tmp_path / "again.json") == ref
    raw = json.loads((tmp_path / "again.json").read_text())
    (tmp_path / "odd.json").write_text(json.dumps({**raw, "kind": "guessed"}))
    with pytest.raises(ValueError, match="kind must be one of measured, roofline"):
        cost_model.LatencyProfile.load(tmp_path / "odd.json")


def test_verify_grows_on_the_last_measured_line_past_the_largest_tree():
    """The shipped reference was measured up to 128 nodes; a budget of 512 is priced on the line
    through its last two sizes (not as cheap as 128 nodes), in the app and in `generate --profile` alike."""
    ref = cost_model.LatencyProfile.load(cost_model.REFERENCE_PROFILES / "reference-cpu-taps-code-10m.json")
    slope = (ref.verify_s[-1] - ref.verify_s[-2]) / (ref.sizes[-1] - ref.sizes[-2])
    assert ref.verify_time(512) == pytest.approx(ref.verify_s[-1] + slope * (512 - 128))
    assert ref.verify_time(64) == pytest.approx(np.interp(64, ref.sizes, ref.verify_s))
    times = ref.verify_time(np.arange(1025))
    assert np.all(np.diff(times) >= 0) and times[128] == pytest.approx(ref.verify_s[-1])
    flat = cost_model.LatencyProfile(sizes=[0, 8], verify_s=[0.02, 0.01], draft_s=0.0)   # never cheaper past the end
    assert flat.verify_time(100) == pytest.approx(0.01)


def test_runs_use_this_machine_s_profile_else_the_shipped_reference_of_the_very_same_pair(
        tiny_pair_f32, tmp_path, monkeypatch):
    """The first click works: with no saved profile, the shipped reference of this pair (same name and
    files) sizes the trees; once this machine's is saved, runs use it; a pair under the same name but
    other files, or another pair, gets none of them."""
    from taps.studio import page_profile, speed

    monkeypatch.setenv("TAPS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(cost_model, "REFERENCE_PROFILES", tmp_path)
    speed._SHIPPED.clear()
    shipped = replace(conftest.fixed_profile(tiny_pair_f32), source="measured on a test CPU", measured_at="then",
                      sizes=[0, 1, 8], verify_s=[0.01, 0.011, 0.02])
    shipped.save(tmp_path / "reference-cpu-tiny.json")
    replace(shipped, pair="another-pair").save(tmp_path / "reference-cpu-other.json")
    try:
        profile, profile_id, why = page_profile.default_profile(tiny_pair_f32, budget=32)
        assert profile_id == "reference-cpu-tiny" and not why and profile == shipped
        assert "measured on the cpu" in speed.profile_name(profile) and "measured profile" in \
            speed.profile_label(profile_id)
        assert "measured for another-pair" in speed.resolve_profile(tiny_pair_f32, "reference-cpu-other")[1]
        mine = conftest.fixed_profile(tiny_pair_f32)
        mine.save(profile_path(tiny_pair_f32))
        assert page_profile.default_profile(tiny_pair_f32, budget=32)[:2] == (mine, speed.MACHINE)
        profile_path(tiny_pair_f32).unlink()
        retrained = replace(tiny_pair_f32, fingerprint="other-files")
        profile, profile_id, why = page_profile.default_profile(retrained, budget=32)
        assert profile is None and profile_id == "" and "no reference profile is shipped for" in why
        assert "no shipped profile is called" in speed.resolve_profile(tiny_pair_f32, "reference-none")[1]
    finally:
        speed._SHIPPED.clear()


def test_the_shipped_reference_is_measured_for_the_shipped_pair():
    """The file the app falls back to carries the shipped pair's fingerprint (a retrained pair must
    ship a new one), and on this reference CPU verify grows with the tree."""
    from taps import load_pair
    from taps.profiles import shipped_reference

    ref = cost_model.LatencyProfile.load(cost_model.REFERENCE_PROFILES / "reference-cpu-taps-code-10m.json")
    name, found, why = shipped_reference(load_pair(None))
    assert name == "reference-cpu-taps-code-10m" and found == ref and not why
    assert ref.verify_time(64) / ref.verify_time(1) > 1.5
    # it carries the verify cost at a batch, so a race at a batch is offered it (a pair without one: a roofline)
    from taps.studio.page_profile import batch_offer

    assert ref.batch_verify and batch_offer(load_pair(None)) == (name, "the shipped reference profile")


def test_measuring_in_the_background_runs_once_reports_progress_and_failures(tiny_pair_f32, tmp_path, monkeypatch):
    """The sidebar's measurement runs in a thread: a second request joins the running one, its
    progress is readable meanwhile, the saved profile is what runs read next, and a failure ends
    the job with a message instead of an exception."""
    import threading

    from taps.studio import page_profile, speed

    monkeypatch.setenv("TAPS_CACHE", str(tmp_path))
    release, calls = threading.Event(), []

    def fake_measure(pair, max_nodes, progress):
        calls.append(max_nodes)
        progress(0.5, "verify: repeat 5 of 9")
        release.wait(10)
        conftest.fixed_profile(pair).save(profile_path(pair))

    monkeypatch.setattr(measure, "measure_and_save", fake_measure)
    job = speed.start_measuring(tiny_pair_f32)
    assert speed.start_measuring(tiny_pair_f32) is job and speed.measure_job(tiny_pair_f32) is job
    for _ in range(100):
        if job.share:
            break
        threading.Event().wait(0.05)
    assert (job.share, job.text, job.done) == (0.5, "verify: repeat 5 of 9", False)
    release.set()
    for _ in range(200):
        if job.done:
            break
        threading.Event().wait(0.05)
    assert job.done and not job.error and job.share == 1.0 and calls == [speed.profile_limit(tiny_pair_f32)]
    assert page_profile.default_profile(tiny_pair_f32)[1] == speed.MACHINE

    def broken(pair, max_nodes, progress):
        raise RuntimeError("no memory left")

    monkeypatch.setattr(measure, "measure_and_save", broken)
    again = speed.start_measuring(tiny_pair_f32)
    for _ in range(200):
        if again.done:
            break
        threading.Event().wait(0.05)
    assert again is not job and again.done and again.error == "RuntimeError: no memory left"


def test_a_policy_the_profile_did_not_time_is_priced_at_its_dearest_round_not_as_free():
    """The shipped reference profile was measured before DFlash2 existed: its rounds are priced at the
    most expensive timed round's overhead, never as the bare drafter pass (that flattered DFlash2's
    modelled speed-up); the oracle, a bound nobody times, stays at the drafter pass."""
    from taps.cost_model import LatencyProfile

    profile = LatencyProfile(sizes=[1, 2, 4], verify_s=[0.01, 0.011, 0.012], draft_s=0.001, device="cpu",
                             pair="p", context_length=64, ar_step_s=0.009,
                             overhead_s={"dflash": 0.002, "taps/online": 0.003})
    assert profile.overhead("dflash") == 0.002
    assert profile.overhead("dflash2") == 0.003
    assert profile.overhead("oracle") == 0.001 and profile.overhead(None) == 0.001
