"""Roofline latency profiles (taps/roofline.py) from the one shared data file
(assets/profiles/roofline.json): the lesson's two regimes, the reference CPU's constants fitted to
its measured profile, the public shapes, and labels that never pass an estimate off as measured."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taps import roofline
from taps.cost_model import REFERENCE_PROFILES, LatencyProfile
from taps.policies import AR

REFERENCE = REFERENCE_PROFILES / "reference-cpu-taps-code-10m.json"


@pytest.fixture(scope="module")
def data() -> dict:
    return roofline.load_data()


@pytest.fixture(scope="module")
def reference() -> LatencyProfile:
    return LatencyProfile.load(REFERENCE)


def test_on_an_h200_an_8b_target_verifies_64_nodes_for_about_the_cost_of_one(data):
    profile = roofline.roofline_profile("h200", "qwen3-8b", data=data)
    assert profile.kind == "roofline" and profile.model["name"] == "Qwen3-8B"
    assert roofline.ratio(profile, 64, 1) < 1.2
    # memory-bound there: the weights' bytes over the bandwidth, not the FLOPs, set verify(1)
    device, shape = data["devices"]["h200"], data["models"]["qwen3-8b"]
    flops, moved = roofline.verify_cost(shape, 2, data["context_length"], device["bytes_per_param"])
    assert moved / device["bandwidth"] > 10 * float(flops) / device["peak_flops"]


def test_on_the_reference_cpu_verification_grows_with_the_tree(reference):
    assert reference.kind == "measured"
    assert reference.verify_time(64) / reference.verify_time(1) > 1.5


def test_the_cpu_constants_are_fitted_to_the_measured_profile_and_reproduce_its_shape(data, reference):
    """The data file's CPU constants are what fit_device finds on the shipped measured profile (not
    typed in), and the formula with them follows the measured curve: flat for small trees, then
    linear."""
    cpu = data["devices"]["cpu"]
    assert cpu["fitted_from"] == REFERENCE.stem and "fitted" in cpu["source"]
    fitted = roofline.fit_device(reference, cpu["bytes_per_param"])
    for name in ("peak_flops", "bandwidth", "launch_s"):
        assert cpu[name] == pytest.approx(fitted[name], rel=1e-3), name
    estimate = roofline.pass_seconds(cpu, reference.model, np.asarray(reference.sizes) + 1, reference.context_length)
    for size in (1, 16, 64, 128):
        measured = reference.verify_time(size)
        assert estimate[reference.sizes.index(size)] == pytest.approx(measured, rel=0.25), size
    # the two regimes: small trees cost about one token, the last doubling of the tree costs about double
    assert estimate[reference.sizes.index(8)] / estimate[reference.sizes.index(1)] < 1.1
    tail = (estimate[-1] - estimate[reference.sizes.index(64)]) / (reference.verify_s[-1] - reference.verify_time(64))
    assert 0.75 < tail < 1.25


def test_a_profile_without_the_two_regimes_cannot_be_fitted(reference):
    flat = LatencyProfile(sizes=[0, 1, 2, 4], verify_s=[0.01] * 4, draft_s=0.0, model=reference.model)
    with pytest.raises(ValueError, match="no flat-then-linear shape"):
        roofline.fit_device(flat)
    with pytest.raises(ValueError, match="target's shape"):
        roofline.fit_device(LatencyProfile(sizes=[0, 1], verify_s=[0.01, 0.02], draft_s=0.0))


def test_the_data_file_names_a_source_for_every_constant_and_the_public_qwen3_shapes(data):
    for name, device in data["devices"].items():
        assert device["source"] and device["peak_flops"] > 0 and device["bandwidth"] > 0, name
        if name != "cpu":
            assert "assumed" in device["source"]          # the launch cost is no datasheet figure
    assert set(data["models"]) == {"qwen3-4b", "qwen3-8b", "qwen3-32b"}
    billions = {name: shape["params"] / 1e9 for name, shape in data["models"].items()}
    assert billions["qwen3-4b"] == pytest.approx(4.0, abs=0.1) and billions["qwen3-8b"] == pytest.approx(8.2, abs=0.1)
    assert billions["qwen3-32b"] == pytest.approx(32.8, abs=0.2)
    for shape in data["models"].values():                  # params is the count model_shape gives, not typed in
        config = {"hidden_size": shape["hidden"], "num_attention_heads": shape["heads"],
                  "num_key_value_heads": shape["kv_heads"], "head_dim": shape["head_dim"],
                  "num_hidden_layers": shape["layers"], "intermediate_size": shape["intermediate"],
                  "vocab_size": shape["vocab"], "tie_word_embeddings": shape["tied"]}
        assert roofline.model_shape(config)["params"] == shape["params"]


def test_host_costs_are_the_reference_profile_s_round_costs_less_its_drafter_pass(data, reference):
    for name, cost in data["host_s"].items():
        if name in reference.overhead_s:
            assert cost == pytest.approx(reference.overhead_s[name] - reference.draft_s, rel=1e-3)
    profile = roofline.roofline_profile("h200", "qwen3-4b", data=data)
    assert profile.ar_step_s == pytest.approx(profile.verify_s[0] + data["host_s"]["ar"])
    timed = {name: cost for name, cost in data["host_s"].items() if name != "ar"}
    for name, cost in profile.overhead_s.items():    # the oracle, never timed there, pays the cheapest round's
        assert cost == pytest.approx(profile.draft_s + timed.get(name, min(timed.values())))
    assert "oracle" in profile.overhead_s and set(timed) < set(profile.overhead_s)


def test_the_ar_round_s_host_cost_is_its_stages_besides_verify_as_timed_on_the_reference_cpu(data):
    """host_s["ar"] is timed as the rounds' are (a round less its verify stage): the AR rows' pool +
    estimate + select + commit in the stage table the data file names, the middle of its runs."""
    from taps.paths import ROOT

    assert "results/gpu-path-cpu/stage-table.md" in data["host_source"]
    rows = [line.split("|")[1:-1] for line in (ROOT / "results/gpu-path-cpu/stage-table.md").read_text().splitlines()]
    header = [cell.strip() for cell in rows[0]]
    after = [dict(zip(header, (cell.strip() for cell in row))) for row in rows[2:]]
    stages = sorted(sum(float(row[k]) for k in ("pool", "estimate", "select", "commit"))
                    for row in after if row["run"] == "ar" and row["side"].startswith("after"))
    assert len(stages) == 3 and data["host_s"]["ar"] == pytest.approx(stages[1] / 1000)
    assert all(cost > data["host_s"]["ar"] for name, cost in data["host_s"].items() if name != "ar")


def test_the_loaded_pair_s_own_shape_and_drafter(tiny_pair, data):
    profile_id = roofline.profile_id("h200", tiny_pair.name)
    assert profile_id in roofline.roofline_ids(tiny_pair, data)
    profile = roofline.roofline_profile(*roofline.split_id(profile_id, data), pair=tiny_pair, max_nodes=64, data=data)
    assert profile.model["layers"] == tiny_pair.target.config.num_hidden_layers and max(profile.sizes) == 64
    drafter, block = roofline.drafter_shape(data, profile.model, tiny_pair.drafter.config)
    assert drafter["layers"] == tiny_pair.drafter.config.num_hidden_layers and block == tiny_pair.drafter.block_size
    assert "loaded pair's shape" in roofline.label("h200", tiny_pair.name, data)


def test_bad_ids_and_files_get_a_message(tmp_path, data):
    with pytest.raises(ValueError, match="devices are cpu, h200"):
        roofline.split_id("roofline-tpu-qwen3-8b", data)
    with pytest.raises(ValueError, match="not a roofline profile id"):
        roofline.split_id("machine", data)
    with pytest.raises(ValueError, match="unknown roofline model 'qwen9'"):
        roofline.roofline_profile("h200", "qwen9", data=data)
    (tmp_path / "r.json").write_text(json.dumps({**data, "devices": {"x": {"name": "X"}}}))
    with pytest.raises(ValueError, match="needs peak_flops"):
        roofline.load_data(tmp_path / "r.json")
    with pytest.raises(ValueError, match="cannot be read"):
        roofline.load_data(tmp_path / "missing.json")


def test_estimates_are_labelled_as_such_wherever_they_are_named(data):
    from taps.studio.speed import profile_label, profile_name

    profile = roofline.roofline_profile("rtx4090", "qwen3-32b", data=data)
    assert profile_name(profile).startswith("roofline estimate") and "not measured" in profile_name(profile)
    assert profile_label("roofline-rtx4090-qwen3-32b") == "roofline estimate: NVIDIA GeForce RTX 4090 × Qwen3-32B"
    assert "do not fit" in profile.source                   # 64 GB of weights on a 24 GB card: said


def test_the_lesson_a_gpu_takes_bigger_trees_than_this_cpu(data, reference):
    """The same reaches, priced two ways: on the reference CPU the best tree stops early; on an H200
    with an 8B target every node up to the budget pays."""
    reach = np.array([0.9 * 0.93 ** i for i in range(64)])
    gpu = roofline.roofline_profile("h200", "qwen3-8b", data=data)
    assert gpu.best_size(reach, 64, "ddtree") == 64
    assert reference.best_size(reach, 64, "ddtree") < 32


# ---------------------------------------------------------------------------- a round never costs less than an AR step
def round_labels(profile: LatencyProfile) -> list[str]:
    """Every run label a race or a sweep can price on `profile`: each registered policy but AR (TAPS
    with each estimator; the oracle too), whether or not the profile lists it, and those it lists."""
    from taps.config import ESTIMATORS
    from taps.policies import REGISTRY

    labels = {label for entry in REGISTRY.values() if not entry.baseline
              for label in ([entry.run_label(e) for e in ESTIMATORS] if entry.uses_estimator else [entry.run_label()])}
    return sorted(labels | set(profile.overhead_s))


def check_round_floor(profile: LatencyProfile, what: str) -> None:
    """The design's invariant on one profile: verify(N) is non-decreasing in N (past the largest
    size too, where it is extrapolated) and every round, draft + pool + select + verify(N) for
    N >= 1 nodes, costs at least one AR step, for every policy's overhead."""
    sizes = np.arange(0, 2 * max(profile.sizes) + 2)
    verify = np.asarray(profile.verify_time(sizes), dtype=np.float64)
    assert np.all(np.diff(verify) >= 0), f"{what}: verify(N) decreases at N = {int(np.argmin(np.diff(verify))) + 1}"
    ar = float(profile.round_time(AR.run_label(), 0))
    assert ar > 0, what
    for label in round_labels(profile):
        rounds = profile.round_time(label, sizes[1:])
        worst = int(np.argmin(rounds))
        assert rounds[worst] >= ar * (1 - 1e-12), (
            f"{what}: a {label} round of {worst + 1} nodes is priced {1e3 * rounds[worst]:.3f} ms, below the AR "
            f"step's {1e3 * ar:.3f} ms (draft {1e3 * profile.draft_s:.3f} ms, overhead "
            f"{1e3 * profile.overhead(label):.3f} ms, verify {1e3 * float(profile.verify_time(worst + 1)):.3f} ms)")


