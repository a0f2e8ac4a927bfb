"""An honest lossless verdict: when a run's tokens differ from AR's, where, by what margin, and why.

Every token the engine commits is the target's own pick, so in exact arithmetic a run equals plain
decoding token for token. In low precision it need not: a tree verify multiplies many rows at once
(with a mask), an AR step one row, and the two round differently. Where two tokens' scores tie to
within that rounding, the runs can pick differently, and from there on the texts differ. That is
a near-tie, not a bug. A token the target did not pick by a wide margin is a bug.

`lossless_verdict` finds the first generated position where the tokens differ and measures the
target's margin there in both runs: the run's own token against AR's, in the logits each run's own
forward produced (at a near-tie these two are the target's top two, so this is its top-2 margin;
a wrong token may rank anywhere, and the margin then says how far below the target's pick it was).
It gets those logits by replaying the run's verify forwards (the verified trees of its `Round`
records, with a fresh cache, the same prefill, the same rows and masks and the same cache
compaction, up to the round that chose the token), and AR's by replaying AR's one-row steps: on a
deterministic device these are the very numbers each run compared (rather than storing margins
while decoding, which would cost every round of every run). Without round records, the run's side
is one multi-row forward over the shared prefix (a verify's shape, not its exact rows). The cost
is one target forward per round up to the difference, and only when the tokens differ.

The threshold (`near_tie_threshold`) is derived from the dtype's machine epsilon, scaled by what
rounding can move a logit by. A value stored in the dtype carries a relative error of up to eps
(`torch.finfo(dtype).eps`: 2^-7 for bfloat16, whose 8-bit significand spaces numbers near |x| by
eps*|x| or half that); a float32 sum of d products adds about sqrt(d) * eps(float32) of relative
error; and a tree row and an AR row take these errors independently through every one of the L
layers of the residual stream, so they add like a random walk, by sqrt(L). The logits' own
magnitude |x| (the larger of the two disputed logits in either run) sets the scale:

    threshold = ULPS * sqrt(L) * (eps(dtype) + sqrt(d) * eps(accumulation)) * max(|x|, 1)

with the accumulation in float32 (float64 for a float64 pair) and ULPS = 4. Measured on random
tiny pairs in bfloat16 (hidden 32-128, 4-36 layers; every position of a DDTree run replayed against
AR's, 600-1,400 positions each), the change of the top-two gap between the two forwards has a
median of 0.22-0.26 and a 99.9th percentile of 1.5-2.9 of these units (before the factor ULPS),
its largest 4.05 (where the runs agreed); the margins at the 66 real divergences among them
reached 2.05. The shipped pair (12 layers) in bfloat16: at most 0.63; float16 and float32 tiny
pairs: at most 3.6 and 1.6. So 4 units cover what rounding did there, and a margin above it is
called a bug. In bfloat16 at 36
layers the threshold is 24 eps * |x|, 0.19 * |x|: bfloat16 is that coarse; `--dtype float32` (or
`strict_verdict`, which reruns AR and the run on a float32 copy of the pair) is the strict check,
where the same rule allows about 1e-4 * |x|.

At T > 0 the choice is argmax(logits / T + Gumbel noise) with the same noise in both runs, so the
margin is T times the gap of those scores: in logit units, against the same threshold.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch

from .config import DecodeConfig
from .policies import AR
from .target_cache import make_target_cache
from .tree import DraftTree, TreeMaskBuffer
from .verify import HeadRows, choose_token, compact_cache, gumbel_noise, prefill, target_body, walk

ULPS = 4                       # the threshold in rounding units (see the module)
KINDS = ("identical", "near-tie", "bug")
LOW_PRECISION = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class Verdict:
    """Whether a run wrote AR's tokens, and if not, where it left them and why."""

    same: bool
    kind: str                        # identical | near-tie | bug
    position: int | None = None      # generated index (from 0) of the first difference
    run_token: int | None = None
    ar_token: int | None = None
    margin_run: float | None = None  # the run's token over AR's, in the run's logits there
    margin_ar: float | None = None   # AR's token over the run's, in AR's logits there
    threshold: float | None = None
    dtype: str = ""
    text: str = "yes"                # short, for tables: "yes", "near-tie at token 38 (...)", "NO: bug at ..."
    detail: str = ""                 # the same in sentences, with what to do

    @property
    def margin(self) -> float | None:
        """The larger of the two margins' sizes (what the verdict compares with the threshold)."""
        if self.margin_run is None or self.margin_ar is None:
            return None
        return max(abs(self.margin_run), abs(self.margin_ar))

    def as_dict(self) -> dict:
        return asdict(self)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def rounding_unit(dtype: torch.dtype, layers: int = 1, hidden: int = 0) -> float:
    """The relative change of a logit that rounding makes likely between a tree row and an AR row
    of an L-layer, width-d target in `dtype`: sqrt(L) * (eps(dtype) + sqrt(d) * eps(accumulation))."""
    accumulation = torch.float64 if dtype == torch.float64 else torch.float32
    eps, acc = float(torch.finfo(dtype).eps), float(torch.finfo(accumulation).eps)
    return math.sqrt(max(layers, 1)) * (eps + math.sqrt(max(hidden, 0)) * acc)


