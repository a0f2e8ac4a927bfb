"""Measured latency profile and TAPS's cost-aware tree size.

`measure_profile` times the target's tree forward for tree sizes 1..N (with a cached context of a
given length) and the drafter's pass on the running device. `LatencyProfile.best_size` then picks
the tree size m that maximises expected tokens per second,
    (1 + sum of the m largest reaches) / (t_draft + t_verify(m)),
which replaces hand-set utility weights.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch


@dataclass
class LatencyProfile:
    sizes: list[int]          # draft nodes verified (root not counted), ascending, starting at 0 or 1
    verify_s: list[float]     # median seconds of the target's tree forward at each size
    draft_s: float            # median seconds of one drafter pass (embedding, layers, lm_head)
    device: str = "cpu"
    pair: str = ""
    context_length: int = 0

    def verify_time(self, size: int | np.ndarray) -> np.ndarray:
        return np.interp(size, self.sizes, self.verify_s)

    def best_size(self, reach_desc: np.ndarray, max_size: int) -> int:
        """The m <= max_size maximising (1 + sum of the top-m reach) / (t_draft + t_verify(m))."""
        m = np.arange(0, min(max_size, len(reach_desc)) + 1)
        expected = 1.0 + np.concatenate([[0.0], np.cumsum(reach_desc[: m[-1]])])
        rate = expected / (self.draft_s + self.verify_time(m))
        return int(m[int(np.argmax(rate))])

    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, path: str | Path) -> "LatencyProfile":
        raw = json.loads(Path(path).read_text())
        if not {"sizes", "verify_s", "draft_s"} <= raw.keys():
            raise ValueError(f"{path} is not a latency profile (needs sizes, verify_s, draft_s)")
        return cls(**raw)


def profile_path(pair_name: str, device: str) -> Path:
    """Where `python -m taps.profile` saves a pair's curve for this machine and device type, and
    where sessions look for it first ($TAPS_CACHE, default ~/.cache/taps)."""
    root = Path(os.environ.get("TAPS_CACHE", Path.home() / ".cache" / "taps"))
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in pair_name)
    return root / "profiles" / f"{safe}-{torch.device(device).type}.json"


def default_sizes(max_nodes: int) -> list[int]:
    """0, 1, 2, 4, 8, ... up to max_nodes, plus a few points between the powers of two."""
    sizes = {0, max_nodes}
    s = 1
    while s < max_nodes:
        sizes.update({s, min(max_nodes, s + s // 2)})
        s *= 2
    return sorted(sizes)


def _timed(fn, repeats: int, device: torch.device) -> float:
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1000.0)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return float(np.median(times))


@torch.inference_mode()
def measure_profile(pair, max_nodes: int = 64, context_length: int = 128, repeats: int = 5,
                    sizes: list[int] | None = None) -> LatencyProfile:
    """Time verify(m) for a chain-shaped tree of m nodes after `context_length` cached tokens."""
    from transformers import DynamicCache

    from .tree import DraftTree
    from .verify import target_forward, trim_cache

    device = pair.device
    vocab = pair.target.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    context = torch.randint(0, vocab, (1, context_length), generator=gen).to(device)
    cache = DynamicCache(config=pair.target.config)
    if context_length:
        target_forward(pair.target, cache, context, torch.arange(context_length, device=device).view(1, -1),
                       None, None)
    sizes = sizes or default_sizes(max_nodes)
    layers = pair.feature_layers
    verify_s = []
    for m in sizes:
        tokens = torch.randint(0, vocab, (m + 1,), generator=gen).numpy()
        tree = DraftTree(tokens=tokens, parents=np.arange(-1, m), depths=np.arange(m + 1),
                         ranks=np.zeros(m + 1, dtype=np.int64), marginal_logprob=np.zeros(m + 1),
                         path_logprob=np.zeros(m + 1), reach=np.ones(m + 1))
        ids, pos, mask = tree.verify_inputs(context_length, context_length, pair.dtype, device)

        def run(ids=ids, pos=pos, mask=mask):
            target_forward(pair.target, cache, ids, pos, mask, layers)
            trim_cache(cache, context_length)   # drop what this forward appended

        run()  # warm-up
        verify_s.append(_timed(run, repeats, device))
    draft_s = 0.0
    if pair.drafter is not None:
        block = pair.drafter.block_size
        feats = torch.randn(1, context_length, len(layers) * pair.target.config.hidden_size,
                            generator=gen).to(device=device, dtype=pair.dtype)
        dcache = pair.drafter.new_cache()
        pair.drafter.extend_cache(dcache, feats)
        block_ids = torch.full((1, block), pair.mask_token_id, device=device)

        def draft():
            hidden = pair.drafter.draft_block(dcache, pair.embed(block_ids))
            pair.lm_head(hidden[:, 1:])

        draft()
        draft_s = _timed(draft, repeats, device)
    return LatencyProfile(sizes=list(sizes), verify_s=verify_s, draft_s=draft_s, device=str(device),
                          pair=pair.name, context_length=context_length)


_PROFILES: dict[tuple, LatencyProfile] = {}


def cached_profile(pair, max_nodes: int) -> LatencyProfile:
    """The pair's saved profile for this device (`python -m taps.profile`) when it covers
    `max_nodes`; otherwise one measured once per (pair, device, size range) in this process."""
    key = (id(pair), str(pair.device), max_nodes)
    if key not in _PROFILES:
        saved = profile_path(pair.name, str(pair.device))
        profile = None
        if saved.exists():
            try:
                profile = LatencyProfile.load(saved)
            except (ValueError, OSError, TypeError):
                profile = None
        if profile is None or max(profile.sizes) < max_nodes:
            profile = measure_profile(pair, max_nodes=max_nodes, repeats=3)
        _PROFILES[key] = profile
    return _PROFILES[key]
