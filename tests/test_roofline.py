"""Roofline latency profiles (taps/roofline.py) from the one shared data file
(assets/profiles/roofline.json): the lesson's two regimes, the reference CPU's constants fitted to
its measured profile, the public shapes, and labels that never pass an estimate off as measured."""

from __future__ import annotations

import json

import numpy as np
import pytest

from taps import roofline
from taps.cost_model import REFERENCE_PROFILES, LatencyProfile

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
    for name, cost in profile.overhead_s.items():
        assert cost == pytest.approx(profile.draft_s + data["host_s"][name])


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