def near_tie_threshold(dtype: torch.dtype, magnitude: float, layers: int = 1, hidden: int = 0) -> float:
    """The largest margin rounding can account for at logits of this magnitude (see the module):
    ULPS rounding units of max(|magnitude|, 1)."""
    return ULPS * rounding_unit(dtype, layers, hidden) * max(abs(float(magnitude)), 1.0)


def strict_dtype(dtype: torch.dtype) -> str:
    """The dtype a strict check reruns in: float32 for a low-precision pair, float64 for float32."""
    return "float32" if dtype in LOW_PRECISION else "float64"


def first_difference(run_tokens: list[int], ar_tokens: list[int]) -> int | None:
    """The first generated index where the two differ (a length difference counts), or None."""
    for i, (a, b) in enumerate(zip(run_tokens, ar_tokens)):
        if a != b:
            return i
    return None if len(run_tokens) == len(ar_tokens) else min(len(run_tokens), len(ar_tokens))


# ------------------------------------------------------------------------------------ replaying
@dataclass
class _Step:
    """One target forward of a run: the verified tree, its root's position, and the rows of the
    path it committed (root first), which are also the cache rows it kept."""

    tree: DraftTree
    start: int
    path: list[int]


def _tree(tokens: list[int], parents: list[int], depths: list[int]) -> DraftTree:
    n = len(tokens)
    zeros = np.zeros(n)
    return DraftTree(tokens=np.asarray(tokens, dtype=np.int64), parents=np.asarray(parents, dtype=np.int64),
                     depths=np.asarray(depths, dtype=np.int64), ranks=np.zeros(n, dtype=np.int64),
                     marginal_logprob=zeros, path_logprob=zeros, reach=np.ones(n))


def steps_from_rounds(rounds) -> list[_Step]:
    """Each round's verified tree (rows in the session's order: pool indices ascending) and the
    path it accepted."""
    steps = []
    for r in rounds:
        chosen = sorted(int(i) for i in r.selected)
        row = {node: i for i, node in enumerate(chosen)}
        parents = [-1] + [row[r.pool_parents[node]] for node in chosen[1:]]
        tree = _tree([r.pool_tokens[i] for i in chosen], parents, [r.pool_depths[i] for i in chosen])
        steps.append(_Step(tree, int(r.start), [0] + [row[int(a)] for a in r.accepted]))
    return steps


def one_row_steps(prompt_ids: list[int], tokens: list[int], position: int) -> list[_Step]:
    """AR's forwards up to generated index `position`: one row each, after the prefill."""
    sequence = list(prompt_ids) + list(tokens)
    first = len(prompt_ids) - 1
    return [_Step(_tree([sequence[first + k]], [-1], [0]), first + k, [0]) for k in range(position + 1)]


def chain_step(prompt_ids: list[int], tokens: list[int], position: int) -> list[_Step]:
    """One multi-row forward over the prompt's last token and the generated tokens before
    `position`, causal: a verify's shape for the shared prefix, when no round records are kept."""
    rows = [prompt_ids[-1], *tokens[:position]]
    tree = _tree(rows, list(range(-1, len(rows) - 1)), list(range(len(rows))))
    return [_Step(tree, len(prompt_ids) - 1, list(range(len(rows))))]


@torch.inference_mode()
def replay_logits(pair, prompt_ids: list[int], steps: list[_Step], position: int, temperature: float = 0.0,
                  seed: int = 0, compiled: bool = False) -> torch.Tensor:
    """The target's logits [V] (float32) that chose generated token `position`, by redoing the
    run's forwards as a session does them: the same prefill, cache kind (`make_target_cache`) and
    mask buffer (`TreeMaskBuffer`), each step's rows and mask, the cache compacted to the path the
    run kept, and the lm_head products the walk makes. `compiled`: the run verified through
    `torch.compile`d layers (`DecodeSession(compile_verify=True)`)."""
    target = pair.target
    rows = max(len(step.tree.tokens) for step in steps)
    room = min(len(prompt_ids) + position, pair.max_context) + rows + 1
    cache = make_target_cache(target.config, capacity=room)
    masks = TreeMaskBuffer(pair.dtype, pair.device, rows=rows, columns=room)
    prefill(target, cache, prompt_ids, None)
    wanted = len(prompt_ids) + position          # the token's position in the sequence
    for step in steps:
        depth = wanted - step.start - 1
        ids, pos, mask = masks.verify_inputs(step.tree, step.start, step.start)
        hidden, _ = target_body(target, cache, ids, pos, mask, None, compiled=compiled)
        if 0 <= depth < len(step.path):
            head = HeadRows(target, hidden)
            walk(step.tree, head, temperature, seed, step.start)      # the products the run made
            return head.get([step.path[depth]])[0]
        compact_cache(cache, step.start, step.path)
    raise ValueError(f"the run's rounds do not reach generated token {position + 1}")


