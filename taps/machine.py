"""What this machine's PyTorch can do, and the portable paths the engine takes where it cannot.

Two fast paths of the CPU engine depend on the PyTorch build and the CPU:
- oneDNN's prepacked float32 linear (`taps.linear`): the target's (and drafter's) products of
  several rows. Without it (builds without oneDNN's linear operators, or `TAPS_ONEDNN=0`), every
  product runs on PyTorch's default `F.linear`: the same weights, the same tokens, slower verifies.
- the int8 drafter (`taps.fast_drafter`, dynamic quantization): needs a quantized engine (fbgemm or
  x86 on x86 CPUs, qnnpack on ARM). Without one (some ARM builds, or `TAPS_INT8=0`), the drafter of
  a float32 pair drafts in float32: the same target, the same tokens, a slower draft.

Each fallback is a `Fallback` with a sentence saying what runs instead; `fallbacks()` lists those in
force, `announce()` logs each once per process, and the app's sidebar ("About this machine") shows
them. `TAPS_ONEDNN=0` and `TAPS_INT8=0` force them on any machine (the tests do).
"""

from __future__ import annotations

import functools
import logging
import os
import platform
from dataclasses import dataclass

import torch

log = logging.getLogger("taps.machine")
if not log.handlers:
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("%(asctime)s taps.machine: %(message)s"))
    log.addHandler(_handler)
    log.setLevel(logging.INFO)
    log.propagate = False


def usable_cores() -> int:
    """The cores this process may run on (Linux: its CPU affinity; macOS and Windows, which have no
    `os.sched_getaffinity`: every core)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@functools.lru_cache(maxsize=1)
def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo, read once; elsewhere what `platform` knows)."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            return next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), name)
    except OSError:
        return name


def _off(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("0", "off", "no", "false")


@dataclass(frozen=True)
class Fallback:
    key: str          # "onednn" or "int8"
    text: str         # what runs instead, and why


def onednn_linear() -> tuple[bool, str]:
    """(whether oneDNN's prepacked linear is usable, why not)."""
    if _off("TAPS_ONEDNN"):
        return False, "TAPS_ONEDNN=0 is set"
    ops = getattr(torch.ops, "mkldnn", None)
    if not torch.backends.mkldnn.is_available():
        return False, "this PyTorch build has no oneDNN"
    if ops is None or not (hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise")):
        return False, "this PyTorch build lacks oneDNN's prepacked linear operators"
    return True, ""


def _engines() -> list[str]:
    return list(torch.backends.quantized.supported_engines)


def quantized_engine() -> str | None:
    """The quantized engine int8 dynamic quantization runs on here (None where there is none)."""
    engines = [e for e in _engines() if e != "none"]
    current = torch.backends.quantized.engine
    if current in engines:
        return current
    return engines[0] if engines else None


@functools.lru_cache(maxsize=None)
def _int8_works(engine: str) -> str:
    """'' when a small int8 dynamic linear runs on `engine` and agrees with float32, else why not."""
    import warnings

    from torch.ao.quantization import quantize_dynamic

    try:
        with torch.random.fork_rng(devices=[]):      # the probe's random weights leave the global RNG as it was
            linear = torch.nn.Linear(16, 8).eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.backends.quantized.engine = engine
            packed = quantize_dynamic(torch.nn.Sequential(linear), {torch.nn.Linear}, dtype=torch.qint8)[0]
            x = torch.randn(3, 16, generator=torch.Generator().manual_seed(0))
            got = packed(x)
        if not torch.allclose(got, linear(x), atol=0.1, rtol=0.1):
            return f"int8 linear on {engine} disagrees with float32"
    except Exception as exc:  # noqa: BLE001 - any failure means the int8 path is not usable here
        return f"int8 linear on {engine} fails: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    return ""


def int8_drafting() -> tuple[bool, str]:
    """(whether the int8 drafter can run here, why not)."""
    if _off("TAPS_INT8"):
        return False, "TAPS_INT8=0 is set"
    engine = quantized_engine()
    if engine is None:
        return False, "this PyTorch build has no quantized engine"
    problem = _int8_works(engine)
    return (not problem), problem


def fallbacks() -> list[Fallback]:
    """The portable paths in force on this machine (an empty list where both fast paths run)."""
    found = []
    ok, why = onednn_linear()
    if not ok:
        found.append(Fallback("onednn", f"oneDNN's packed linear is unavailable ({why}): the target's products of "
                                        "several rows run on PyTorch's default kernels (same tokens, slower verifies)"))
    ok, why = int8_drafting()
    if not ok:
        found.append(Fallback("int8", f"the int8 drafter is unavailable ({why}): a float32 pair drafts in float32 "
                                      "(same tokens, a slower draft)"))
    return found


_announced: set[str] = set()


def announce(keys: tuple[str, ...] | None = None) -> list[Fallback]:
    """Log each fallback in force (of `keys`, or all) once per process; returns those in force."""
    found = [f for f in fallbacks() if keys is None or f.key in keys]
    for item in found:
        if item.text not in _announced:
            _announced.add(item.text)
            log.warning("portable path: %s", item.text)
    return found


def about() -> dict[str, str]:
    """This machine in a few lines: OS, CPU, the ISA PyTorch's kernels run at, threads, PyTorch."""
    return {"OS": f"{platform.system()} {platform.release()} ({platform.machine()})", "CPU": cpu_name(),
            "PyTorch kernels": torch.backends.cpu.get_cpu_capability(),
            "threads": str(torch.get_num_threads()), "PyTorch": torch.__version__}
