"""BatchSession: B requests decoded together, one target forward verifying every request's tree
(issue 52, the engine's part).

Each request is a `DecodeSession` of its own (its tokens, selector, estimator, drafter context, stop
rules, rounds); what they share is the target's key/value cache, one `TargetCache` whose batch row b
is request b's, and the verify forward:

    draft, pool, estimate, select   per request, exactly as a solo round (`DecodeSession.step`)
    verify   one target forward over the B trees padded to the largest: input ids and positions
             [B, N] (each request's own positions), one additive 4-D mask [B, 1, N, M + N] where M
             is the longest request's cached length: a tree row sees its request's own cached
             positions [0, len_b) and its ancestors in the tree block [M, M + n_b); a padding row (a
             smaller tree's, or a finished request's) sees only itself. The forward writes every
             row's tree at [M, M + N); the walk per request on its own rows.
    commit   per request: its row's accepted entries moved down to [len_b, len_b + kept) (its
             cache committed on its own: the gap up to M, and anything past its length, is never
             visible to it), then the solo round's commit (`DecodeSession._commit`).

So each request's tokens are its solo run's, token for token, at T=0 and at T>0 (its draws keyed by
its own seed and positions), whatever the others do or when they finish (tests/test_batch.py). The
drafter runs once per step for every request's block (`DraftContext.draft_many`: its linear layers
and lm_head over all the blocks' rows, attention per request over its own context); with int8
activations quantized per call, that pass can propose other tokens than a solo pass by rounding,
never commit other ones. `batch_draft=False` drafts request by request (each request then is its
solo run round for round).

Two batch plans size every request's tree together, from the profile's verify cost at a batch
(`taps.batch_cost`): one width for the whole forward, the one that maximises the batch's expected
tokens per second (`shared_width`), each request then verifying its best nodes up to that width:
    taps-batch   batch-aware TAPS: each request's TAPS pool and path-conditioned reach, its tree the
                 prefix-closed top of its reach;
    chain-batch  the confidence-scheduled chain, in the manner of DSpark in vLLM: each request's
                 drafter chain (argmax per depth) with the same estimator's reach as its survival,
                 cut at the shared width.
Both run the TAPS settings given (estimator, budget: the widest tree a request may get).
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import torch

from .batch_cost import host_seconds, of_profile, plan_rates, plan_step, probe_wait
from .config import DecodeConfig
from .fast_drafter import DraftContext
from .pair import ModelPair
from .policies import AR, TAPS
from .record import Round
from .selectors import DFlashSelector, Selector, TapsSelector
from .session import DecodeSession
from .target_cache import TargetCache
from .timing import StageTimer
from .tree import DraftTree
from .verify import HeadRows, target_body_batch, walk

__all__ = ["BatchSession", "PLANS", "batch_inputs"]

REALISED_PRIOR = 4.0     # expected draft tokens at a factor of 1 that a plan's realised reach starts from

PLANS = {"taps-batch": "TAPS (batch-aware)", "chain-batch": "confidence chain"}


class ChainSelector:
    """The confidence-scheduled chain's per-request part: DFlash's pool (the drafter's argmax chain),
    TAPS's estimate (the session's estimator's reach) and the default selection (its first `budget`
    nodes). Not a registered policy (`taps.policies`): it runs only in a batch plan, which sets the
    budget per round."""

    policy = TAPS                    # what the session asks of it: a drafter and an estimator
    pool = DFlashSelector.pool
    estimate = TapsSelector.estimate
    select = Selector.select


class BatchSession:
    """Decode `prompts` together with one `config` (a `DecodeSession` per request, one shared target
    cache and verify forward)."""

    def __init__(self, pair: ModelPair, prompts: list[str | list[int]], config: DecodeConfig | None = None,
                 profile=None, plan: str | None = None, batch_draft: bool = True, **overrides):
        if not prompts:
            raise ValueError("a batch needs at least one prompt")
        self.pair = pair
        self.plan = plan
        self.batch_draft = batch_draft               # one drafter pass for every request's block
        self.batch_verify = None
        if plan is not None:
            if plan not in PLANS:
                raise ValueError(f"unknown batch plan '{plan}': choose one of {', '.join(PLANS)}")
            self.batch_verify = of_profile(profile)
            if self.batch_verify is None:
                raise ValueError(f"the batch plan '{plan}' sizes trees from the verify cost at a batch, and this "
                                 "latency profile has none: measure it with `python -m taps.bench --batch ... "
                                 "--measure`")
            overrides = {**overrides, "selector": TAPS.name, "taps_mode": "reach"}
        self.requests = [DecodeSession(pair, prompt, config, profile=profile, **overrides) for prompt in prompts]
        if plan == "chain-batch":
            for request in self.requests:
                request.selector = ChainSelector()
        self.widths: list[tuple[int, int]] = []      # per step: (requests verified, the forward's width)
        self.drafted: list[bool] = []                # per step: whether its requests drafted (a plan may not)
        self.step_s: list[float] = []                # per step: its wall-clock seconds here
        self._curves: dict[int, np.ndarray] = {}     # a plan's reach curves per request: a running mean
        self._drafted_once: set[int] = set()         # requests with a drafted round (their curve their own)
        saved = self._saved_curve() if plan == "taps-batch" else None
        if saved is not None:                        # batch-aware TAPS starts from the pair's saved curve
            self._curves = dict.fromkeys(range(len(prompts)), saved)
        self._plain = 0                              # a plan's plain steps since it last drafted
        self._judged = None                          # a plan's judgement of its running estimate (`_drafts_now`)
        self._realised = [0.0, 0.0]                  # a plan's verified rounds: reach expected, draft tokens accepted
        self._host_s: dict[int, tuple[float, float]] = {}    # a plan's host costs per batch size (`_hosts`)
        caches = [r.cache for r in self.requests]
        if not all(isinstance(c, TargetCache) for c in caches):
            raise ValueError("batched decoding needs a target whose layers are all full attention (a TargetCache)")
        self.lengths = [len(r.tokens) - 1 for r in self.requests]      # each request's cached positions
        room = max(len(r.prompt_ids) + r.config.max_new_tokens for r in self.requests)
        room += max(r.config.budget for r in self.requests) + 2
        layers, heads, dim, dtype = self._cache_shape(caches)
        self.cache = TargetCache(layers, room)
        self.cache.storage = torch.zeros(layers, 2, len(prompts), heads, room, dim, dtype=dtype, device=pair.device)
        for b, (request, cache) in enumerate(zip(self.requests, caches)):
            if self.lengths[b]:                   # a one-token prompt has nothing cached: its root is all it is
                self.cache.storage[:, :, b, :, :self.lengths[b], :] = cache.storage[:, :, 0, :, :self.lengths[b], :]
            request.cache = None                  # its cache is now this batch's row b
        for layer in self.cache.layers:
            layer.length = max(self.lengths)

    def _saved_curve(self) -> np.ndarray | None:
        """The reach curve batch-aware TAPS judges by until a request has drafted (its first drafted
        round's curve then replaces it): the cautious curve of a validation pool's best calibrated
        reaches at these settings, saved with the pair's reach calibration (`Calibration.reach_curve`);
        None without one (the plan then drafts first, to see)."""
        cfg, shipped = self.requests[0].config, getattr(self.pair, "calibration", None)
        if shipped is None or cfg.calibration == "off":
            return None
        return shipped.reach_curve(cfg.estimator, cfg.temperature, cfg.budget)

    def _cache_shape(self, caches: list[TargetCache]) -> tuple[int, int, int, torch.dtype]:
        """(layers, kv heads, head dim, dtype) of the target's cache: read off a prefilled request's,
        or from the target when every prompt is one token (nothing prefilled)."""
        filled = next((c.storage for c in caches if c.storage is not None), None)
        if filled is not None:
            layers, _, _, heads, _, dim = filled.shape
            return layers, heads, dim, filled.dtype
        cfg = self.pair.target.config
        dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        return len(caches[0].layers), cfg.num_key_value_heads, dim, self.pair.target.get_input_embeddings().weight.dtype

    @property
    def finished(self) -> bool:
        return all(r.finished for r in self.requests)

    @property
    def rounds(self) -> list[list[Round]]:
        return [r.rounds for r in self.requests]

    def run(self) -> list[list[Round]]:
        while not self.finished:
            self.step()
        return self.rounds

    @torch.inference_mode()
    def step(self) -> list[Round | None]:
        """One round of every request still running (None for those that have finished)."""
        if self.finished:
            raise RuntimeError("every request of this batch has finished")
        pair, began = self.pair, time.perf_counter()
        active = [b for b, r in enumerate(self.requests) if not r.finished]
        self._draft_s: dict[int, float] = {}          # this step's shared drafter pass, per request in it
        timers = {b: StageTimer(pair.device) for b in active}
        if self.plan:
            chosen = self._planned(active, timers)
        else:
            drafted = self._drafts(active, timers)
            chosen = {b: self._round(b, timers[b], drafted.get(b)) for b in active}
        self.widths.append((len(active), max(chosen[b][3].size for b in active)))
        self.drafted.append(any(chosen[b][0] is not None for b in active))      # AR never drafts
        past = max(self.lengths)                     # every tree is written after the longest cached request
        shared = StageTimer(pair.device)
        with shared("verify"):
            hidden, features = self._verify({b: chosen[b][3] for b in active}, past)
        out: list[Round | None] = [None] * len(self.requests)
        for b in active:
            request, (lattice, pool, selected, tree) = self.requests[b], chosen[b]
            cfg, start = request.config, self.lengths[b]
            timer = timers[b]
            with timer("verify"):
                head = HeadRows(pair.target, hidden[b, :len(tree.tokens)])
                result = walk(tree, head, cfg.temperature, cfg.seed, start)
            with timer("commit"):
                keep = [0] + result.accepted
                self._compact(b, past, keep)
                record = request._commit(lattice, pool, selected, tree, head, result,
                                         None if features is None else features[b])
            record.timings = dict(timer.seconds)
            record.timings["verify"] = record.timings.get("verify", 0.0) + shared.seconds["verify"]
            record.timings["draft"] = record.timings.get("draft", 0.0) + self._draft_s.get(b, 0.0)
            request.rounds.append(record)
            if self.plan and record.verified_nodes:          # the plan's realised reach (`_realised`)
                self._realised[0] += record.expected_tau - 1.0
                self._realised[1] += len(record.accepted)
            out[b] = record
        self.step_s.append(time.perf_counter() - began)
        return out

    def _round(self, b: int, timer: StageTimer, drafted: tuple | None) -> tuple:
        """Request b's round as its solo run chooses it (draft, pool, estimate, select), its block
        drafted in the batch's pass when `drafted`: (lattice, pool, selected, tree)."""
        request = self.requests[b]
        lattice, pool = request._pool(timer, drafted)
        with timer("select"):
            return (lattice, pool, *request._select(pool, request.config))

    def _planned(self, active: list[int], timers: dict) -> dict:
        """The batch plan's round: every active request's draft, pool and reach, one width for the
        whole forward (`plan_step`, from the profile's costs at this batch), then each request's best
        nodes up to it; or, when drafting does not pay at this batch by the requests' reach curves (a
        running mean over their drafted rounds), a plain autoregressive step (`_plain_round`)."""
        cfg = self.requests[active[0]].config
        if not self._drafts_now(active):
            return {b: self._plain_round(b) for b in active}
        drafted = self._drafts(active, timers)
        pools = {b: self.requests[b]._pool(timers[b], drafted.get(b)) for b in active}
        current = {}
        for b in active:
            reach = np.zeros(cfg.budget)
            top = np.sort(pools[b][1].reach[1:])[::-1][:cfg.budget]
            reach[:len(top)] = top
            current[b] = reach
            # the saved curve stands in only until a request's first drafted round
            self._curves[b] = 0.5 * (self._curves[b] + reach) if b in self._drafted_once else reach
            self._drafted_once.add(b)
        self._judged = None                          # the running estimate moved: judge it again
        factor = self._realised_factor()
        _, width = plan_step([factor * current[b] for b in active], *self._hosts(len(active)), self.batch_verify,
                             cfg.budget)
        settings = replace(cfg, budget=width)
        chosen = {}
        for b in active:
            with timers[b]("select"):
                chosen[b] = (*pools[b], *self.requests[b]._select(pools[b][1], settings))
        return chosen

    def _hosts(self, batch: int) -> tuple[float, float]:
        """Per request, a drafted round's and a plain round's seconds besides the forward at this
        batch size, from the profile (`host_seconds`), read once per size."""
        if batch not in self._host_s:
            request = self.requests[0]
            label = TAPS.run_label(request.config.estimator)
            self._host_s[batch] = (host_seconds(request.profile, self.batch_verify, label, batch),
                                   host_seconds(request.profile, self.batch_verify, AR.run_label(), batch))
        return self._host_s[batch]

    def _realised_factor(self) -> float:
        """The draft tokens the batch's verified trees had accepted per token their reach expected,
        over the plan's rounds so far (with REALISED_PRIOR expected tokens at 1 to start): the reach of
        a tree's best nodes runs high (they are the best because their estimates are), and a plan
        that believed it would draft where drafting does not pay. The plan scales every reach by it."""
        expected, accepted = self._realised
        return (accepted + REALISED_PRIOR) / (expected + REALISED_PRIOR)

    def _drafts_now(self, active: list[int]) -> bool:
        """Whether the plan drafts this step: always until every active request has drafted once
        (nothing to judge by yet); then when drafting pays by the running estimate (`plan_rates`),
        and, when it does not, once after `probe_wait` plain steps in a row, to see (often when it
        nearly pays, seldom or never when far from it), if at least as many steps are left for what
        it learns to pay back in (`_steps_left`). Only the profile and the decoded rounds decide,
        never the clock. The judgement is kept until the estimate or the batch changes, so a run of
        plain steps judges once."""
        if all(b in self._curves for b in active):
            if self._judged is None or self._judged[0] != active:
                factor = self._realised_factor()
                plan = plan_rates([factor * self._curves[b] for b in active], *self._hosts(len(active)),
                                  self.batch_verify, self.requests[active[0]].config.budget)
                self._judged = (list(active), plan, probe_wait(plan))
            _, plan, wait = self._judged
            if not plan.drafts and (self._plain < wait or self._steps_left(active) <= wait):
                self._plain += 1
                return False
        self._plain = 0
        return True

    def _steps_left(self, active: list[int]) -> int:
        """Plain steps until every active request has its max_new_tokens (or, sooner, its context is
        full): the most a probe's lesson can be used for (a request may stop sooner, at its EOS)."""
        return max(min(r.config.max_new_tokens - len(r.generated), r.pair.max_context - len(r.tokens))
                   for r in (self.requests[b] for b in active))

    def _plain_round(self, b: int) -> tuple:
        """Request b's round in a step that does not draft, as cheap as an autoregressive one: its
        root alone, no drafter pass, no pool, estimate or selection; the target's context features
        of the token it commits are queued in its drafter context (no drafter work), projected in one
        pass with the others queued when the batch drafts again. (lattice, pool, selected, tree)."""
        request = self.requests[b]
        request._begin_round()
        root = DraftTree.root_only(request.tokens[-1])
        return None, root, np.zeros(1, dtype=np.int64), root

    def _drafts(self, active: list[int], timers: dict) -> dict:
        """Every active request's block through the drafter in one pass (`DraftContext.draft_many`,
        the lm_head once over all): request -> (hidden states, logits), its draft stage charged the
        whole pass (`_draft_s`, as each is charged the whole verify forward). Empty when the batch
        drafts request by request (`batch_draft` off, fewer than two drafting)."""
        depths = {b: self.requests[b].draft_depth() for b in active if self.requests[b].draft_context is not None}
        drafting = [b for b, depth in depths.items() if depth >= 0]
        if not self.batch_draft or len(drafting) < 2:
            return {}
        requests = [self.requests[b] for b in drafting]
        shared = StageTimer(self.pair.device)
        with shared("draft"):
            hiddens = DraftContext.draft_many([r.draft_context for r in requests], [r.tokens[-1] for r in requests],
                                              [depths[b] for b in drafting], self.pair.embed)
            logits = requests[0].draft_context.logits(torch.cat(hiddens)).split([h.shape[0] for h in hiddens])
        self._draft_s = dict.fromkeys(drafting, shared.seconds["draft"])
        return {b: (hidden, logit) for b, hidden, logit in zip(drafting, hiddens, logits)}

    def _verify(self, trees: dict, past: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The target's forward over every active request's tree, written to the cache at `past`:
        hidden states [B, N, d] and context features [B, N, F] (or None); rows past a request's tree
        are padding."""
        pair, cache = self.pair, self.cache
        ids, positions, mask = batch_inputs(trees, self.lengths, past, pair.dtype)
        for layer in cache.layers:
            layer.length = past                              # the trees go at [past, past + width)
        layers = pair.feature_layers if any(r.draft_context is not None for r in self.requests) else None
        device = cache.storage.device
        return target_body_batch(pair.target, cache, ids.to(device), positions.to(device), mask.to(device), layers)

    def _compact(self, b: int, past: int, keep: list[int]) -> None:
        """Request b's accepted tree entries (tree rows `keep`, in order, written at `past`) moved down
        to its own cached length, in its own row of the cache."""
        length = self.lengths[b]
        storage = self.cache.storage
        source = torch.as_tensor([past + k for k in keep], device=storage.device)
        storage[:, :, b, :, length:length + len(keep), :] = storage[:, :, b].index_select(-2, source)
        self.lengths[b] = length + len(keep)


def batch_inputs(trees: dict, lengths: list[int], past: int, dtype: torch.dtype):
    """Input ids and positions [B, N] and the additive mask [B, 1, N, past + N] of one forward over
    the trees of the requests in `trees` (request index -> DraftTree), each padded to the widest N:
    a tree row sees its request's cached positions [0, lengths[b]) and its ancestors in the block at
    [past, past + n_b); every other row (padding, a finished request's) sees only itself."""
    batch = len(lengths)
    width = max(len(tree.tokens) for tree in trees.values())
    ids = torch.zeros(batch, width, dtype=torch.long)
    positions = torch.zeros(batch, width, dtype=torch.long)
    mask = torch.full((batch, 1, width, past + width), torch.finfo(dtype).min, dtype=dtype)
    rows = torch.arange(width)
    mask[:, 0, rows, past + rows] = 0.0                  # every row sees itself (padding rows only that)
    for b in range(batch):
        positions[b, :] = lengths[b]
    for b, tree in trees.items():
        n, length = len(tree.tokens), lengths[b]
        ids[b, :n] = torch.as_tensor(tree.tokens)
        positions[b, :n] = length + torch.as_tensor(tree.depths)
        mask[b, 0, :n, :length] = 0.0
        block = mask[b, 0, :n, past:past + n]
        block[torch.as_tensor(tree.ancestor_matrix())] = 0.0
    return ids, positions, mask