# ------------------------------------------------------------------------------------ the verdict
def lossless_verdict(pair, prompt_ids: list[int], run_tokens: list[int], ar_tokens: list[int],
                     temperature: float = 0.0, seed: int = 0, run_rounds=None, ar_rounds=None,
                     compiled: tuple[bool, bool] = (False, False)) -> Verdict:
    """Compare a run's generated tokens with AR's (same prompt, settings and seed). Identical: kind
    "identical". Otherwise the first difference, the target's margin there in both runs (from the
    run's `Round` records when given, see the module) and kind "near-tie" when both margins are
    below `near_tie_threshold`, else "bug". `compiled`: whether the run and AR verified through
    `torch.compile`d layers."""
    dtype = dtype_name(pair.dtype)
    position = first_difference(list(run_tokens), list(ar_tokens))
    if position is None:
        return Verdict(same=True, kind="identical", dtype=dtype, text="yes",
                       detail="The run wrote AR's tokens, every one.")
    if position >= min(len(run_tokens), len(ar_tokens)):
        return _length_verdict(position, len(run_tokens), len(ar_tokens), dtype)
    run_steps = (steps_from_rounds(run_rounds) if run_rounds is not None
                 else chain_step(prompt_ids, run_tokens, position))
    ar_steps = (steps_from_rounds(ar_rounds) if ar_rounds is not None
                else one_row_steps(prompt_ids, ar_tokens, position))
    run_logits = replay_logits(pair, prompt_ids, run_steps, position, temperature, seed, compiled[0]).double()
    ar_logits = replay_logits(pair, prompt_ids, ar_steps, position, temperature, seed, compiled[1]).double()
    a, b = int(run_tokens[position]), int(ar_tokens[position])
    run_scores, ar_scores = run_logits, ar_logits
    if temperature > 0:                                   # the Gumbel-max scores, in logit units
        noise = temperature * gumbel_noise(seed, len(prompt_ids) + position, run_logits.shape[-1])
        run_scores, ar_scores = run_logits + noise.to(run_logits.device), ar_logits + noise.to(ar_logits.device)
    margin_run = float(run_scores[a] - run_scores[b])
    margin_ar = float(ar_scores[b] - ar_scores[a])
    magnitude = max(abs(float(x)) for x in (run_logits[a], run_logits[b], ar_logits[a], ar_logits[b]))
    config = pair.target.config
    threshold = near_tie_threshold(pair.dtype, magnitude, config.num_hidden_layers, config.hidden_size)
    margin = max(abs(margin_run), abs(margin_ar))
    kind = "near-tie" if margin < threshold else "bug"
    texts = pair.token_texts([a, b])
    return Verdict(same=False, kind=kind, position=position, run_token=a, ar_token=b, margin_run=margin_run,
                   margin_ar=margin_ar, threshold=threshold, dtype=dtype,
                   text=verdict_text(kind, position, margin, threshold),
                   detail=_detail(kind, position, (a, b), texts, margin_run, margin_ar, threshold, pair.dtype,
                                  magnitude, choose_token(ar_logits, temperature, seed, len(prompt_ids) + position)))


def verdict_text(kind: str, position: int | None, margin: float | None, threshold: float | None) -> str:
    """The short form tables show: "yes", "near-tie at token 38 (margin 0.031 < 0.062)",
    "NO: bug at token 13 (margin 4.1)"."""
    if kind == "identical":
        return "yes"
    if margin is None:
        return f"NO: bug at token {position + 1} (the lengths differ)"
    if kind == "near-tie":
        return f"near-tie at token {position + 1} (margin {margin:.2g} < {threshold:.2g})"
    return f"NO: bug at token {position + 1} (margin {margin:.2g})"


def _length_verdict(position: int, run_len: int, ar_len: int, dtype: str) -> Verdict:
    detail = (f"The run wrote AR's tokens but stopped after {run_len} of them where AR wrote {ar_len} "
              f"(or went on): the same tokens under the same settings must stop at the same place. A bug.")
    return Verdict(same=False, kind="bug", position=position, dtype=dtype,
                   text=verdict_text("bug", position, None, None), detail=detail)