def test_every_roofline_round_costs_at_least_one_ar_step_and_verify_never_falls(data, tiny_pair, shipped_pair):
    """Every roofline device x every data-file shape and the loaded pairs' own (the shipped pair, the
    tiny test pair): the AR step's terms (weights, KV cache, launches, head, host costs) are a
    round's too, and the round adds its draft pass and its own host work on top."""
    checked = 0
    for pair in (shipped_pair, tiny_pair):
        for profile_id in roofline.roofline_ids(pair, data):
            device, model = roofline.split_id(profile_id, data)
            profile = roofline.roofline_profile(device, model, pair=pair if model == pair.name else None, data=data)
            check_round_floor(profile, profile_id)
            checked += 1
    assert checked == 2 * len(data["devices"]) * (len(data["models"]) + 1)


def test_every_shipped_profile_prices_a_round_at_least_one_ar_step():
    """The same invariant on every profile shipped under assets/profiles (roofline ones included,
    should one be saved there)."""
    from taps.cost_model import reference_profiles

    shipped = reference_profiles()
    assert REFERENCE.stem in shipped
    for name, profile in shipped.items():
        check_round_floor(profile, name)


def test_the_h200_8b_round_costs_more_than_its_ar_step_by_the_draft_and_the_round_s_extra_host_work(data):
    """Issue 51's figures: the AR step is verify(0) plus the AR round's own host work (its stages
    besides verify), not the reference CPU's AR round less its verify curve, which carried the
    CPU's forward drift (2.4 ms there) into every device's AR step and priced a DFlash round below it."""
    profile = roofline.roofline_profile("h200", "qwen3-8b", data=data)
    host = data["host_s"]
    assert profile.ar_step_s == pytest.approx(profile.verify_s[0] + host[AR.name])
    for label in ("dflash", "ddtree"):
        gap = profile.round_time(label, 16) - profile.ar_step_s
        extra = profile.verify_time(16) - profile.verify_time(0)
        assert gap == pytest.approx(profile.draft_s + host[label] - host[AR.name] + extra)
        assert gap > profile.draft_s


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(peak=st.floats(1e9, 1e16), bandwidth=st.floats(1e9, 1e13), launch=st.floats(0.0, 1e-3),
       layers=st.integers(1, 96), hidden=st.sampled_from([64, 256, 1024, 4096, 8192]),
       heads=st.sampled_from([1, 4, 32, 64]), kv_ratio=st.sampled_from([1, 2, 8]),
       intermediate=st.integers(64, 32768), vocab=st.integers(256, 262144), context=st.integers(0, 32768),
       drafter_layers=st.integers(0, 8), block=st.integers(1, 32),
       ar_host=st.floats(0.0, 5e-3), extras=st.lists(st.floats(0.0, 5e-3), min_size=1, max_size=5))
