"""Measuring a latency profile on this device: the verify curve (interleaved repeats, CUDA events
on a GPU), one drafter pass, and each policy's per-round costs over a real decode
(`measure_profile`), saved where sessions read it (`measure_and_save`). `profile_for` is the
saved profile or, when none fits, one measured now, said aloud: the commands use it, the engine
never does (it only reads saved profiles, `taps.profiles`).
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from typing import Callable

import numpy as np
import torch

from ..config import DecodeConfig, run_label
from ..cost_model import LatencyProfile, default_sizes, monotone_fit
from ..estimate import estimators_for
from ..policies import AR, REGISTRY, TAPS, Policy, policy
from ..profiles import profile_key, profile_path, saved_profile
from ..roofline import model_shape
from ..session import DecodeSession

OVERHEAD_BUDGET = 32            # policies' per-round overheads are measured at this budget
PROFILE_PROMPT = ('def parse_config(path):\n    """Read a key = value file into a dict."""\n    result = {}\n'
                  '    with open(path) as fh:\n        for line in fh:\n            line = line.strip()\n')


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


def _random_chain(vocab: int, nodes: int, gen: torch.Generator):
    """A chain-shaped draft tree of `nodes` random tokens below a random root (what the verify
    measurements time: the forward's cost depends on the rows, not on the tree's shape)."""
    from ..tree import DraftTree

    tokens = torch.randint(0, vocab, (nodes + 1,), generator=gen).numpy()
    return DraftTree(tokens=tokens, parents=np.arange(-1, nodes), depths=np.arange(nodes + 1),
                     ranks=np.zeros(nodes + 1, dtype=np.int64), marginal_logprob=np.zeros(nodes + 1),
                     path_logprob=np.zeros(nodes + 1), reach=np.ones(nodes + 1))


@torch.inference_mode()
def measure_verify(pair, sizes: list[int], context_length: int, repeats: int,
                   progress: Callable[[float, str], None] | None = None) -> tuple[list[float], list[float]]:
    """Median and relative spread of the tree forward at each size (chain-shaped trees after
    `context_length` cached tokens), with the sizes interleaved in every repeat so that a burst of
    load hits all sizes alike."""
    from ..target_cache import make_target_cache
    from ..verify import target_body, trim_cache

    device = torch.device(pair.device)
    vocab = pair.target.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    cache = make_target_cache(pair.target.config, capacity=context_length + max(sizes, default=0) + 1)   # as sessions
    if context_length:
        context = torch.randint(0, vocab, (1, context_length), generator=gen).to(device)
        target_body(pair.target, cache, context, torch.arange(context_length, device=device).view(1, -1),
                    None, None)
    layers = pair.feature_layers
    head = pair.target.get_output_embeddings()
    runs = []
    for m in sizes:
        tree = _random_chain(vocab, m, gen)
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


BATCHES = [1, 2, 4, 8, 16]
BATCH_WIDTHS = [0, 1, 2, 4, 6, 8, 12, 16, 24, 32]


@torch.inference_mode()
def measure_batch_verify(pair, batches: list[int] | None = None, widths: list[int] | None = None,
                         context_length: int = 128, repeats: int = 7,
                         progress: Callable[[float, str], None] | None = None):
    """The verify forward at a batch (`taps.batch_cost.BatchVerify`, measured): for each batch size B
    and width w, one forward of B chain-shaped trees of w draft nodes after `context_length` cached
    positions per request, built as a batched round builds it (`taps.batch.batch_inputs`,
    `target_body_batch`, the logits of each chain's inner nodes); medians of `repeats` rounds in
    which every point runs once, in an order that alternates, so that a burst of load hits all alike."""
    from ..batch import batch_inputs
    from ..batch_cost import measured_grid
    from ..target_cache import TargetCache
    from ..verify import target_body, target_body_batch

    batches, widths = batches or BATCHES, widths or BATCH_WIDTHS
    device = torch.device(pair.device)
    vocab = pair.target.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    solo = TargetCache(len(pair.target.get_decoder().layers), context_length + 1)
    context = torch.randint(0, vocab, (1, context_length), generator=gen).to(device)
    target_body(pair.target, solo, context, torch.arange(context_length, device=device).view(1, -1), None, None)
    layers = pair.feature_layers if pair.drafter is not None else None
    head = pair.target.get_output_embeddings()
    runs = []
    for size in batches:
        cache = TargetCache(len(solo.layers), 0)
        shape = list(solo.storage.shape)
        shape[2], shape[4] = size, context_length + max(widths) + 1
        cache.storage = torch.zeros(shape, dtype=solo.storage.dtype, device=solo.storage.device)
        cache.storage[..., :context_length, :] = solo.storage[..., :1, :, :context_length, :]
        for w in widths:
            trees = {b: _random_chain(vocab, w, gen) for b in range(size)}

            def run(cache=cache, trees=trees, size=size, w=w):
                ids, positions, mask = batch_inputs(trees, [context_length] * size, context_length, pair.dtype)
                for layer in cache.layers:
                    layer.length = context_length
                hidden, _ = target_body_batch(pair.target, cache, ids.to(device), positions.to(device),
                                              mask.to(device), layers)
                head(hidden[:, : max(w, 1)])

            run()   # warm-up
            runs.append(run)
    timed = _clock(device)
    samples = [[] for _ in runs]
    for r in range(repeats):
        order = range(len(runs)) if r % 2 == 0 else reversed(range(len(runs)))
        for i in order:
            samples[i].append(timed(runs[i]))
        if progress:
            progress((r + 1) / repeats, f"batch verify: repeat {r + 1} of {repeats}")
    per = len(widths)
    medians = [[float(np.median(samples[i * per + j])) for j in range(per)] for i in range(len(batches))]
    spread = [[float((np.percentile(samples[i * per + j], 75) - np.percentile(samples[i * per + j], 25))
                     / max(np.median(samples[i * per + j]), 1e-12)) for j in range(per)] for i in range(len(batches))]
    key = profile_key(pair)
    return measured_grid(batches, widths, medians, spread, context_length, repeats,
                         source=f"measured on {_device_name(key)}, {key['dtype']}, "
                                f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")


@torch.inference_mode()
def measure_batch_host(pair, grid, batch: int = 8, rounds: int = 12,
                       estimators: tuple[str, ...] | None = None) -> dict[str, float]:
    """Per request and round, a batched step's seconds besides its forward (the drafter pass, pool,
    estimate, select, walk, cache compaction, commit, record): for AR, for every drafting policy the
    pair runs at budget 8 (DFlash, DFlash2 where the pair has its path selector, DDTree) and for
    TAPS's rounds as the batch plans run them with each estimator (default: online, and learned
    when the pair has a scorer), at `batch` requests of the profile's prompt. Each step of a real
    batched decode is timed, the grid's price of its forward taken off; the median over steps, per
    request."""
    from ..batch import BatchSession

    out = {}
    estimators = estimators or tuple(e for e in estimators_for(pair) if e != "marginal")
    runs = [(AR.run_label(), dict(selector=AR.name))]
    runs += [(entry.run_label(), dict(selector=entry.name, budget=8)) for entry in REGISTRY.values()
             if entry.needs_drafter and not entry.uses_estimator and not entry.hindsight and entry.runs_on(pair)]
    runs += [(TAPS.run_label(e), dict(selector=TAPS.name, taps_mode="reach", estimator=e, budget=8))
             for e in estimators]
    for label, options in runs:
        session = BatchSession(pair, [PROFILE_PROMPT] * batch, max_new_tokens=16 * (rounds + 2), stop_at_eos=False,
                               **options)
        session.step()                                   # warm-up
        samples = []
        for _ in range(rounds):
            if session.finished:
                break
            start = time.perf_counter()
            session.step()
            seconds = time.perf_counter() - start
            n, width = session.widths[-1]
            samples.append((seconds - float(grid.time(n, width))) / n)
        out[label] = max(float(np.median(samples)), 0.0)
    return out


def measure_batch_hosts(pair, grid, batches, rounds: int = 12) -> dict[str, dict[str, float]]:
    """`measure_batch_host` at every batch size in `batches`: {run label: {batch (text): seconds}}."""
    out: dict[str, dict[str, float]] = {}
    for batch in batches:
        for label, seconds in measure_batch_host(pair, grid, batch=batch, rounds=rounds).items():
            out.setdefault(label, {})[str(batch)] = seconds
    return out


@torch.inference_mode()
def measure_draft(pair, context_length: int, repeats: int) -> float:
    """Median seconds of one drafter pass as a round runs it (the fused drafter at the pair's
    drafter precision: embedding, layers over the block, lm_head), after `context_length` positions."""
    if pair.drafter is None:
        return 0.0
    from ..fast_drafter import DraftContext, fast_drafter

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
    out = []
    for entry in REGISTRY.values():
        if entry.hindsight or not entry.runs_on(pair):
            continue
        out += [(entry.name, e) for e in (estimators_for(pair) if entry.uses_estimator else ("marginal",))]
    return out


def _unprofiled_mode(entry: Policy) -> str:
    """A size choice of this policy that needs no profile (TAPS: reach; DDTree: budget), or ""."""
    return next((m for m in entry.size_modes if not entry.uses_profile(m)), "")


def measure_overheads(pair, rounds: int = 24, progress: Callable[[float, str], None] | None = None
                      ) -> tuple[dict[str, float], float]:
    """Per policy, the median per-round seconds of everything but verify, over a real greedy decode
    of a fixed code prompt (budget OVERHEAD_BUDGET; TAPS by reach, so no profile is needed to
    measure one); and the median AR round."""
    out: dict[str, float] = {}
    ar_step = 0.0
    todo = policies(pair)
    for n, (selector, estimator) in enumerate(todo):
        config = DecodeConfig(estimator=estimator, budget=OVERHEAD_BUDGET, max_new_tokens=4 * rounds,
                              stop_at_eos=False).with_run(selector, mode=_unprofiled_mode(policy(selector)))
        session = DecodeSession(pair, PROFILE_PROMPT, config)
        times = []
        while not session.finished and len(times) < rounds + 2:
            record = session.step()
            times.append((record.time_s - record.timings.get("verify", 0.0), record.time_s))
        kept = times[2:] or times                   # the first rounds pay one-off costs
        if policy(selector).baseline:
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
    key = profile_key(pair)
    return LatencyProfile(sizes=list(sizes), verify_s=monotone_fit(medians), draft_s=draft_s,
                          device=str(pair.device), pair=pair.name, context_length=context_length,
                          overhead_s=overhead, ar_step_s=ar_step, raw_verify_s=medians, spread=spread,
                          key=key, measured_at=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                          repeats=repeats, kind="measured", device_name=_device_name(key), dtype=key["dtype"],
                          model=_shape(pair))


def _device_name(key: dict) -> str:
    """The device in words: a GPU's name, or "CPU, N threads"."""
    if key["device"] != "cpu":
        return key["device_name"]
    return f"CPU, {key['threads']} thread{'s' if key['threads'] != 1 else ''}"


def _shape(pair) -> dict:
    """The target's shape (taps.roofline.model_shape), or {} for a target without a decoder config."""
    try:
        return model_shape(pair.target.config, pair.name)
    except (AttributeError, TypeError, ValueError):
        return {}


def measure_and_save(pair, max_nodes: int = 64, progress: Callable[[float, str], None] | None = None,
                     **options) -> LatencyProfile:
    """Measure this pair's profile here and save it where sessions look for it."""
    profile = measure_profile(pair, max_nodes=max_nodes, progress=progress, **options)
    profile.save(profile_path(pair))
    _PROFILES[str(profile_path(pair))] = profile
    return profile


