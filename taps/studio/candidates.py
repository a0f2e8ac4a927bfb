"""The candidates view (issue 50): one round's block as a grid, what each selector did on it.

The drafter proposes, per draft position (depth), a distribution over the vocabulary; a round keeps
its DRAFT_TOP_K best tokens per depth (`Round.draft_top`). A chain that follows the drafter's argmax
(DFlash) can only use the top row; a path selector (DFlash2) walks one path through the whole grid;
a tree (DDTree, TAPS) verifies several. This module places, for one round of a run, every
selector's verified nodes on that grid (depth, drafter rank), each with its verdict, beside the
target's own token at each depth (known in hindsight: the tokens the run went on to decode, and past
them the tokens these rounds committed).

Every selector, the run's own among them, runs one real round (draft, select, verify) from the
round's position with the run's settings (`failures.probe_round`), so that all of them choose from
one and the same draft: the grid. (The run's own round drafted from a context its drafter had filled
round by round; on the shipped CPU pair the drafter's int8 projections quantize each pass's rows
together, so that draft can differ a little from a draft after the context filled in one pass. The
view names the run's own round's τ beside its own.) Below the grid, per depth, the headroom over
the run so far: how often the target's token was the drafter's top-1 there, and how often among
its top-K, on the run's own drafts (`taps.eval.metrics.candidate_recall`).

No streamlit: the Step page draws `figures.candidates_figure` of a `CandidatesView`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..config import DecodeConfig
from ..eval.metrics import candidate_recall
from ..policies import DDTREE, DFLASH, DFLASH2, TAPS, Policy, policy
from ..record import DRAFT_TOP_K, Round
from .failures import probe_round

SHOWN = (DFLASH, DFLASH2, DDTREE, TAPS)          # the selectors the grid overlays, in drawing order
SELECTOR = "selector"                            # TAPS's estimator over DFlash2's candidates: a fifth overlay


@dataclass(frozen=True)
class Overlay:
    """One selector's round on the grid: each verified draft node as (depth, drafter rank, verdict:
    accepted | rejected | waste), each verified edge as ((depth, rank), (depth, rank)) with depth 0
    the root, its τ, its verified nodes, and whether it is the run's own round or a probe."""

    name: str
    label: str
    nodes: tuple[tuple[int, int, str], ...]
    edges: tuple[tuple[tuple[int, int], tuple[int, int]], ...]
    tau: int
    verified: int
    own: bool
    estimator: str = ""

    @property
    def accepted(self) -> int:
        return sum(1 for _, _, verdict in self.nodes if verdict == "accepted")

    @property
    def key(self) -> str:
        """Its run label without the budget: `ddtree`, `taps/online`, `taps/selector` (TAPS is drawn
        twice where the pair has a path selector: with the run's estimator and over DFlash2's candidates)."""
        return f"{self.name}/{self.estimator}" if self.estimator else self.name


@dataclass(frozen=True)
class CandidatesView:
    number: int                                  # the round, counted from 1
    budget: int
    temperature: float
    k: int                                       # candidates per depth (rows)
    tokens: tuple[tuple[int, ...], ...]          # [depth][rank]
    texts: tuple[tuple[str, ...], ...]
    probs: tuple[tuple[float, ...], ...]         # the drafter's probability (at the run's temperature)
    target: tuple[int | None, ...]               # the target's own token per depth; None past what the run decoded
    target_text: tuple[str, ...]
    overlays: tuple[Overlay, ...]
    recall: tuple[dict, ...]                     # per depth over the run so far: rounds, recall@1, recall@k
    recall_rounds: int
    missing: tuple[str, ...] = ()                # selectors this pair cannot run (no path selector), with why
    root_text: str = ""                          # the round's root: the last committed token
    run: tuple[str, int, int] = ("", 0, 0)       # the run's own round: its selector's label, τ, nodes verified

    @property
    def depth(self) -> int:
        return len(self.tokens)

    def target_rank(self, depth: int) -> int | None:
        """The drafter rank of the target's token at `depth` (1-based) among the K, or None (unknown or
        not among them)."""
        token = self.target[depth - 1]
        row = self.tokens[depth - 1]
        return row.index(token) if token is not None and token in row else None