def test_the_roofline_formula_keeps_the_invariant_on_any_device_and_shape(data, peak, bandwidth, launch, layers, hidden,
                                                                         heads, kv_ratio, intermediate, vocab, context,
                                                                         drafter_layers, block, ar_host, extras):
    """Any constants a data file may hold (load_data's checks passed): the invariant follows from the
    formula, not from the shipped numbers."""
    shape = {"name": "x", "params": 0, "layers": layers, "hidden": hidden, "heads": heads,
             "kv_heads": max(heads // kv_ratio, 1), "head_dim": max(hidden // heads, 1), "intermediate": intermediate,
             "vocab": vocab, "tied": False}
    host = {AR.name: ar_host, **{f"p{i}": ar_host + extra for i, extra in enumerate(extras)}}
    trial = {**data, "context_length": context, "models": {"x": shape}, "host_s": host,
             "drafter": {**data["drafter"], "layers": drafter_layers, "block_size": block},
             "devices": {"d": {"name": "D", "peak_flops": peak, "bandwidth": bandwidth, "launch_s": launch,
                               "bytes_per_param": 2, "source": "trial"}}}
    roofline.check_data(trial)
    check_round_floor(roofline.roofline_profile("d", "x", max_nodes=256, data=trial), "trial")


def test_a_data_file_pricing_a_round_below_an_ar_step_is_refused(tmp_path, data):
    for host in ({**data["host_s"], "dflash": data["host_s"][AR.name] / 2}, {**data["host_s"], AR.name: -1e-3}):
        (tmp_path / "r.json").write_text(json.dumps({**data, "host_s": host}))
        with pytest.raises(ValueError, match="host"):
            roofline.load_data(tmp_path / "r.json")


# ---------------------------------------------------------------------------- the sidebar, on the shipped pair
@pytest.fixture()
def shipped_app(tmp_path, monkeypatch):
    """The app on the shipped pair with an empty cache: no profile of this machine is saved."""
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from taps.paths import ROOT

    monkeypatch.setenv("TAPS_PAIR", "")
    monkeypatch.setenv("TAPS_CACHE", str(tmp_path))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def captions(at) -> str:
    return "\n".join(c.value for c in at.sidebar.caption)


def test_the_sidebar_names_the_reference_and_offers_roofline_what_ifs(shipped_app, reference):
    at = shipped_app
    assert "**In use:** the 2-core reference CPU's measured profile" in captions(at)
    assert "until this machine's own are measured; about a minute" in captions(at)
    assert not at.sidebar.error and not at.sidebar.warning
    assert "nvidia-h200-bfloat16 (measured for taps-stdlib-6m" in captions(at) and "roofline" in captions(at)
    at.sidebar.radio(key="model_profile").set_value("roofline").run()
    at.sidebar.selectbox(key="roofline_device").set_value("h200").run()
    at.sidebar.selectbox(key="roofline_model").set_value("qwen3-8b").run()
    text = captions(at)
    assert "Modelled figures use: roofline estimate: NVIDIA H200 SXM × Qwen3-8B (not measured)" in text
    measured = reference.verify_time(64) / reference.verify_time(1)          # 1.80 on the shipped reference
    assert f"verify(64) / verify(1) = 1.00 there; {measured:.2f} on the 2-core reference CPU's measured profile" in text
    assert "**In use:** the 2-core reference CPU's measured profile" in text     # runs' trees: still measured


def test_a_link_s_profile_sizes_the_trees_and_a_stale_one_says_why(shipped_app):
    at = shipped_app
    at.session_state["_profile_override"] = "roofline-rtx4090-qwen3-4b"
    at.run()
    assert "**In use:** roofline estimate: NVIDIA GeForce RTX 4090 × Qwen3-4B" in captions(at)
    at.session_state["_profile_override"] = "nvidia-h200-bfloat16"
    at.run()
    text = captions(at)
    assert "The link's profile nvidia-h200-bfloat16 does not apply here (nvidia-h200-bfloat16 was measured for " \
           "taps-stdlib-6m, not for taps-code-10m)" in text and "**In use:** the 2-core reference CPU's" in text
    at.sidebar.button(key="profile_default").click().run()
    assert at.session_state["_profile_override"] is None and not at.exception
