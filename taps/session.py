"""DecodeSession: step-by-step speculative decoding. `step()` runs one round and returns a Round.

One round, in the stage names used everywhere (code, UI, benchmarks):
    draft    drafter pass over [root, MASK x H] -> per-position logits (the top-K lattice)
    pool     the candidate tree the selector considers
    estimate a reach per pool node (path-conditioned for TAPS, the marginal product otherwise)
    select   the prefix-closed subtree to verify
    verify   one target forward over the tree, ancestor-only mask, and the walk
    commit   KV compaction, drafter context, estimator feedback, stop rules, the Round record
AR (a policy that needs no drafter) skips the drafter: its rounds are plain autoregressive decoding with a KV cache.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from . import kernels, profiles
from .config import DecodeConfig
from .cost_model import LatencyProfile
from .estimate import make_estimator
from .fast_drafter import DraftContext, fast_drafter
from .pair import ModelPair
from .pool import Lattice
from .record import STAGES, Round, build_round
from .reference import greedy_continuation, sample_continuation
from .selectors import RoundContext, make_selector
from .stopping import apply_stop_rules
from .target_cache import make_target_cache
from .timing import StageTimer
from .tree import TreeMaskBuffer
from .verify import (
    COMPILE_REFUSED,
    HeadRows,
    compact_cache,
    compilable,
    edge_feedback,
    prefill,
    target_body,
    trim_cache,
    walk,
)

__all__ = ["DecodeConfig", "DecodeSession", "Round", "STAGES", "greedy_continuation", "sample_continuation"]


class DecodeSession:
    """Decode one prompt round by round with a chosen selector, estimator and budget."""

    def __init__(self, pair: ModelPair, prompt: str | list[int], config: DecodeConfig | None = None,
                 profile: LatencyProfile | None = None, oracle_tokens: list[int] | None = None,
                 compile_verify: bool = False, **overrides):
        self.pair = pair
        if compile_verify and not compilable(pair.target):
            raise ValueError(COMPILE_REFUSED)
        self.compile_verify = compile_verify      # verify through torch.compile'd target layers (see compiled_decoder)
        self.profile = profile
        self.config = replace(config or DecodeConfig(), **overrides)
        self.config.validate(pair)
        self._oracle_tokens = oracle_tokens
        self._start(pair.encode_prompt(prompt))

    def reset(self, prompt: str | list[int] | None = None, **overrides) -> None:
        """Start again, optionally with a new prompt or settings; on bad input nothing changes."""
        config = replace(self.config, **overrides)
        config.validate(self.pair)
        ids = self.pair.encode_prompt(prompt) if prompt is not None else self.prompt_ids
        if prompt is not None and ids != self.prompt_ids:
            self._oracle_tokens = None
        self.config = config
        self._start(ids)

    @torch.inference_mode()
    def _start(self, prompt_ids: list[int]) -> None:
        cfg, pair = self.config, self.pair
        kernels.warm_up()                             # compiled selection kernels: once per process
        self.prompt_ids = list(prompt_ids)
        self.tokens: list[int] = list(prompt_ids)          # committed sequence (prompt + generated)
        self.rounds: list[Round] = []
        self.finished, self.stop_reason = False, None
        self.selector = make_selector(cfg.selector)
        needs_drafter = cfg.policy.needs_drafter
        self.block_size = (cfg.block_size or pair.drafter.block_size) if needs_drafter else 1
        self.estimator = (make_estimator(cfg.estimator, pair, cfg.calibration, cfg.temperature)
                          if cfg.policy.uses_estimator else None)
        if self.profile is None and cfg.uses_profile:
            self.profile = profiles.required_profile(pair, max_nodes=max(cfg.budget, 1))
        if cfg.policy.hindsight and self._oracle_tokens is None:
            self._oracle_tokens = greedy_continuation(pair, prompt_ids, cfg.max_new_tokens + self.block_size)
        self.cache, self.tree_mask, self.draft_context = _buffers(pair, cfg, len(prompt_ids), needs_drafter)
        timer = StageTimer(pair.device)
        with timer("verify"):                       # prefill: timed apart from the rounds
            features = prefill(pair.target, self.cache, prompt_ids,
                               pair.feature_layers if self.draft_context else None)
            if features is not None:
                self.draft_context.add(features)
        self.prefill_s = timer.seconds["verify"]

    @property
    def generated(self) -> list[int]:
        return self.tokens[len(self.prompt_ids):]

    @property
    def text(self) -> str:
        return self.pair.tokenizer.decode(self.generated)

    # ------------------------------------------------------------------ a round
    @torch.inference_mode()
    def step(self) -> Round:
        start = len(self.tokens) - 1
        timer = StageTimer(self.pair.device)
        self._stage = "draft"
        try:
            lattice, pool = self._pool(timer)
            with timer("select"):
                selected, tree = self._select(pool, self.config)
            self._stage = "verify"
            with timer("verify"):
                hidden, features = self._verify(tree, start)
                head = HeadRows(self.pair.target, hidden)
                result = walk(tree, head, self.config.temperature, self.config.seed, start)
        except torch.cuda.OutOfMemoryError as exc:
            raise out_of_memory(self.cache, self._stage, start) from exc
        with timer("commit"):
            compact_cache(self.cache, start, [0] + result.accepted)
            record = self._commit(lattice, pool, selected, tree, head, result, features)
        record.timings = dict(timer.seconds)         # the whole step, the record included
        self.rounds.append(record)
        return record

    def _begin_round(self) -> None:
        """A round's start: refused when the session has finished or the context is full; the
        selector's context for this round (`self._round`)."""
        if self.finished:
            raise RuntimeError(f"this session has finished ({self.stop_reason}); reset() to start again")
        start = len(self.tokens) - 1
        if self.pair.max_context - start - 1 < 0:    # no tree depth left in the context
            raise RuntimeError("the sequence has reached the model's context length")
        future = self._oracle_tokens[len(self.generated):] if self._oracle_tokens is not None else None
        self._round = RoundContext(self.estimator, self.profile, future, getattr(self.pair, "path_selector", None),
                                   start)

    def _pool(self, timer: StageTimer, drafted: tuple | None = None):
        """A round's draft, pool and estimate: (lattice, pool with its reach). `drafted`: this
        round's block already through the drafter (hidden states, logits), as a batch drafts it."""
        self._begin_round()
        cfg, sel, root = self.config, self.selector, self.tokens[-1]
        lattice = None
        if sel.policy.needs_drafter:
            with timer("draft"):
                lattice = self._draft(root, self.draft_depth(), drafted)
        self._stage = "select"
        with timer("pool"):
            pool = sel.pool(root, lattice, cfg, self._round)
        with timer("estimate"):
            pool.reach = sel.estimate(pool, lattice, cfg, self._round)
        return lattice, pool

    def _select(self, pool, cfg: DecodeConfig):
        """The selection from a round's pool under `cfg` (the session's settings, or a batch plan's
        budget for this round): (selected pool indices, the tree to verify)."""
        selected = self.selector.select(pool, cfg, self._round)
        return selected, checked(pool.subtree(selected), cfg)

    def _commit(self, lattice, pool, selected, tree, head, result, features) -> Round:
        """After the walk (the target's cache already compacted): the drafter's context, the stop
        rules, the committed tokens, the estimator's feedback, and the round's record."""
        pair, cfg = self.pair, self.config
        start = len(self.tokens) - 1
        if self.draft_context is not None:
            self.draft_context.add(features[[0] + result.accepted])
        committed, reason = apply_stop_rules(
            [int(tree.tokens[i]) for i in result.accepted] + [result.bonus_token], cfg,
            generated=len(self.generated), total=len(self.tokens), eos_ids=pair.eos_token_ids,
            max_context=pair.max_context)
        self.finished, self.stop_reason = reason is not None, reason
        self.tokens.extend(committed)
        if self.estimator is not None and self.estimator.wants_feedback and tree.size:    # a root alone: no verdict
            self.estimator.observe_round(pool, selected, edge_feedback(pool, selected, head, cfg.temperature))
        return build_round(index=len(self.rounds), config=cfg, pool=pool, selected=selected,
                           accepted_rows=result.accepted, child_prob=result.child_prob,
                           bonus_token=result.bonus_token, committed=committed, start=start,
                           timings={}, finished=self.finished, stop_reason=self.stop_reason,
                           texts=pair.token_texts, lattice=lattice)

    def draft_depth(self) -> int:
        """How deep this round's block drafts: the block, or what the context still allows (-1:
        nothing, the context is full)."""
        return min(self.block_size - 1, self.pair.max_context - len(self.tokens))

    def _draft(self, root: int, depth: int, drafted: tuple | None = None) -> Lattice:
        if drafted is None:
            hidden = self.draft_context.draft(root, depth, self.pair.embed)
            drafted = hidden, self.draft_context.logits(hidden)
        k, temperature = max(self.config.top_k, self.config.budget), self.config.temperature
        return Lattice.from_logits(drafted[1], k, hidden=drafted[0], temperature=temperature)

    def _verify(self, tree, start: int):
        ids, pos, mask = self.tree_mask.verify_inputs(tree, start, start)
        layers = self.pair.feature_layers if self.draft_context is not None else None
        return target_body(self.pair.target, self.cache, ids, pos, mask, layers, compiled=self.compile_verify)

    def release(self) -> None:
        """Drop what only further rounds need (the caches and the mask buffer: a server keeps finished
        runs for their links without them); the rounds, tokens and text stay; `reset()` starts again."""
        self.cache = self.draft_context = self.tree_mask = None

    def run(self, callback=None) -> list[Round]:
        """Step until finished; `callback(round)` after each round (progress bars, live counters)."""
        while not self.finished:
            record = self.step()
            if callback is not None:
                callback(record)
        return self.rounds


