"""The cost model: a latency profile and the tree size it gives TAPS and DDTree. Pure numpy, no torch.

A profile holds, for one pair on one device (precision, thread count), what a round costs:
- `verify_s[i]`: the target's tree forward for `sizes[i]` draft nodes after a cached context,
  the median of interleaved repeats, fitted to be non-decreasing in the tree size;
- `overhead_s[policy]`: everything else a round of that policy costs (drafter pass and lattice,
  drafter cache extension, pool, estimate, select, commit, the round record), the median over
  the rounds of a real decode;
- `ar_step_s`: one autoregressive round;
- `batch_verify` (optional): the verify forward at a batch of requests (`taps.batch_cost`).

`LatencyProfile.best_size` picks the tree size m that maximises expected tokens per second,
    (1 + sum of the m largest reaches) / (overhead_s[policy] + verify_s(m)),
in one place: `kernels.best_size` (the numpy twin in tests/oracles.py checks it). Decisions read
only a saved profile: the same profile and inputs give the same trees on an idle machine and a
busy one. Where profiles are saved and how they are keyed: `taps.profiles`; how they are measured:
`taps.eval.measure`.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import kernels
from .paths import PROFILES_DIR
from .policies import AR, label_policy

PROFILE_FORMAT = 3
KINDS = ("measured", "roofline", "measured-shape")


@dataclass
class LatencyProfile:
    sizes: list[int]                 # draft nodes verified (root not counted), ascending, starting at 0 or 1
    verify_s: list[float]            # seconds of the target's tree forward at each size (monotone fit)
    draft_s: float                   # seconds of one drafter pass (embedding, layers, lm_head)
    device: str = "cpu"
    pair: str = ""
    context_length: int = 0
    overhead_s: dict[str, float] = field(default_factory=dict)   # per policy label, e.g. "taps/learned"
    ar_step_s: float = 0.0           # one autoregressive round (verify of the root alone, commit, record)
    raw_verify_s: list[float] = field(default_factory=list)      # medians before the monotone fit
    spread: list[float] = field(default_factory=list)            # per size: interquartile range / median
    key: dict = field(default_factory=dict)                      # what it was measured for (profile_key)
    measured_at: str = ""
    repeats: int = 0
    source: str = "measured"         # measured | published | fixed (tests), or a sentence naming where it came from
    kind: str = "measured"           # measured (timed on a device) | roofline (estimated from shapes, taps.roofline)
                                     # | measured-shape (a public shape, random weights: taps.eval.shape_profile)
    device_name: str = ""            # the device in words ("NVIDIA H200", "2-core reference CPU")
    dtype: str = ""                  # the precision the target ran at ("float32", "bfloat16")
    model: dict = field(default_factory=dict)   # the target's shape (taps.roofline.MODEL_FIELDS: params, layers, ...)
    batch_verify: dict = field(default_factory=dict)   # verify at a batch (taps.batch_cost.of_profile), when measured

    def verify_time(self, size: int | np.ndarray) -> np.ndarray:
        """Seconds of verify at `size` nodes: interpolated between measured sizes; past the largest,
        on the line through the last two (a profile measured up to 128 nodes still prices 512)."""
        times = np.interp(size, self.sizes, self.verify_s)
        last = self.sizes[-1]
        if len(self.sizes) < 2 or np.max(size) <= last:
            return times
        slope = max(0.0, (self.verify_s[-1] - self.verify_s[-2]) / max(last - self.sizes[-2], 1))
        beyond = self.verify_s[-1] + slope * (np.asarray(size, dtype=np.float64) - last)
        out = np.where(np.asarray(size) > last, beyond, times)
        return float(out) if np.ndim(out) == 0 else out

    def overhead(self, policy: str | None = None) -> float:
        """Per-round seconds besides verify for `policy` (a run label such as "ddtree" or "taps/online").
        A policy this profile did not time is priced at its most expensive timed round (never as the
        bare drafter pass: a profile measured before DFlash2 existed would price its rounds as free
        of their own work); the drafter pass alone for no policy, the oracle (a bound, never timed)
        and a profile that timed none."""
        if policy is not None and policy in self.overhead_s:
            return float(self.overhead_s[policy])
        if policy is not None and self.overhead_s and not _hindsight(policy):
            return max(float(self.draft_s), *(float(v) for v in self.overhead_s.values()))
        return float(self.draft_s)

    def round_time(self, policy: str | None, size: int | np.ndarray) -> np.ndarray:
        if policy == AR.run_label():
            return np.full(np.shape(size), self.ar_step_s or float(self.verify_time(0)))
        return self.overhead(policy) + self.verify_time(size)

    def best_size(self, reach_desc: np.ndarray, max_size: int, policy: str | None = None) -> int:
        """The m <= max_size maximising (1 + sum of the top-m reach) / (overhead + t_verify(m))."""
        n = min(max_size, len(reach_desc))
        return int(kernels.best_size(np.asarray(reach_desc, dtype=np.float64), self.round_times(policy, n)))

    def round_times(self, policy: str | None, n: int) -> np.ndarray:
        """round_time(policy, 0..n): a round's size choice is then one pass of `kernels.best_size`
        over them. Computed each time (a few microseconds), never kept on the profile: sessions
        share one profile and only read it."""
        return self.round_time(policy, np.arange(n + 1))

    def device_label(self) -> str:
        """The device in words (files written before the shared schema name it in their key)."""
        return self.device_name or str(self.key.get("device_name") or self.device)

    def describe(self) -> str:
        """One line: what, where, when."""
        threads = self.key.get("threads")
        where = f"{self.device}" + (f", {threads} thread{'s' if threads != 1 else ''}" if threads else "")
        when = f", measured {self.measured_at}" if self.measured_at else ""
        return f"{self.source} latency profile of {self.pair} on {where}{when}"

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path) -> "LatencyProfile":
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(raw, dict) or not {"sizes", "verify_s", "draft_s"} <= raw.keys():
            raise ValueError(f"{path} is not a latency profile (needs sizes, verify_s, draft_s)")
        known = set(cls.__dataclass_fields__)
        profile = cls(**{k: v for k, v in raw.items() if k in known})
        if len(profile.sizes) != len(profile.verify_s) or not profile.sizes:
            raise ValueError(f"{path}: sizes and verify_s must be lists of the same, non-zero length")
        if profile.kind not in KINDS:
            raise ValueError(f"{path}: kind must be one of {', '.join(KINDS)}, got {profile.kind!r}")
        return profile


def default_sizes(max_nodes: int) -> list[int]:
    """0, 1, 2, 4, 8, ... up to max_nodes, plus a few points between the powers of two."""
    sizes = {0, max_nodes}
    s = 1
    while s < max_nodes:
        sizes.update({s, min(max_nodes, s + s // 2)})
        s *= 2
    return sorted(sizes)


def monotone_fit(values: list[float]) -> list[float]:
    """The closest non-decreasing sequence in least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []          # [mean, count]
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, c2 = blocks.pop()
            m1, c1 = blocks.pop()
            blocks.append([(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2])
    out: list[float] = []
    for mean, count in blocks:
        out += [mean] * int(count)
    return out



REFERENCE_PROFILES = PROFILES_DIR


def reference_profiles(pair_name: str | None = None, folder: Path | None = None) -> dict[str, LatencyProfile]:
    """Profiles of other hardware shipped with the app (assets/profiles/*.json, or the profile
    files in `folder`), by file stem, for the modelled speed-up on a machine the user does not have;
    files that are not profiles are skipped. Each says where it came from. With `pair_name`, only
    those measured for that pair: another pair's times would price rounds of a model with other
    layers and widths."""
    out = {}
    for path in sorted(Path(folder or REFERENCE_PROFILES).glob("*.json")):
        try:
            profile = LatencyProfile.load(path)
        except (ValueError, OSError, TypeError):
            continue
        if pair_name is None or profile.pair == pair_name:
            out[path.stem] = profile
    return out


def _hindsight(run_label: str) -> bool:
    """Whether the run label names a hindsight policy (the oracle: priced as the drafter pass)."""
    found = label_policy(run_label)
    return found is not None and found.hindsight
