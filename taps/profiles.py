"""Where latency profiles are saved and which one a session may use: one file per pair contents,
device, precision and thread count (`profile_key`), under $TAPS_CACHE (default ~/.cache/taps).
A profile that does not match, or cannot be read, is never used. The engine only reads saved
profiles (`required_profile`); measuring one is `taps.eval.measure` (`python -m taps.profile`,
the app's sidebar, or the CLI and bench when none is saved).
"""

from __future__ import annotations

from pathlib import Path

import torch

from .cost_model import PROFILE_FORMAT, LatencyProfile, reference_profiles
from .linear import kernel_name
from .paths import cache_root

REFERENCE_PREFIX = "reference-"      # shipped measured profiles a pair may run on: reference-<device>-<pair>.json


def profile_key(pair) -> dict:
    """Everything that changes a profile: the format, the pair's contents, device, precision and
    thread count, the drafter's inference precision, the selection code (always numba's compiled
    kernels now; the key keeps the entry so profiles saved before still match), and which GEMM the
    target's linear layers run (`taps.linear`)."""
    device = torch.device(pair.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"format": PROFILE_FORMAT, "pair": pair.name, "fingerprint": getattr(pair, "fingerprint", ""),
            "device": device.type, "device_name": name, "dtype": str(pair.dtype).replace("torch.", ""),
            "drafter_precision": getattr(pair, "drafter_precision", "same"),
            "threads": torch.get_num_threads() if device.type == "cpu" else 0,
            "selection": "numba",
            "target_gemm": kernel_name(pair.target) if isinstance(pair.target, torch.nn.Module) else "default"}


def profile_path(pair) -> Path:
    """Where a pair's profile for this device, precision and thread count is saved ($TAPS_CACHE,
    default ~/.cache/taps)."""
    key = profile_key(pair)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in pair.name)
    tag = f"{key['device']}-{key['dtype']}-{key['drafter_precision']}-t{key['threads']}-{key['fingerprint'][:10]}"
    return cache_root() / "profiles" / f"{safe}-{tag}.json"


def saved_profile(pair, max_nodes: int = 0) -> tuple[LatencyProfile | None, str]:
    """The saved profile of this pair here, never measured: (profile, "") or (None, why not)."""
    path = profile_path(pair)
    if not path.exists():
        return None, f"no latency profile saved for {pair.name} on this device ({path.name})"
    try:
        profile = LatencyProfile.load(path)
    except (ValueError, OSError, TypeError) as exc:
        return None, f"the saved latency profile {path} cannot be read ({exc})"
    expected = profile_key(pair)
    if profile.key != expected:
        differ = sorted(k for k in expected if profile.key.get(k) != expected[k])
        return None, f"the saved latency profile {path.name} was measured for another setting ({', '.join(differ)})"
    if max(profile.sizes) < max_nodes:
        return None, f"the saved latency profile covers trees up to {max(profile.sizes)} nodes, not {max_nodes}"
    return profile, ""


def required_profile(pair, max_nodes: int) -> LatencyProfile:
    """The saved profile of this pair here; a ValueError saying how to measure one when none fits.
    (Sessions that size trees from a profile and were given none read it here.)"""
    profile, why = saved_profile(pair, max_nodes)
    if profile is None:
        raise ValueError(f"{why}: measure one with `python -m taps.profile --max-nodes {max(max_nodes, 64)}` "
                         f"(or the app's sidebar), or pass a profile")
    return profile


def same_pair(profile: LatencyProfile, pair) -> bool:
    """Whether `profile` was measured for this very pair: the same name, and the same files when the
    profile's key names them (a retrained pair under the same name is another pair)."""
    if profile.pair != pair.name:
        return False
    measured_for = profile.key.get("fingerprint", "")
    return not measured_for or not getattr(pair, "fingerprint", "") or measured_for == pair.fingerprint


def shipped_references(pair, shipped: dict[str, LatencyProfile] | None = None) -> dict[str, LatencyProfile]:
    """The shipped measured profiles (assets/profiles/reference-*.json) of this very pair, by id;
    `shipped`: the shipped profiles by id when the caller has read them already."""
    shipped = reference_profiles(pair.name) if shipped is None else shipped
    return {name: profile for name, profile in shipped.items()
            if name.startswith(REFERENCE_PREFIX) and profile.kind == "measured" and same_pair(profile, pair)}


def shipped_reference(pair, shipped: dict[str, LatencyProfile] | None = None) -> tuple[str, LatencyProfile | None, str]:
    """The shipped reference profile of this pair, for runs before this machine's own is measured:
    (id, profile, "") or ("", None, why not). `shipped` as in `shipped_references`."""
    shipped = reference_profiles(pair.name) if shipped is None else shipped
    found = shipped_references(pair, shipped)
    if found:
        name = sorted(found)[0]
        return name, found[name], ""
    others = [name for name, p in shipped.items() if name.startswith(REFERENCE_PREFIX) and p.pair == pair.name]
    if others:
        return "", None, (f"no reference profile is shipped for these files of {pair.name}: "
                          f"{', '.join(others)} {'were' if len(others) > 1 else 'was'} measured for other files "
                          "under that name")
    return "", None, f"no reference profile is shipped for {pair.name}"
