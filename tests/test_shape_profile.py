"""Shape profiles (taps/eval/shape_profile.py): a public target's shape timed with random weights,
saved in the app's profile schema; the roofline estimate's error against one (taps.roofline); the
what-if that offers them for any pair (taps.studio.speed); and scripts/gpu_check.sh --dry-run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from taps import cost_model, published, roofline
from taps.cost_model import LatencyProfile, default_sizes
from taps.eval import shape_profile
from taps.paths import PROFILES_DIR, ROOT
from taps.policies import AR
from taps.studio import page_profile, speed

CONTEXTS = (32, 96)
MAX_NODES = 32


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """The dry-run profiles of the Qwen3-4B shape at two contexts (tiny shapes, CPU, float32)."""
    out = tmp_path_factory.mktemp("shapes")
    code = shape_profile.main(["--model", "qwen3-4b", "--dry-run", "--contexts", ",".join(map(str, CONTEXTS)),
                               "--max-nodes", str(MAX_NODES), "--repeats", "1", "--out", str(out)])
    assert code == 0
    return out


def ids() -> list[str]:
    return [f"cpu-qwen3-4b-tiny-float32-ctx{c}" for c in CONTEXTS]


def test_the_dry_run_writes_loadable_profiles_in_the_app_schema(dry_run):
    data = roofline.load_data()
    target_config = shape_profile.shape_configs("qwen3-4b", dry_run=True)[0]
    for pid, context in zip(ids(), CONTEXTS):
        profile = LatencyProfile.load(dry_run / f"{pid}.json")
        assert profile.kind == shape_profile.KIND and profile.context_length == context
        assert profile.sizes == default_sizes(MAX_NODES) and profile.sizes == sorted(profile.sizes)
        assert all(b >= a for a, b in zip(profile.verify_s, profile.verify_s[1:]))      # the monotone fit
        assert len(profile.raw_verify_s) == len(profile.spread) == len(profile.sizes)
        assert min(profile.raw_verify_s) > 0 and profile.draft_s > 0 and profile.ar_step_s > 0
        assert profile.model == roofline.model_shape(target_config, "tiny Qwen3-4B")
        assert profile.model["layers"] == 2 and profile.model["heads"] * profile.model["head_dim"] != 80
        assert profile.dtype == "float32" and profile.device == "cpu" and profile.device_name.startswith("CPU")
        assert profile.key["shape_profile"] == pid and profile.key["dry_run"] and "DRY RUN" in profile.source
        # host costs: the data file's, on top of the measured drafter pass (as the roofline estimates)
        assert profile.overhead_s == {p: pytest.approx(profile.draft_s + c) for p, c in data["host_s"].items()
                                      if p != AR.name}
    summary = (dry_run / "summary.md").read_text()
    assert all(f"| {pid} |" in summary for pid in ids()) and "roofline estimate against" in summary
    samples = json.loads((dry_run / "measurements.json").read_text())
    assert set(samples) == set(ids()) and len(samples[ids()[0]]["verify(32)"]["samples_s"]) == 1


def test_shapes_are_the_published_ones_at_full_depth_and_made_on_the_device():
    """At the published shape on the meta device (no memory): the 8B target's and drafter's parameter
    counts, full depth, the published layer ids, mask id and block."""
    pair = shape_profile.build_pair("qwen3-8b", torch.device("meta"), torch.bfloat16)
    matrices = sum(p.numel() for name, p in pair.target.named_parameters() if "norm" not in name)
    assert matrices == roofline.load_data()["models"]["qwen3-8b"]["params"]      # the roofline counts matrices
    assert sum(p.numel() for p in pair.drafter.parameters()) == published.DRAFTER_8B_PARAMS
    assert pair.target.config.num_hidden_layers == 36 and pair.drafter.config.num_hidden_layers == 5
    assert pair.feature_layers == published.DFLASH_TARGET_LAYER_IDS
    assert pair.mask_token_id == published.QWEN3_MASK_TOKEN_ID and pair.drafter.block_size == 16
    assert {p.device.type for p in pair.target.parameters()} == {"meta"}
    assert {p.dtype for p in pair.drafter.parameters()} == {torch.bfloat16}
    assert pair.target.config._attn_implementation == "sdpa"
    target_small, drafter_small = shape_profile.shape_configs("qwen3-8b", dry_run=True)
    assert target_small.hidden_size == 4096 // 32
    assert target_small.num_attention_heads == 4 * target_small.num_key_value_heads
    assert drafter_small.dflash_config["mask_token_id"] < target_small.vocab_size


@pytest.mark.parametrize("size", [0, 1, 15, 16, 64, 256])
def test_trees_are_tree_shaped_and_no_deeper_than_a_block_allows(size):
    tree = shape_profile.tree_of(size, 100, torch.Generator().manual_seed(0))
    assert tree.size == size and tree.is_prefix_closed() and int(tree.depths.max()) <= 15
    if size > 15:
        assert len(tree.children()[0]) > 1                 # branches, not a chain
    _, positions, mask = tree.verify_inputs(10, 10, torch.float32, torch.device("cpu"))
    assert mask.shape == (1, 1, size + 1, size + 11) and positions[0, -1] == 10 + tree.depths[-1]
    hidden = mask[0, 0, :, 10:] < 0
    assert np.array_equal(~hidden.numpy(), tree.ancestor_matrix())


def test_bad_settings_get_a_message(tmp_path, capsys):
    for args, words in ((["--model", "qwen9"], "unknown --model qwen9"),
                        (["--contexts", "abc"], "--contexts must be whole numbers"),
                        (["--contexts", "40000", "--max-nodes", "1024"], "lower --contexts or --max-nodes"),
                        (["--max-nodes", "0"], "--max-nodes must be from 1"),
                        (["--device", "gpu"], "--device must be auto, cpu or cuda"),
                        (["--dry-run", "--copy-to", str(tmp_path)], "refused with --dry-run")):
        assert shape_profile.main([*args, "--out", str(tmp_path / "x")]) == 2
        assert words in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    oom = shape_profile._out_of_memory("qwen3-8b", "timing trees")
    assert "lower --max-nodes or --contexts" in str(oom) and "qwen3-4b" in str(oom)


# ---------------------------------------------------------------------------- the roofline against a measurement
def _h200_like(data: dict, scale: float) -> LatencyProfile:
    """A profile of the 8B shape at context 2048 whose times are `scale` x the H200 roofline's own."""
    shape, device = data["models"]["qwen3-8b"], data["devices"]["h200"]
    sizes = default_sizes(256)
    verify = roofline.pass_seconds(device, shape, np.asarray(sizes) + 1, 2048) * scale
    draft = float(roofline.pass_seconds(device, roofline.drafter_shape(data, shape)[0], 16, 2048)) * scale
    ar = (float(roofline.pass_seconds(device, shape, 1, 2048)) + data["host_s"][AR.name]) * scale
    return LatencyProfile(sizes=sizes, verify_s=list(verify), draft_s=draft, ar_step_s=ar, context_length=2048,
                          kind=shape_profile.KIND, device_name="NVIDIA H200", dtype="bfloat16",
                          model={k: shape[k] for k in (*roofline.MODEL_FIELDS, "name")})


