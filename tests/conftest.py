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