def out_of_memory(cache, stage: str, start: int) -> RuntimeError:
    """Undo a round that ran out of device memory (the target's cache back to the committed tokens;
    the drafter's context only advances once a draft succeeds) and say what to lower."""
    trim_cache(cache, start)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    lower = {"draft": "the block size (block_size) or top_k", "select": "the budget, pool_cap or top_k",
             "verify": "the budget"}[stage]
    return RuntimeError(f"the device ran out of memory in the {stage} stage; lower {lower} or use a "
                        f"shorter prompt (the session is unchanged and can continue)")


def _buffers(pair: ModelPair, cfg: DecodeConfig, prompt_length: int, needs_drafter: bool) -> tuple:
    """A session's target cache, tree-mask buffer and drafter context (None for AR), with room for the
    prompt, every new token and one round's tree: the cache never grows mid-decode."""
    room = min(prompt_length + cfg.max_new_tokens, pair.max_context) + max(cfg.budget, 1) + 1
    draft_context = DraftContext(fast_drafter(pair), pair.mask_token_id) if needs_drafter else None
    return (make_target_cache(pair.target.config, capacity=room),
            TreeMaskBuffer(pair.dtype, pair.device, rows=cfg.budget + 1, columns=room), draft_context)


def checked(tree, cfg: DecodeConfig):
    """`tree`, refused unless prefix-closed and within the budget (a selector's bug, never the user's)."""
    if not tree.is_prefix_closed() or tree.size > cfg.budget:
        raise RuntimeError(f"selector {cfg.selector} produced an invalid tree (size {tree.size}, budget {cfg.budget})")
    return tree