def test_the_roofline_error_report_is_zero_on_its_own_figures_and_scales():
    data = roofline.load_data()
    assert roofline.device_for("NVIDIA H200", data) == "h200"
    assert roofline.device_for("NVIDIA GeForce RTX 4090", data) == "rtx4090"
    assert roofline.device_for("CPU, 2 threads", data) == "cpu" and roofline.device_for("Tesla T4", data) is None
    exact = roofline.estimate_error(_h200_like(data, 1.0), "h200", data=data)
    assert {r["what"] for r in exact} == {"verify", AR.name, "draft"} and len(exact) == len(default_sizes(256)) + 2
    assert max(abs(r["error"]) for r in exact) < 1e-9
    slow = roofline.estimate_error(_h200_like(data, 2.0), "h200", data=data)
    assert all(r["error"] == pytest.approx(-0.5) for r in slow)       # measured twice the estimate: -50%
    with pytest.raises(ValueError, match="target's shape"):
        roofline.estimate_error(LatencyProfile(sizes=[0], verify_s=[0.01], draft_s=0.0), "h200", data=data)
    with pytest.raises(ValueError, match="unknown roofline device 'tpu'"):
        roofline.estimate_error(_h200_like(data, 1.0), "tpu", data=data)


def test_the_error_report_runs_on_the_dry_run(dry_run):
    profile = LatencyProfile.load(dry_run / f"{ids()[1]}.json")
    device, rows = shape_profile.error_rows(profile)
    assert device == "cpu" and {r["size"] for r in rows if r["what"] == "verify"} == set(profile.sizes)
    draft = next(r for r in rows if r["what"] == "draft")       # priced from the dry run's own 1-layer drafter
    data = roofline.load_data()
    shape = roofline.model_shape(shape_profile.shape_configs("qwen3-4b", True)[1])
    assert draft["estimate_s"] == pytest.approx(float(roofline.pass_seconds(data["devices"]["cpu"], shape, 16,
                                                                            CONTEXTS[1])))
    assert all(np.isfinite(r["error"]) for r in rows)


