"""Shared fixtures: tiny random-weight pairs written to a temporary folder and loaded back."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# saved latency profiles live in a per-run folder, never the user's cache
os.environ["TAPS_CACHE"] = tempfile.mkdtemp(prefix="taps-cache-")

from tiny import build_tiny_pair  # noqa: E402

# A bare GPU server (scripts/gpu_check.sh) has the engine's packages but not the app's: the app,
# figure and export tests skip there, saying which package is missing.
def _has(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is not None


PNG_EXPORT = _has("plotly") and _has("kaleido") and Path("/usr/bin/chromium").exists()
needs_png_export = pytest.mark.skipif(not PNG_EXPORT, reason="PNG export needs plotly, kaleido and /usr/bin/chromium")

from taps import load_pair  # noqa: E402


@pytest.fixture(scope="session")
def tiny_pair_dir(tmp_path_factory) -> Path:
    return build_tiny_pair(tmp_path_factory.mktemp("pair") / "tiny")


# TAPS_TEST_DEVICE=cuda runs the engine tests on a GPU (scripts/gpu_check.sh sets it)
TEST_DEVICE = os.environ.get("TAPS_TEST_DEVICE", "cpu")


@pytest.fixture(scope="session")
def tiny_pair(tiny_pair_dir):
    """Float64 so that tree and sequential forwards agree far below any argmax gap."""
    return load_pair(tiny_pair_dir, device=TEST_DEVICE, dtype="float64")


@pytest.fixture(scope="session")
def tiny_pair_f32(tiny_pair_dir):
    return load_pair(tiny_pair_dir, device=TEST_DEVICE, dtype="float32")
