"""DecodeSession: step-by-step speculative decoding. `step()` runs one round and returns a Round.

One round, in the stage names used everywhere (code, UI, benchmarks):
    draft    drafter pass over [root, MASK x H] -> per-position logits (the top-K lattice)
    pool     candidate pool (TAPS) or tree build
    estimate path-conditioned reach
    select   the prefix-closed subtree to verify
    verify   one target forward over the tree, ancestor-only mask, and the walk
    commit   KV compaction, drafter context, bookkeeping
The `ar` selector skips the drafter: its rounds are plain autoregressive decoding with a KV cache.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields, replace

import numpy as np
import torch
from transformers import DynamicCache

from .costs import LatencyProfile, measure_profile, profile_path
from .estimate import ESTIMATORS, Estimator, LearnedEstimator, MarginalEstimator, OnlineEstimator
from .pair import ModelPair
from .pool import Lattice
from .selectors import SELECTORS, TAPS_MODES, SelectContext, make_selector
from .tree import DraftTree
from .verify import compact_cache, pick_token, target_forward, walk

MAX_BUDGET = 1024
MAX_NEW_TOKENS = 4096
MAX_TEMPERATURE = 5.0
STAGES = ("draft", "pool", "estimate", "select", "verify", "commit")


@dataclass
class DecodeConfig:
    selector: str = "taps"
    budget: int = 32
    temperature: float = 0.0
    seed: int = 0
    max_new_tokens: int = 128
    estimator: str = "online"
    taps_mode: str = "cost"
    block_size: int | None = None      # None: the drafter's own block size
    top_k: int = 64
    beam_width: int = 48
    pool_cap: int = 768
    score_cap: int = 0                 # TAPS: score only the best N pool nodes by marginal (0: all)
    lambda_node: float = 1.0
    lambda_depth: float = 0.002
    endpoint_cap: int = 64
    stop_at_eos: bool = True

    def validate(self, pair: ModelPair) -> None:
        """Raise ValueError with a clear message for any out-of-range setting."""
        if self.selector not in SELECTORS:
            raise ValueError(f"unknown selector '{self.selector}': choose one of {', '.join(SELECTORS)}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"unknown estimator '{self.estimator}': choose one of {', '.join(ESTIMATORS)}")
        if self.taps_mode not in TAPS_MODES:
            raise ValueError(f"unknown TAPS mode '{self.taps_mode}': choose one of {', '.join(TAPS_MODES)}")
        if not isinstance(self.budget, (int, np.integer)) or not 1 <= self.budget <= MAX_BUDGET:
            raise ValueError(f"budget must be an integer from 1 to {MAX_BUDGET}, got {self.budget!r}")
        if not 0.0 <= float(self.temperature) <= MAX_TEMPERATURE or np.isnan(float(self.temperature)):
            raise ValueError(f"temperature must be between 0 and {MAX_TEMPERATURE}, got {self.temperature!r}")
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            raise ValueError(f"max_new_tokens must be from 1 to {MAX_NEW_TOKENS}, got {self.max_new_tokens!r}")
        if self.score_cap < 0:
            raise ValueError(f"score_cap must be 0 (score the whole pool) or positive, got {self.score_cap!r}")
        for name in ("top_k", "beam_width", "pool_cap", "endpoint_cap"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)!r}")
        if self.lambda_node < 0 or self.lambda_depth < 0 or self.lambda_node + self.lambda_depth <= 0:
            raise ValueError("lambda_node and lambda_depth must be non-negative and not both zero")
        if self.selector != "ar":
            if pair.drafter is None:
                raise ValueError(f"the '{self.selector}' selector needs a drafter, and this pair has none")
            if self.block_size is not None and not 2 <= self.block_size <= pair.drafter.block_size:
                raise ValueError(f"block_size must be from 2 to the drafter's {pair.drafter.block_size}, "
                                 f"got {self.block_size!r}")
        if self.selector == "oracle" and self.temperature > 0:
            raise ValueError("the oracle is defined for greedy decoding only (temperature 0)")
        if self.selector == "taps" and self.estimator == "learned" and pair.scorer is None:
            raise ValueError("the 'learned' estimator needs a trained TAPS scorer, and this pair has none")


@dataclass
class Round:
    """One round as plain data: everything a page shows and a benchmark counts."""

    index: int
    selector: str
    estimator: str
    budget: int
    temperature: float
    start: int                       # position of the root in the sequence
    root_token: int
    root_text: str
    pool_tokens: list[int]           # candidate pool (index 0 = root); the verified tree is a subset
    pool_texts: list[str]
    pool_parents: list[int]
    pool_depths: list[int]
    pool_ranks: list[int]
    pool_marginal: list[float]       # drafter marginal of the node's token at its depth
    pool_path_marginal: list[float]  # product of marginals along the path (DDTree's score)
    pool_reach: list[float]          # path-conditioned acceptance estimate (TAPS's score)
    selected: list[int]              # pool indices verified, root first
    target_prob: list[float | None]  # target's probability of the node's token at its parent
    status: list[str]                # root | accepted | rejected | waste | unselected
    accepted: list[int]              # pool indices of accepted draft nodes, by depth
    bonus_token: int
    bonus_text: str
    committed_tokens: list[int]      # accepted tokens + bonus (after stop/length truncation)
    tau: int                         # tokens committed this round
    verified_nodes: int              # draft nodes the target scored (root not counted)
    waste_nodes: int                 # verified nodes under a rejected prefix
    rejected_siblings: int           # verified nodes whose parent was reached but were not the target's token
    expected_tau: float              # 1 + sum of reach over the verified nodes
    timings: dict[str, float] = field(default_factory=dict)
    finished: bool = False
    stop_reason: str | None = None

    @property
    def time_s(self) -> float:
        return float(sum(self.timings.values()))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict) -> "Round":
        names = {f.name for f in fields(cls)}
        missing = names - raw.keys() - {"timings", "finished", "stop_reason"}
        if missing:
            raise ValueError(f"not a Round record: missing {sorted(missing)[:5]}")
        return cls(**{k: v for k, v in raw.items() if k in names})


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


_PROFILES: dict[tuple, LatencyProfile] = {}


def cached_profile(pair: ModelPair, max_nodes: int) -> LatencyProfile:
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


class DecodeSession:
    """Decode one prompt round by round with a chosen selector, estimator and budget."""

    def __init__(self, pair: ModelPair, prompt: str | list[int], config: DecodeConfig | None = None,
                 profile: LatencyProfile | None = None, oracle_tokens: list[int] | None = None, **overrides):
        self.pair = pair
        self.profile = profile
        self.config = replace(config or DecodeConfig(), **overrides)
        self.config.validate(pair)
        self._oracle_tokens = oracle_tokens
        self._start(self._encode(prompt))

    # ------------------------------------------------------------------ set-up
    def _encode(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            if not prompt.strip():
                raise ValueError("the prompt is empty: type some text to continue")
            ids = self.pair.tokenizer.encode(prompt, add_special_tokens=False)
        else:
            ids = [int(t) for t in prompt]
        if not ids:
            raise ValueError("the prompt is empty: type some text to continue")
        limit = self.pair.max_context - 2
        if len(ids) > limit:
            raise ValueError(f"the prompt is {len(ids)} tokens, longer than the model's context allows "
                             f"({limit} tokens); shorten it")
        vocab = self.pair.target.config.vocab_size
        if min(ids) < 0 or max(ids) >= vocab:
            raise ValueError(f"prompt token ids must lie in 0..{vocab - 1}")
        return ids

    def reset(self, prompt: str | list[int] | None = None, **overrides) -> None:
        """Start again, optionally with a new prompt or settings; on bad input nothing changes."""
        config = replace(self.config, **overrides)
        config.validate(self.pair)
        ids = self._encode(prompt) if prompt is not None else self.prompt_ids
        if prompt is not None and ids != self.prompt_ids:
            self._oracle_tokens = None
        self.config = config
        self._start(ids)

    @torch.inference_mode()
    def _start(self, prompt_ids: list[int]) -> None:
        cfg, pair = self.config, self.pair
        self.prompt_ids = list(prompt_ids)
        self.tokens: list[int] = list(prompt_ids)          # committed sequence (prompt + generated)
        self.rounds: list[Round] = []
        self.finished = False
        self.stop_reason: str | None = None
        self.generator = torch.Generator().manual_seed(int(cfg.seed))
        self.selector = make_selector(cfg.selector)
        self.block_size = (cfg.block_size or pair.drafter.block_size) if self.selector.needs_drafter else 1
        self.estimator = self._make_estimator() if cfg.selector == "taps" else None
        self.cache = DynamicCache(config=pair.target.config)
        self.draft_cache = pair.drafter.new_cache() if self.selector.needs_drafter else None
        self.pending_features: torch.Tensor | None = None    # target features not yet in the drafter cache
        self.prefill_s = 0.0
        layers = pair.feature_layers if self.selector.needs_drafter else None
        if cfg.selector == "taps" and cfg.taps_mode == "cost" and self.profile is None:
            self.profile = cached_profile(pair, max_nodes=max(cfg.budget, 1))
        if cfg.selector == "oracle" and self._oracle_tokens is None:
            self._oracle_tokens = greedy_continuation(pair, prompt_ids, cfg.max_new_tokens + self.block_size)
        _sync(pair.device)
        t0 = time.perf_counter()
        if len(prompt_ids) > 1:
            ids = torch.tensor([prompt_ids[:-1]], device=pair.device)
            pos = torch.arange(ids.shape[1], device=pair.device).view(1, -1)
            _, self.pending_features = target_forward(pair.target, self.cache, ids, pos, None, layers)
        _sync(pair.device)
        self.prefill_s = time.perf_counter() - t0

    def _make_estimator(self) -> Estimator:
        name = self.config.estimator
        if name == "marginal":
            return MarginalEstimator()
        if name == "online":
            return OnlineEstimator()
        return LearnedEstimator(self.pair.scorer, self.pair.target.get_input_embeddings())

    # ------------------------------------------------------------------ state
    @property
    def generated(self) -> list[int]:
        return self.tokens[len(self.prompt_ids):]

    @property
    def text(self) -> str:
        return self.pair.tokenizer.decode(self.generated)

    def _select_context(self) -> SelectContext:
        cfg = self.config
        future = None
        if self._oracle_tokens is not None:
            future = self._oracle_tokens[len(self.generated):]
        return SelectContext(estimator=self.estimator, profile=self.profile, future_tokens=future,
                             top_k=cfg.top_k, beam_width=cfg.beam_width, pool_cap=cfg.pool_cap, score_cap=cfg.score_cap,
                             taps_mode=cfg.taps_mode, lambda_node=cfg.lambda_node,
                             lambda_depth=cfg.lambda_depth, endpoint_cap=cfg.endpoint_cap)

    # ------------------------------------------------------------------ a round
    @torch.inference_mode()
    def step(self) -> Round:
        if self.finished:
            raise RuntimeError(f"this session has finished ({self.stop_reason}); reset() to start again")
        pair, cfg, device = self.pair, self.config, self.pair.device
        timings = dict.fromkeys(STAGES, 0.0)
        root = self.tokens[-1]
        start = len(self.tokens) - 1
        room = pair.max_context - start - 1          # tree depth the context still allows
        if room < 0:
            raise RuntimeError("the sequence has reached the model's context length")

        # draft
        lattice = None
        if self.selector.needs_drafter:
            _sync(device)
            t0 = time.perf_counter()
            lattice = self._draft(root, min(self.block_size - 1, room))
            _sync(device)
            timings["draft"] = time.perf_counter() - t0

        # pool / estimate / select
        selection = self.selector.select(root, lattice, cfg.budget, self._select_context())
        for stage, seconds in selection.timings.items():
            timings[stage] += seconds
        pool, selected = selection.pool, selection.selected
        tree = pool.subtree(selected)
        if not tree.is_prefix_closed() or tree.size > cfg.budget:
            raise RuntimeError(f"selector {cfg.selector} produced an invalid tree "
                               f"(size {tree.size}, budget {cfg.budget})")

        # verify
        _sync(device)
        t0 = time.perf_counter()
        layers = pair.feature_layers if self.selector.needs_drafter else None
        ids, pos, mask = tree.verify_inputs(start, start, pair.dtype, device)
        try:
            logits, features = target_forward(pair.target, self.cache, ids, pos, mask if tree.size else None,
                                               layers)
        except torch.cuda.OutOfMemoryError as exc:
            self._trim_cache(start)
            raise RuntimeError(f"the GPU ran out of memory verifying {tree.size} nodes; lower the budget "
                               f"(the session is unchanged and can continue)") from exc
        result = walk(tree, logits, cfg.temperature, self.generator)
        _sync(device)
        timings["verify"] = time.perf_counter() - t0

        # commit
        t0 = time.perf_counter()
        keep = [0] + result.accepted
        compact_cache(self.cache, start, keep)
        if features is not None:
            self._queue_features(features[keep])
        committed = [int(tree.tokens[i]) for i in result.accepted] + [result.bonus_token]
        committed = self._truncate(committed)
        self.tokens.extend(committed)
        if self.estimator is not None:
            self.estimator.observe(pool, self._edge_targets(pool, selected, tree, logits, cfg.temperature))
        _sync(device)
        timings["commit"] = time.perf_counter() - t0

        record = self._record(pool, selected, tree, result, committed, start, timings)
        self.rounds.append(record)
        return record

    def _draft(self, root: int, depth: int) -> Lattice:
        pair = self.pair
        if self.pending_features is not None:
            pair.drafter.extend_cache(self.draft_cache, self.pending_features.unsqueeze(0))
            self.pending_features = None
        block = torch.full((1, depth + 1), pair.mask_token_id, device=pair.device)
        block[0, 0] = root
        hidden = pair.drafter.draft_block(self.draft_cache, pair.embed(block))[0, 1:]
        logits = pair.lm_head(hidden)
        k = max(self.config.top_k, self.config.budget)
        return Lattice.from_logits(logits, k, hidden=hidden, temperature=self.config.temperature)

    def _queue_features(self, features: torch.Tensor) -> None:
        if self.pending_features is None:
            self.pending_features = features
        else:
            self.pending_features = torch.cat([self.pending_features, features], dim=0)

    def _trim_cache(self, length: int) -> None:
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is not None and layer.keys.numel():
                layer.keys = layer.keys[..., :length, :]
                layer.values = layer.values[..., :length, :]

    def _truncate(self, committed: list[int]) -> list[int]:
        """Apply end-of-text, max_new_tokens and context limits; mark the session finished."""
        cfg = self.config
        if cfg.stop_at_eos:
            for i, token in enumerate(committed):
                if token in self.pair.eos_token_ids:
                    committed = committed[: i + 1]
                    self.finished, self.stop_reason = True, "end of text"
                    break
        left = cfg.max_new_tokens - len(self.generated)
        if len(committed) >= left:
            committed = committed[:left]
            self.finished, self.stop_reason = True, self.stop_reason or "max new tokens"
        if len(self.tokens) + len(committed) >= self.pair.max_context:
            committed = committed[: max(self.pair.max_context - len(self.tokens), 0)]
            self.finished, self.stop_reason = True, self.stop_reason or "context length"
        return committed

    @staticmethod
    def _edge_targets(pool: DraftTree, selected: np.ndarray, tree: DraftTree, logits: torch.Tensor,
                      temperature: float) -> np.ndarray:
        """Per pool node: the target's acceptance of it given its parent reached, NaN if unknown."""
        row_of = np.full(len(pool.tokens), -1)
        row_of[selected] = np.arange(len(selected))
        targets = np.full(len(pool.tokens), np.nan)
        has_row = row_of[pool.parents[1:]] >= 0
        nodes = np.flatnonzero(has_row) + 1
        if nodes.size == 0:
            return targets
        rows = torch.as_tensor(row_of[pool.parents[nodes]], device=logits.device)
        toks = torch.as_tensor(pool.tokens[nodes], device=logits.device)
        if temperature > 0:
            probs = torch.softmax(logits.float() / temperature, dim=-1)
            targets[nodes] = probs[rows, toks].double().cpu().numpy()
        else:
            targets[nodes] = (logits.argmax(-1)[rows] == toks).double().cpu().numpy()
        return targets

    def _record(self, pool: DraftTree, selected: np.ndarray, tree: DraftTree, result, committed: list[int],
                start: int, timings: dict[str, float]) -> Round:
        n = len(pool.tokens)
        status = ["unselected"] * n
        status[0] = "root"
        reached = {0}
        accepted_pool = [int(selected[i]) for i in result.accepted]
        reached.update(accepted_pool)
        target_prob: list[float | None] = [None] * n
        waste = rejected = 0
        for row, node in enumerate(selected):
            node = int(node)
            target_prob[node] = float(result.child_prob[row])
            if node == 0:
                continue
            if node in reached:
                status[node] = "accepted"
            elif int(pool.parents[node]) in reached:
                status[node], rejected = "rejected", rejected + 1
            else:
                status[node], waste = "waste", waste + 1
        texts = self._token_texts(pool.tokens)
        return Round(
            index=len(self.rounds), selector=self.config.selector,
            estimator=self.config.estimator if self.config.selector == "taps" else "marginal",
            budget=self.config.budget, temperature=float(self.config.temperature), start=start,
            root_token=int(pool.tokens[0]), root_text=texts[0],
            pool_tokens=[int(t) for t in pool.tokens], pool_texts=texts,
            pool_parents=[int(p) for p in pool.parents], pool_depths=[int(d) for d in pool.depths],
            pool_ranks=[int(r) for r in pool.ranks],
            pool_marginal=[float(x) for x in np.exp(pool.marginal_logprob)],
            pool_path_marginal=[float(x) for x in np.exp(pool.path_logprob)],
            pool_reach=[float(x) for x in pool.reach], selected=[int(s) for s in selected],
            target_prob=target_prob, status=status, accepted=accepted_pool,
            bonus_token=int(result.bonus_token), bonus_text=self._token_texts([result.bonus_token])[0],
            committed_tokens=committed, tau=len(committed), verified_nodes=int(tree.size),
            waste_nodes=waste, rejected_siblings=rejected, expected_tau=float(1.0 + tree.reach[1:].sum()),
            timings=timings, finished=self.finished, stop_reason=self.stop_reason)

    def _token_texts(self, tokens) -> list[str]:
        """Each token's text on its own, decoded once per session and cached."""
        cache = self.__dict__.setdefault("_texts", {})
        missing = sorted({int(t) for t in tokens} - cache.keys())
        if missing:
            cache.update(zip(missing, self.pair.tokenizer.batch_decode([[t] for t in missing])))
        return [cache[int(t)] for t in tokens]

    def run(self, callback=None) -> list[Round]:
        """Step until finished; `callback(round)` after each round (progress bars, live counters)."""
        while not self.finished:
            record = self.step()
            if callback is not None:
                callback(record)
        return self.rounds