def _detail(kind, position, tokens, texts, margin_run, margin_ar, threshold, dtype, magnitude, ar_pick) -> str:
    a, b = tokens
    name = dtype_name(dtype)

    def said(margin: float) -> str:
        return f"{margin:.3g}" + (f" (an exact tie in {name}: the lower token id wins)" if margin == 0 else "")

    head = (f"The run left AR's tokens at generated token {position + 1}: it wrote {texts[0]!r} (id {a}), AR "
            f"wrote {texts[1]!r} (id {b}). The target's margin of the run's token over AR's is {said(margin_run)} "
            f"in the run's forward; of AR's over the run's, {said(margin_ar)} in AR's.")
    rule = (f"the rounding threshold {threshold:.3g} ({ULPS} x {threshold / ULPS / max(magnitude, 1.0):.3g} x "
            f"|logit| {max(magnitude, 1.0):.3g}: {name}'s eps {float(torch.finfo(dtype).eps):.3g} through the "
            f"target's layers)")
    if kind == "near-tie":
        return (f"{head} Both are below {rule}: diverged at a near-tie ({name} rounding), which a tree forward and "
                f"an AR step round differently; not a bug. For a strict check, rerun with --dtype "
                f"{strict_dtype(dtype)}.")
    note = "" if ar_pick == b else " (AR's replayed forward did not pick AR's token either)"
    return (f"{head} That is above {rule}{note}: the engine committed a token its target did not pick. "
            f"A bug: please report it with this prompt and these settings.")


# ------------------------------------------------------------------------------------ strict
def float_copy(pair, dtype: str | torch.dtype):
    """The pair with its target and drafter copied to `dtype` (float32 or float64) on the same
    device: the same weights, computed in higher precision. It holds a second copy of the weights
    while it lives (4 bytes a parameter in float32)."""
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"a strict check runs in float32 or float64, not {dtype_name(dtype)}")
    target = copy.deepcopy(pair.target).to(dtype).eval()
    drafter = copy.deepcopy(pair.drafter).to(dtype).eval() if pair.drafter is not None else None
    return replace(pair, target=target, drafter=drafter, dtype=dtype, drafter_precision="same", _texts={})


def strict_verdict(pair, prompt: str | list[int], config: DecodeConfig, profile=None) -> Verdict:
    """Rerun AR and the run `config` describes on a copy of the pair in `strict_dtype` (float32 for
    a bfloat16 pair) and give that rerun's verdict: "identical" clears a low-precision near-tie, a
    "bug" there is one. The oracle's future tokens come from the copy's own AR run."""
    from .session import DecodeSession

    strict = float_copy(pair, strict_dtype(pair.dtype))
    ar = DecodeSession(strict, prompt, config.with_run(AR.name), profile=profile)
    ar.run()
    run = DecodeSession(strict, ar.prompt_ids, config, profile=profile,
                        oracle_tokens=ar.generated if config.policy.hindsight else None)
    run.run()
    return lossless_verdict(strict, ar.prompt_ids, run.generated, ar.generated, config.temperature, config.seed,
                            run_rounds=run.rounds, ar_rounds=ar.rounds)


def with_strict(verdict: Verdict, strict: Verdict) -> Verdict:
    """A low-precision verdict with its strict rerun's result added: the strict kind when that is
    a bug, and both texts."""
    kind = "bug" if strict.kind == "bug" else verdict.kind
    note = ("identical" if strict.same else strict.text)
    return replace(verdict, kind=kind, text=f"{verdict.text}; {strict.dtype}: {note}",
                   detail=f"{verdict.detail} The strict check, rerun in {strict.dtype}: {strict.detail}")


# ------------------------------------------------------------------------------------ many runs
def combine(verdicts: list[dict]) -> str:
    """One cell for a group of runs (a bench row over prompts): "yes" when every run wrote AR's
    tokens; otherwise the worst verdict's text (a bug before a near-tie), with how many runs of the
    group were not identical. Rows saved before verdicts existed (only `lossless`) count as
    "NO" without an explanation."""
    if not verdicts:
        return "yes"
    kinds = [v.get("verdict_kind") or ("identical" if v.get("lossless") else "bug") for v in verdicts]
    off = [i for i, k in enumerate(kinds) if k != "identical"]
    if not off:
        return "yes"
    worst = next((i for i in off if kinds[i] == "bug"), off[0])
    text = verdicts[worst].get("verdict") or "NO"
    return text if len(verdicts) == 1 else f"{text}; {len(off)} of {len(verdicts)} runs differ"