# ---------------------------------------------------------------------------- the what-if
@pytest.fixture()
def shipped_shapes(dry_run, tmp_path, monkeypatch):
    """A profiles folder with the reference CPU profile, a dry-run shape profile, and one relabelled as
    an H200's 8B shape at context 2048 (what the GPU check writes)."""
    shutil.copy(PROFILES_DIR / "reference-cpu-taps-code-10m.json", tmp_path)
    shutil.copy(dry_run / f"{ids()[0]}.json", tmp_path)
    h200 = LatencyProfile.load(dry_run / f"{ids()[1]}.json")
    h200.device_name, h200.context_length, h200.model = "NVIDIA H200", 2048, {**h200.model, "name": "Qwen3-8B"}
    h200.save(tmp_path / "h200-qwen3-8b-bfloat16-ctx2048.json")
    monkeypatch.setattr(cost_model, "REFERENCE_PROFILES", tmp_path)
    speed._SHIPPED.clear()
    yield tmp_path
    speed._SHIPPED.clear()


def test_the_what_if_offers_measured_shapes_for_any_pair(shipped_shapes, tiny_pair):
    shapes = speed.shape_profiles()
    assert list(shapes) == [ids()[0], "h200-qwen3-8b-bfloat16-ctx2048"]       # not the reference CPU's
    label = speed.profile_label("h200-qwen3-8b-bfloat16-ctx2048", tiny_pair)
    assert label == ("costs of a Qwen3-8B-shaped target on an NVIDIA H200 (measured, random weights, context 2048); "
                     "acceptance of this pair")
    assert speed.shape_option(shapes["h200-qwen3-8b-bfloat16-ctx2048"]) == "NVIDIA H200 × Qwen3-8B, context 2048"
    profile, why = speed.resolve_profile(tiny_pair, "h200-qwen3-8b-bfloat16-ctx2048")
    assert why == "" and profile is shapes["h200-qwen3-8b-bfloat16-ctx2048"]     # for a pair it was not measured with
    assert speed.profile_name(profile) == label
    assert "costs of a tiny Qwen3-4B-shaped target on a CPU" in speed.profile_label(ids()[0])
    # the runs' default never becomes a shape profile
    assert page_profile.default_profile(tiny_pair)[1] not in shapes
    # this pair's rounds priced at the shape's costs: tau x t_AR / (overhead + verify(nodes))
    row = {"round_counts": [[3, 16], [5, 32]], "selector": "ddtree", "estimator": "marginal"}
    modelled = speed.modelled_of(row, profile)
    rounds = [profile.round_time("ddtree", 16), profile.round_time("ddtree", 32)]
    assert modelled["speedup"] == pytest.approx(8 * profile.ar_step_s / float(np.sum(rounds)))


def test_the_sidebar_offers_a_measured_shape(shipped_shapes, tmp_path, monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("TAPS_PAIR", "")
    monkeypatch.setenv("TAPS_CACHE", str(tmp_path / "cache"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    at.sidebar.radio(key="model_profile").set_value("measured shape").run()
    at.sidebar.selectbox(key="shape_profile").set_value("h200-qwen3-8b-bfloat16-ctx2048").run()
    text = "\n".join(c.value for c in at.sidebar.caption)
    assert ("Modelled figures use: costs of a Qwen3-8B-shaped target on an NVIDIA H200 (measured, random weights, "
            "context 2048); acceptance of this pair") in text
    assert "**Measured shape**, random weights: verify(64) / verify(1)" in text
    assert "h200-qwen3-8b-bfloat16-ctx2048 (measured for" not in text      # never listed as not offered


# ---------------------------------------------------------------------------- the script
@pytest.mark.slow
def test_gpu_check_dry_run_runs_to_the_end_on_the_cpu(tmp_path):
    before = sorted(p.name for p in PROFILES_DIR.iterdir())
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=600)
    tail = (done.stdout + done.stderr)[-3000:]
    assert done.returncode == 0, tail
    assert "gpu_check: all steps passed" in done.stdout, tail
    for step in ("shapes qwen3-8b", "shapes qwen3-4b", "profile", "bench", "tests"):
        assert f"=== {step}: ok" in done.stdout, step
    out = tmp_path / "out"
    shapes = sorted(p.stem for p in (out / "shapes").glob("*.json") if p.stem != "measurements")
    assert shapes == sorted(f"cpu-{m}-tiny-float32-ctx{c}" for m in ("qwen3-4b", "qwen3-8b") for c in (128, 512))
    assert (out / "bench" / "summary.md").exists() and (out / "gpu_check.log").exists()
    assert sorted(p.name for p in PROFILES_DIR.iterdir()) == before          # nothing written into assets/profiles