def overlay(record: Round, chosen: Policy, own: bool, top: list[list[int]]) -> Overlay:
    """`record`'s verified nodes and edges on the grid `top` (the drafter's top-K tokens per depth): a
    node's row is its token's rank there (K when it is not among them)."""
    k = len(top[0]) if top else 0
    cell = {0: (0, 0)}
    nodes, edges = [], []
    for v in record.selected[1:]:
        depth, token = record.pool_depths[v], record.pool_tokens[v]
        row = top[depth - 1] if depth <= len(top) else []
        cell[v] = (depth, row.index(token) if token in row else k)
        nodes.append((*cell[v], record.status[v]))
        edges.append((cell[record.pool_parents[v]], cell[v]))
    return Overlay(chosen.name, chosen.label, tuple(nodes), tuple(edges), record.tau, record.verified_nodes, own,
                   record.estimator if chosen.uses_estimator else "")


def shown_runs(pair, config: DecodeConfig) -> list[tuple[Policy, str]]:
    """(policy, estimator) of each overlay, in drawing order: SHOWN's (TAPS with the run's estimator,
    or the default one when the run's is the selector) and, where the pair has a path selector, TAPS
    over DFlash2's candidates (the selector estimator)."""
    runs = []
    for chosen in SHOWN:
        estimator = config.estimator if chosen.uses_estimator else ""
        if estimator == SELECTOR:
            estimator = DecodeConfig().estimator
        runs.append((chosen, estimator))
    if getattr(pair, "path_selector", None) is not None:
        runs.append((TAPS, SELECTOR))
    return runs


def candidates_view(pair, record: Round, tokens: list[int], prompt_len: int, config: DecodeConfig,
                    rounds: list[Round], profile=None, k: int = DRAFT_TOP_K) -> CandidatesView:
    """The view of `record` (a round of the run whose whole sequence so far, prompt and output, is
    `tokens`, and whose rounds so far are `rounds`), run with `config`: a round from the same
    position for each selector in SHOWN that `pair` can run, at the run's budget and temperature
    (the stop rule cuts them where it cut the run)."""
    context = tokens[: record.start + 1]
    remaining = config.max_new_tokens - (len(context) - prompt_len)
    own = policy(record.selector)
    ran: dict[tuple[str, str], Round] = {}
    missing = []
    for chosen, estimator in shown_runs(pair, config):
        if not chosen.runs_on(pair):
            missing.append(f"{chosen.label}: this pair has no trained path selector")
            continue
        settings = replace(config, selector=chosen.name, estimator=estimator or config.estimator)
        other = probe_round(pair, context, settings, chosen.name, profile=profile, index=record.index,
                            remaining=remaining)
        if other is not None:
            ran[(chosen.name, estimator)] = other
    grid_of = next((r for r in ran.values() if r.draft_top), None)
    if grid_of is None:
        raise ValueError("no selector drafted from this position: the candidates need a drafter")
    top = [list(row[:k]) for row in grid_of.draft_top]
    own_key = (own.name, record.estimator if own.uses_estimator else "")
    found = {key: overlay(r, policy(key[0]), key[0] == own.name and (not own.uses_estimator or key == own_key), top)
             for key, r in ran.items()}
    texts = pair.token_texts
    # the target's tokens after the root: what the run decoded, and past it what the rounds here committed
    known = max([list(tokens[record.start + 1:])] + [r.committed_tokens for r in ran.values()], key=len)
    target = [known[d - 1] if d <= len(known) else None for d in range(1, len(top) + 1)]
    drafting = [r for r in rounds if r.draft_top]
    recall = candidate_recall(drafting, tokens, depths=len(top), ks=(1, k))
    return CandidatesView(
        number=record.number, budget=record.budget, temperature=record.temperature, k=len(top[0]) if top else k,
        tokens=tuple(tuple(row) for row in top), texts=tuple(tuple(texts(row)) for row in top),
        probs=tuple(tuple(float(p) for p in row[:k]) for row in grid_of.draft_top_prob),
        target=tuple(target), target_text=tuple(texts([t])[0] if t is not None else "" for t in target),
        overlays=tuple(found.values()), recall=tuple(recall),
        recall_rounds=len(drafting), missing=tuple(missing), root_text=record.root_text,
        run=(own.label, record.tau, record.verified_nodes))
