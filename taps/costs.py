"""The measured latency profile, and the cost-aware tree size it gives TAPS and DDTree.

A profile holds, for one pair on one device (precision, thread count), what a round costs:
- `verify_s[i]`: the target's tree forward for `sizes[i]` draft nodes after a cached context,
  the median of interleaved repeats, fitted to be non-decreasing in the tree size;
- `overhead_s[policy]`: everything else a round of that policy costs (drafter pass and lattice,
  drafter cache extension, pool, estimate, select, commit, the round record), the median over
  the rounds of a real decode;
- `ar_step_s`: one autoregressive round.

`LatencyProfile.best_size` picks the tree size m that maximises expected tokens per second,
    (1 + sum of the m largest reaches) / (overhead_s[policy] + verify_s(m)).
Decisions read only a saved profile: the same profile and the same inputs give the same trees on
an idle machine and a busy one. A profile is saved per pair contents, device, precision and
thread count (`profile_key`); one that does not match, or cannot be read, is never used: it is
re-measured with a visible message (`profile_for`), or measured on purpose with
`python -m taps.profile` or the app's sidebar.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from . import kernels
from .config import run_label
from .linear import kernel_name

PROFILE_FORMAT = 3
OVERHEAD_BUDGET = 32            # policies' per-round overheads are measured at this budget
PROFILE_PROMPT = ('def parse_config(path):\n    """Read a key = value file into a dict."""\n    result = {}\n'
                  '    with open(path) as fh:\n        for line in fh:\n            line = line.strip()\n')


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
    source: str = "measured"         # measured | published | fixed (tests)

    def verify_time(self, size: int | np.ndarray) -> np.ndarray:
        return np.interp(size, self.sizes, self.verify_s)

    def overhead(self, policy: str | None = None) -> float:
        """Per-round seconds besides verify for `policy` (a run label such as "ddtree" or "taps/online");
        the drafter pass alone when the policy was not measured."""
        if policy is not None and policy in self.overhead_s:
            return float(self.overhead_s[policy])
        return float(self.draft_s)

    def round_time(self, policy: str | None, size: int | np.ndarray) -> np.ndarray:
        if policy == "ar":
            return np.full(np.shape(size), self.ar_step_s or float(self.verify_time(0)))
        return self.overhead(policy) + self.verify_time(size)

    def best_size(self, reach_desc: np.ndarray, max_size: int, policy: str | None = None) -> int:
        """The m <= max_size maximising (1 + sum of the top-m reach) / (overhead + t_verify(m))."""
        n = min(max_size, len(reach_desc))
        if kernels.available:
            return int(kernels.best_size(np.asarray(reach_desc, dtype=np.float64), self.round_times(policy, n)))
        expected = np.empty(n + 1)
        expected[0] = 0.0
        np.cumsum(reach_desc[:n], out=expected[1:])
        expected += 1.0
        return int(np.argmax(expected / self.round_times(policy, n)))

    def round_times(self, policy: str | None, n: int) -> np.ndarray:
        """round_time(policy, 0..n), kept per (policy, n): a round's size choice is then a cumsum,
        a division and an argmax (the profile is not changed once measured or loaded)."""
        cache = self.__dict__.setdefault("_times", {})
        times = cache.get((policy, n))
        if times is None:
            times = cache[(policy, n)] = self.round_time(policy, np.arange(n + 1))
        return times

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
        raw = json.loads(Path(path).read_text())
        if not isinstance(raw, dict) or not {"sizes", "verify_s", "draft_s"} <= raw.keys():
            raise ValueError(f"{path} is not a latency profile (needs sizes, verify_s, draft_s)")
        known = set(cls.__dataclass_fields__)
        profile = cls(**{k: v for k, v in raw.items() if k in known})
        if len(profile.sizes) != len(profile.verify_s) or not profile.sizes:
            raise ValueError(f"{path}: sizes and verify_s must be lists of the same, non-zero length")
        return profile


# ------------------------------------------------------------------------------------ keys, paths
def profile_key(pair) -> dict:
    """Everything that changes a profile: the format, the pair's contents, device, precision and
    thread count, the drafter's inference precision, whether the selection work runs compiled
    (numba) or in numpy (the per-round overheads differ), and which GEMM the target's linear layers
    run (`taps.linear`)."""
    device = torch.device(pair.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"format": PROFILE_FORMAT, "pair": pair.name, "fingerprint": getattr(pair, "fingerprint", ""),
            "device": device.type, "device_name": name, "dtype": str(pair.dtype).replace("torch.", ""),
            "drafter_precision": getattr(pair, "drafter_precision", "same"),
            "threads": torch.get_num_threads() if device.type == "cpu" else 0,
            "selection": "numba" if kernels.available else "numpy",
            "target_gemm": kernel_name(pair.target) if isinstance(pair.target, torch.nn.Module) else "default"}


def cache_root() -> Path:
    return Path(os.environ.get("TAPS_CACHE", Path.home() / ".cache" / "taps"))


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


_PROFILES: dict[str, LatencyProfile] = {}


def profile_for(pair, max_nodes: int, announce: Callable[[str], None] | None = None) -> LatencyProfile:
    """The saved profile when it fits this pair, device and tree size; otherwise one measured now
    (saying so through `announce`, stderr by default) and saved. Never called while a round runs."""
    path = profile_path(pair)
    cached = _PROFILES.get(str(path))
    if cached is not None and max(cached.sizes) >= max_nodes:
        return cached
    profile, why = saved_profile(pair, max_nodes)
    if profile is None:
        say = announce or (lambda text: print(text, file=sys.stderr))
        size = max(max_nodes, 64)
        say(f"measuring a latency profile for {pair.name} on {pair.device} (trees up to {size} nodes): {why}")
        profile = measure_and_save(pair, max_nodes=size)
    _PROFILES[str(path)] = profile
    return profile


def forget_profiles() -> None:
    """Drop the in-process copies (after a re-measure, or in tests)."""
    _PROFILES.clear()


# ------------------------------------------------------------------------------------ measuring
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


def _clock(device: torch.device) -> Callable[[Callable[[], None]], float]:
    def timed(fn) -> float:
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1000.0
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    return timed


@torch.inference_mode()
def measure_verify(pair, sizes: list[int], context_length: int, repeats: int,
                   progress: Callable[[float, str], None] | None = None) -> tuple[list[float], list[float]]:
    """Median and relative spread of the tree forward at each size (chain-shaped trees after
    `context_length` cached tokens), with the sizes interleaved in every repeat so that a burst of
    load hits all sizes alike."""
    from transformers import DynamicCache

    from .tree import DraftTree
    from .verify import target_body, trim_cache

    device = torch.device(pair.device)
    vocab = pair.target.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    cache = DynamicCache(config=pair.target.config)
    if context_length:
        context = torch.randint(0, vocab, (1, context_length), generator=gen).to(device)
        target_body(pair.target, cache, context, torch.arange(context_length, device=device).view(1, -1),
                    None, None)
    layers = pair.feature_layers
    head = pair.target.get_output_embeddings()
    runs = []
    for m in sizes:
        tokens = torch.randint(0, vocab, (m + 1,), generator=gen).numpy()
        tree = DraftTree(tokens=tokens, parents=np.arange(-1, m), depths=np.arange(m + 1),
                         ranks=np.zeros(m + 1, dtype=np.int64), marginal_logprob=np.zeros(m + 1),
                         path_logprob=np.zeros(m + 1), reach=np.ones(m + 1))
        ids, pos, mask = tree.verify_inputs(context_length, context_length, pair.dtype, device)

        def run(ids=ids, pos=pos, mask=mask, m=m):
            hidden, _ = target_body(pair.target, cache, ids, pos, mask if m else None, layers)
            head(hidden[: max(m, 1)])           # the logits of a chain's inner nodes (the root's, at least)
            trim_cache(cache, context_length)   # drop what this forward appended

        run()   # warm-up
        runs.append(run)
    timed = _clock(device)
    samples = [[] for _ in sizes]
    for r in range(repeats):
        for i in range(len(sizes)):
            samples[i].append(timed(runs[i]))
        if progress:
            progress((r + 1) / repeats, f"verify: repeat {r + 1} of {repeats}")
    medians = [float(np.median(s)) for s in samples]
    spread = [float((np.percentile(s, 75) - np.percentile(s, 25)) / max(np.median(s), 1e-12)) for s in samples]
    return medians, spread


@torch.inference_mode()
def measure_draft(pair, context_length: int, repeats: int) -> float:
    """Median seconds of one drafter pass as a round runs it (the fused drafter at the pair's
    drafter precision: embedding, layers over the block, lm_head), after `context_length` positions."""
    if pair.drafter is None:
        return 0.0
    from .fast_drafter import DraftContext, fast_drafter

    gen = torch.Generator().manual_seed(1)
    feats = torch.randn(context_length, len(pair.feature_layers) * pair.target.config.hidden_size,
                        generator=gen).to(device=pair.device, dtype=pair.dtype)
    context = DraftContext(fast_drafter(pair), pair.mask_token_id)
    context.add(feats)

    def draft():
        context.logits(context.draft(0, pair.drafter.block_size - 1, pair.embed))

    draft()   # warm-up (projects the context once)
    timed = _clock(torch.device(pair.device))
    return float(np.median([timed(draft) for _ in range(repeats)]))


def policies(pair) -> list[tuple[str, str]]:
    """(selector, estimator) of every policy this pair can run."""
    out = [("ar", "marginal")]
    if pair.drafter is not None:
        out += [("dflash", "marginal"), ("ddtree", "marginal"), ("taps", "marginal"), ("taps", "online")]
        if pair.scorer is not None:
            out.append(("taps", "learned"))
    return out


def measure_overheads(pair, rounds: int = 24, progress: Callable[[float, str], None] | None = None
                      ) -> tuple[dict[str, float], float]:
    """Per policy, the median per-round seconds of everything but verify, over a real greedy decode
    of a fixed code prompt (budget OVERHEAD_BUDGET; TAPS by reach, so no profile is needed to
    measure one); and the median AR round."""
    from .session import DecodeSession

    out: dict[str, float] = {}
    ar_step = 0.0
    todo = policies(pair)
    for n, (selector, estimator) in enumerate(todo):
        session = DecodeSession(pair, PROFILE_PROMPT, selector=selector, estimator=estimator, budget=OVERHEAD_BUDGET,
                                taps_mode="reach", max_new_tokens=4 * rounds, stop_at_eos=False)
        times = []
        while not session.finished and len(times) < rounds + 2:
            record = session.step()
            times.append((record.time_s - record.timings.get("verify", 0.0), record.time_s))
        kept = times[2:] or times                   # the first rounds pay one-off costs
        if selector == "ar":
            ar_step = float(np.median([total for _, total in kept]))
        else:
            out[run_label(selector, estimator)] = float(np.median([rest for rest, _ in kept]))
        if progress:
            progress((n + 1) / len(todo), f"round costs: {run_label(selector, estimator)}")
    return out, ar_step


def measure_profile(pair, max_nodes: int = 64, context_length: int = 128, repeats: int = 9,
                    sizes: list[int] | None = None, overheads: bool = True,
                    progress: Callable[[float, str], None] | None = None) -> LatencyProfile:
    """Measure a whole profile (a few seconds on a laptop CPU for trees up to 64 nodes)."""
    sizes = sizes or default_sizes(max_nodes)

    def part(lo: float, hi: float):
        return (lambda share, text: progress(lo + (hi - lo) * share, text)) if progress else None

    medians, spread = measure_verify(pair, sizes, context_length, repeats, part(0.0, 0.6))
    draft_s = measure_draft(pair, context_length, repeats)
    overhead, ar_step = measure_overheads(pair, progress=part(0.6, 1.0)) if overheads else ({}, 0.0)
    return LatencyProfile(sizes=list(sizes), verify_s=monotone_fit(medians), draft_s=draft_s,
                          device=str(pair.device), pair=pair.name, context_length=context_length,
                          overhead_s=overhead, ar_step_s=ar_step, raw_verify_s=medians, spread=spread,
                          key=profile_key(pair), measured_at=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                          repeats=repeats)


def measure_and_save(pair, max_nodes: int = 64, progress: Callable[[float, str], None] | None = None,
                     **options) -> LatencyProfile:
    """Measure this pair's profile here and save it where sessions look for it."""
    profile = measure_profile(pair, max_nodes=max_nodes, progress=progress, **options)
    profile.save(profile_path(pair))
    _PROFILES[str(profile_path(pair))] = profile
    return profile


REFERENCE_PROFILES = Path(__file__).resolve().parent.parent / "assets" / "profiles"


def reference_profiles(pair_name: str | None = None) -> dict[str, LatencyProfile]:
    """Profiles of other hardware shipped with the app (assets/profiles/*.json), by file stem, for
    the modelled speed-up on a machine the user does not have. Each says where it came from. With
    `pair_name`, only those measured for that pair: another pair's times would price rounds of a
    model with other layers and widths."""
    out = {}
    for path in sorted(REFERENCE_PROFILES.glob("*.json")):
        try:
            profile = LatencyProfile.load(path)
        except (ValueError, OSError, TypeError):
            continue
        if pair_name is None or profile.pair == pair_name:
            out[path.stem] = profile
    return out
