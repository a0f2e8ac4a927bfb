"""Shared fixtures: tiny random-weight pairs written to a temporary folder and loaded back, and a
fixed latency profile so that no test measures one (TAPS's tree sizes never depend on timing)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tiny import build_tiny_pair  # noqa: E402

from taps import load_pair  # noqa: E402

# TAPS_TEST_DEVICE=cuda runs the engine tests on a GPU (scripts/gpu_check.sh sets it)
TEST_DEVICE = os.environ.get("TAPS_TEST_DEVICE", "cpu")


# A bare GPU server (scripts/gpu_check.sh) has the engine's packages but not the app's: the app,
# figure and export tests skip there, saying which package is missing.
def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


PNG_EXPORT = _has("plotly") and _has("kaleido") and Path("/usr/bin/chromium").exists()
needs_png_export = pytest.mark.skipif(not PNG_EXPORT, reason="PNG export needs plotly, kaleido and /usr/bin/chromium")


def fixed_profile(pair_name: str, device: str = "cpu"):
    """A made-up but plausible latency profile: verify grows linearly with the tree, the drafter
    costs half an AR step. Tests pass it to sessions so that no test measures one."""
    from taps.costs import LatencyProfile, default_sizes

    sizes = default_sizes(1024)
    return LatencyProfile(sizes=sizes, verify_s=[0.002 + 0.0001 * m for m in sizes], draft_s=0.001,
                          device=device, pair=pair_name, context_length=128)


@pytest.fixture(scope="session", autouse=True)
def taps_cache(tmp_path_factory):
    """Saved latency profiles live in a per-run folder (never the user's cache), holding fixed
    profiles for the test pairs and the shipped pair, so no session measures one."""
    from taps.costs import profile_path
    from taps.pair import default_pair_path

    folder = tmp_path_factory.mktemp("taps-cache")
    os.environ["TAPS_CACHE"] = str(folder)
    names = ["tiny-random", "q"]
    shipped = default_pair_path()
    if shipped is not None:
        names.append(load_pair_name(shipped))
    for name in names:
        for device in ("cpu", "cuda"):
            fixed_profile(name, device).save(profile_path(name, device))
    return folder


def load_pair_name(folder: Path) -> str:
    import json

    manifest = folder / "pair.json"
    return json.loads(manifest.read_text()).get("name", folder.name) if manifest.exists() else folder.name


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