@torch.inference_mode()
def greedy_continuation(pair: ModelPair, prompt_ids: list[int], count: int) -> list[int]:
    """Plain greedy decoding with a KV cache (the reference every selector must reproduce)."""
    return sample_continuation(pair, prompt_ids, count, temperature=0.0, seed=0)


@torch.inference_mode()
def sample_continuation(pair: ModelPair, prompt_ids: list[int], count: int, temperature: float,
                        seed: int, stop_at_eos: bool = False) -> list[int]:
    """Plain autoregressive decoding: one target forward and one draw per token."""
    generator = torch.Generator().manual_seed(int(seed))
    cache = DynamicCache(config=pair.target.config)
    ids = torch.tensor([prompt_ids], device=pair.device)
    pos = torch.arange(len(prompt_ids), device=pair.device).view(1, -1)
    out: list[int] = []
    limit = min(count, pair.max_context - len(prompt_ids))
    while len(out) < limit:
        logits, _ = target_forward(pair.target, cache, ids, pos, None, None)
        token = pick_token(logits[-1], temperature, generator)
        out.append(token)
        if stop_at_eos and token in pair.eos_token_ids:
            break
        next_pos = int(pos[0, -1]) + 1
        ids = torch.tensor([[token]], device=pair.device)
        pos = torch.tensor([[next_pos]], device=pair.device)
    return out
