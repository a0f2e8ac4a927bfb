"""Guided challenges: cards that send students into the app with a question, each with a hint, the
answer and a link (a URL path and query string in the app's shared link format) that opens the page
with the card's settings. Plain Python (no streamlit): the Learn page draws the cards.

A card's answer is a template over facts that the engine gives *on the machine at hand*: float
kernels differ between CPUs (AVX-512, AVX2, ARM), near-ties in the drafter's ranking fall the other
way and a tree, a tau or a speed-up moves, so no answer pins a number measured on one CPU.
`check(card, pair)` runs the engine (or the toy) at the card's link settings, through the same
parser the pages read links with (`taps.studio.link`), and says whether the card's claim (`holds`)
is true there and writes the answer from what it found; `CardAnswers` does that once per pair and
card (each card names its own profile), as background jobs of the decode service, for the Learn
page. Every number an answer quotes is on the page its card opens, in the view and at the budget it
opens (a counter, a figure's narration or curve, a lane, the profile's notice):
tests/test_challenges.py checks each claim and reads each answer's numbers off that page, on
whatever CPU runs it.
"""

from __future__ import annotations

import string
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from .. import roofline
from ..batch import PLANS
from ..config import DecodeConfig
from ..eval.prompts import example_prompts
from ..policies import DDTREE, DFLASH, DFLASH2, TAPS
from ..session import DecodeSession
from . import toy
from .failures import compare_rankings, probe_round, visible_text
from .lesson import expected_rate_curve
from .link import (
    RaceLink,
    StepLink,
    learn_link_params,
    link_url,
    page_defaults,
    parse_learn_link,
    parse_race_link,
    parse_step_link,
    race_link_params,
    step_link_params,
)
from .page_profile import page_profile

SHIPPED_PAIR = "taps-code-10m"
REFERENCE = "reference-cpu-taps-code-10m"            # the shipped reference CPU profile's id
H200_8B = "roofline-h200-qwen3-8b"                   # the roofline estimate: NVIDIA H200, a Qwen3-8B-shaped target
PAGES = {"Step_through": "app_pages/1_Step_through.py", "Race_and_sweep": "app_pages/2_Race_and_sweep.py",
         "Learn": "app_pages/4_Learn.py"}


MARKDOWN_SPECIALS = "\\`*_{}[]<>()#+-.!|$~"


def markdown_text(text: str) -> str:
    """`text` with every markdown (and Streamlit LaTeX) special character backslash-escaped."""
    return "".join("\\" + c if c in MARKDOWN_SPECIALS else c for c in text)


@dataclass
class Challenge:
    key: str
    title: str
    task: str
    hint: str
    answer_template: str             # str.format over the facts (`quotes` names them)
    page: str                        # a key of PAGES
    params: dict[str, str]           # the link's query parameters
    facts: Callable[..., dict] = field(repr=False, default=None)    # (card, pair) -> what the engine gives
    holds: Callable[[dict], bool] = field(repr=False, default=None)  # the claim itself, on those facts
    search: tuple[dict[str, str], ...] = ()   # a "find a round" card: link changes tried in order after its own
                                              # link (the first where the claim holds on this machine)

    @property
    def quotes(self) -> tuple[str, ...]:
        """The facts the answer quotes (its template's fields), in order of first use."""
        names = [name for _, name, _, _ in string.Formatter().parse(self.answer_template) if name]
        return tuple(dict.fromkeys(names))

    def answer(self, facts: dict) -> str:
        """The answer (markdown) written from `facts` (what `check` found on this machine); text facts,
        tokens among them, escaped so that `__eq__` reads as itself, not as bold "eq"."""
        return self.answer_template.format(**{k: markdown_text(v) if isinstance(v, str) else v
                                              for k, v in facts.items()})

    @property
    def link(self) -> str:
        """URL path and query string: `/Step_through?example=merge&selector=ddtree&...`."""
        return link_url(self.page, self.params)

    @property
    def page_file(self) -> str:
        """The page's script, for `st.page_link(..., query_params=card.params)`."""
        return PAGES[self.page]


@dataclass
class Verdict:
    ok: bool
    facts: dict
    problems: list[str]
    answer: str = ""                 # the card's answer written from `facts` ("" when it cannot be)
    seconds: float = 0.0             # how long working it out took
    params: dict[str, str] = field(default_factory=dict)   # the link that shows it (a found round's)


def _search(examples: tuple[str, ...], rounds: range) -> tuple[dict[str, str], ...]:
    return tuple({"example": e, "round": str(r)} for e in examples for r in rounds)


def check(card: Challenge, pair) -> Verdict:
    """Run the card's claim on `pair` on this machine: the facts its answer quotes (all of them
    there), whether the claim holds on them, and the answer written from them. A "find a round"
    card (`search`) takes the first example and round where the claim holds, its link moved there:
    float kernels differ between CPUs, and where a near-tie makes a round interesting moves with them."""
    began = time.perf_counter()
    _RUNS.sessions = {}
    try:
        return _search_rounds(card, pair, began)
    finally:
        _RUNS.sessions = None


def _search_rounds(card: Challenge, pair, began: float) -> Verdict:
    first = _check_once(card, pair)
    ended: dict[str, int] = {}                       # example -> the round its run ended before
    for changes in card.search:
        if first.ok or any(_BAD_LINK in problem for problem in first.problems):
            break                                    # found, or the card's own link is bad
        example, number = changes.get("example", ""), int(changes.get("round", 0))
        if number >= ended.get(example, 1 << 30) or changes.items() <= card.params.items():
            continue
        verdict = _check_once(replace(card, params={**card.params, **changes}), pair)
        if verdict.ok:
            first = verdict
        elif not verdict.facts and _ENDS in verdict.problems[0]:
            ended[example] = number
    first.seconds = time.perf_counter() - began
    return first


_ENDS = "before round"       # in `_run_to`'s message when the run is shorter than the link's round
_BAD_LINK = "link is not clean"


def _check_once(card: Challenge, pair) -> Verdict:
    try:
        facts = card.facts(card, pair)
    except ValueError as exc:
        return Verdict(False, {}, [f"{card.key}: {exc}"], params=card.params)
    missing = [name for name in card.quotes if name not in facts]
    if missing:
        return Verdict(False, facts, [f"{card.key}: the answer quotes {', '.join(missing)}, which the engine's facts "
                                      "do not give"], params=card.params)
    problems = [] if card.holds(facts) else [
        f"{card.key}: the claim does not hold on {getattr(pair, 'name', 'the toy')} on this machine: {facts}"]
    return Verdict(not problems, facts, problems, card.answer(facts), params=card.params)


class CardAnswers:
    """Each card's `check` on a pair, worked out once per pair and card (a card names its own
    profile) and kept: the model-free cards at once, the engine's as background jobs of the decode
    service (`taps.studio.serve`), so a class's clicks go first. `get` never waits: None while a
    card's job is queued or running."""

    def __init__(self, service=None):
        self._service = service
        self._lock = threading.Lock()
        self._jobs: dict[tuple[int, str], object] = {}      # (id(pair), card key) -> Job or Verdict
        self._pairs: dict[int, object] = {}                  # id -> pair, so an id is never reused while kept

    def _submit(self, item: Challenge, pair):
        if self._service is None:
            from .serve import decode_service

            self._service = decode_service()

        from .serve import log

        def work() -> Verdict:
            verdict = check(item, pair)
            log.info("card %s on %s: %s in %.1f s", item.key, getattr(pair, "name", "the toy"),
                     "holds" if verdict.ok else "; ".join(verdict.problems), verdict.seconds)
            return verdict

        return self._service.submit(work, background=True)

    def get(self, item: Challenge, pair) -> Verdict | None:
        """The card's verdict on `pair` (None for a model-free card), starting its job on first ask."""
        model_free = item.page == "Learn"
        key = (0 if model_free else id(pair), item.key)
        with self._lock:
            found = self._jobs.get(key)
            if found is None:
                found = check(item, None) if model_free else self._submit(item, pair)
                self._jobs[key] = found
                if not model_free:
                    self._pairs[id(pair)] = pair
        if isinstance(found, Verdict):
            return found
        if not found.done.is_set():
            return None
        verdict = found.result if found.error is None else Verdict(      # a card that cannot be worked out says why
            False, {}, [f"{item.key}: {type(found.error).__name__}: {found.error}"])
        with self._lock:
            self._jobs[key] = verdict
        return verdict

    def pending(self, pair) -> int:
        """How many of the engine's cards on `pair` are still being worked out."""
        return sum(1 for item in CARDS if item.page != "Learn" and self.get(item, pair) is None)


_answers: CardAnswers | None = None
_answers_lock = threading.Lock()


def card_answers() -> CardAnswers:
    """The process's one CardAnswers (every page and session reads the same)."""
    global _answers
    with _answers_lock:
        if _answers is None:
            _answers = CardAnswers()
        return _answers


# ---------------------------------------------------------------------------- facts from the engine
def _step_link(card: Challenge, pair, **changes):
    """The card's Step-through link read as the page reads it (with `changes` to its parameters):
    (StepLink, DecodeConfig, profile or None). A ValueError when the link is not clean."""
    params = {**card.params, **changes}
    link, messages = parse_step_link(params, example_prompts(), page_defaults(), pair)
    if messages:
        raise ValueError("the card's link is not clean: " + " ".join(messages))
    config = DecodeConfig(**link.settings)
    profile = _profile(pair, link.profile, config.budget) if link.profile else None
    if config.uses_profile and profile is None:
        raise ValueError("the card's settings size trees from a latency profile and its link names none")
    return link, config, profile


def _title(link) -> str:
    """The example's title (a card's link opens an example)."""
    from ..eval.prompts import example_by_id

    return example_by_id(link.example)["title"] if link.example else "your prompt"


def _profile(pair, profile_id: str, budget: int):
    """The profile a card's link names, as the page it opens finds it (`page_profile`); a ValueError
    saying why when it does not apply to this pair."""
    found = page_profile(pair, budget, link_id=profile_id)
    if found.sizing_id != profile_id:
        raise ValueError(found.link_problem or f"the card's profile {profile_id} is not in use")
    return found.sizing


_RUNS = threading.local()      # during one `check`: the sessions it decoded, so a search steps each run on


def _run_to(pair, prompt: str, config: DecodeConfig, number: int, profile):
    """(the session, its round `number`), decoded from the prompt; within one `check`, a run that
    stopped at an earlier round of the same prompt and settings is stepped on instead of decoded
    again (a search tries rounds in order)."""
    runs = getattr(_RUNS, "sessions", None)
    key = (id(pair), prompt, repr(config), id(profile))
    session = runs.get(key) if runs is not None else None
    if session is None or len(session.rounds) >= number:
        session = DecodeSession(pair, prompt, config, profile=profile)
    if runs is not None:
        runs[key] = session
    record = session.rounds[-1] if session.rounds else None
    while len(session.rounds) < number:
        if session.finished:
            raise ValueError(f"the run ends after {len(session.rounds)} rounds, before round {number}")
        record = session.step()
    return session, record


def round_facts(card: Challenge, pair, **changes) -> dict:
    """τ, nodes verified and waste of the round the card's Step link opens."""
    link, config, profile = _step_link(card, pair, **changes)
    _, record = _run_to(pair, link.prompt, config, link.round, profile)
    owners: dict[str, int] = {}                    # waste per depth-1 node it sits under
    for v in record.selected[1:]:
        if record.status[v] == "waste":
            top = v
            while record.pool_depths[top] > 1:
                top = record.pool_parents[top]
            owners[visible_text(record.pool_texts[top])] = owners.get(visible_text(record.pool_texts[top]), 0) + 1
    under = max(owners, key=owners.get) if owners else ""
    return {"title": _title(link), "round": record.number, "tau": record.tau, "verified": record.verified_nodes,
            "waste": record.waste_nodes,
            "budget": config.budget, "waste_under": under, "waste_under_count": owners.get(under, 0),
            "accepted_text": visible_text("".join(record.pool_texts[v] for v in record.accepted))}


def versus_facts(card: Challenge, pair) -> dict:
    """TAPS's round (the link's); the same pool ranked both ways at the link's compare budget, as
    *Marginal vs path* shows it (draft tokens each ranking's tree accepts, at least); and DDTree's own
    round from the same position, with its first accepted token and whether TAPS verified it."""
    link, config, profile = _step_link(card, pair)
    session, record = _run_to(pair, link.prompt, config, link.round, profile)
    both = compare_rankings(record, link.compare)
    other = probe_round(pair, session.tokens[: record.start + 1], config, DDTREE.name, profile=profile,
                        index=record.index)
    if other is None:
        raise ValueError("DDTree cannot run from that position")
    first = visible_text(other.pool_texts[other.accepted[0]]) if other.accepted else ""
    taps_verified = {visible_text(record.pool_texts[v]) for v in record.selected[1:] if record.pool_depths[v] == 1}
    return {"title": _title(link), "round": record.number, "taps_tau": record.tau,
            "taps_verified": record.verified_nodes,
            "compare": link.compare, "ddtree_accepts": both.accepts_marginal, "reach_accepts": both.accepts_reach,
            "ddtree_tau": other.tau, "ddtree_first": first,
            "taps_missed_it": bool(first) and first not in taps_verified}


def candidates_facts(card: Challenge, pair) -> dict:
    """The Candidates view of the card's round (`taps.studio.candidates`): each chain's and tree's τ
    and nodes verified, the target's first token and its drafter rank, and where DFlash2's walk first
    missed (the position, the rank it walked to, the target's rank there)."""
    from .candidates import candidates_view

    link, config, profile = _step_link(card, pair)
    session, record = _run_to(pair, link.prompt, config, link.round, profile)
    view = candidates_view(pair, record, session.tokens, len(session.prompt_ids), session.config, session.rounds,
                           profile=profile)
    by = {o.key: o for o in view.overlays}
    walk = by[DFLASH2.name]
    miss = next(((d, r) for d, r, verdict in walk.nodes if verdict == "rejected"), (0, -1))
    rank = view.target_rank(1)
    facts = {"title": _title(link), "round": record.number, "first_text": visible_text(view.target_text[0]),
             "first_rank": None if rank is None else rank + 1, "miss_position": miss[0], "walk_rank": miss[1] + 1,
             "miss_rank": None if view.target_rank(miss[0]) is None else view.target_rank(miss[0]) + 1}
    for name in (DFLASH.name, DFLASH2.name, DDTREE.name):
        facts.update({f"{name}_tau": by[name].tau, f"{name}_verified": by[name].verified})
    return facts


def selector_facts(card: Challenge, pair) -> dict:
    """The Candidates view of the card's round, TAPS over DFlash2's candidates (the link's estimator,
    `selector`) against DDTree from the same draft at the same budget: the first node TAPS verified that
    DDTree did not, its verdict, its drafter rank and its parent's, and both trees' τ and nodes."""
    from .candidates import candidates_view

    link, config, profile = _step_link(card, pair)
    session, record = _run_to(pair, link.prompt, config, link.round, profile)
    view = candidates_view(pair, record, session.tokens, len(session.prompt_ids), session.config, session.rounds,
                           profile=profile)
    by = {o.key: o for o in view.overlays}
    taps, ddtree = by[f"{TAPS.name}/selector"], by[DDTREE.name]
    theirs = {(d, r) for d, r, _ in ddtree.nodes}
    parent = {child: up for up, child in taps.edges}
    kept = [(d, r, verdict) for d, r, verdict in taps.nodes if (d, r) not in theirs and r < view.k]
    accepted = [n for n in kept if n[2] == "accepted"]
    depth, rank, verdict = (accepted or kept or [(0, -1, "")])[0]
    up = parent.get((depth, rank), (0, 0))
    return {"title": _title(link), "round": record.number, "kept": len(kept), "kept_accepted": len(accepted),
            "kept_text": visible_text(view.texts[depth - 1][rank]) if depth else "", "kept_depth": depth,
            "kept_rank": rank + 1, "kept_verdict": verdict, "parent_rank": up[1] + 1,
            "taps_tau": taps.tau, "taps_verified": taps.verified, "ddtree_tau": ddtree.tau,
            "ddtree_verified": ddtree.verified, "estimator": taps.estimator}


def size_facts(card: Challenge, pair) -> dict:
    """Round `round` of the card's Step link in cost mode: its nodes and τ, and the cost model's
    expected tokens per second (the Select stage's curve) at those nodes, at its peak and at the
    whole budget."""
    link, config, profile = _step_link(card, pair)
    _, record = _run_to(pair, link.prompt, config, link.round, profile)
    sizes, rate = expected_rate_curve(record, profile)
    return {"cost_nodes": record.verified_nodes, "cost_tau": record.tau, "budget": config.budget,
            "cost_rate": round(float(rate[record.verified_nodes])), "budget_rate": round(float(rate[-1])),
            "peak": int(sizes[int(np.argmax(rate))])}


def hardware_facts(card: Challenge, pair) -> dict:
    """TAPS's first round (cost mode) sized by the reference CPU profile and by the card's roofline
    profile, and each profile's verify(64) / verify(1)."""
    link, messages = parse_race_link(card.params, example_prompts(), pair)
    if messages:
        raise ValueError("the card's link is not clean: " + " ".join(messages))
    config = DecodeConfig(budget=link.budget, estimator=link.estimator, temperature=link.temperature)
    facts = {}
    for name, profile_id in (("cpu", REFERENCE), ("h200", link.profile)):
        profile = _profile(pair, profile_id, config.budget)
        _, record = _run_to(pair, link.prompt, config, 1, profile)
        facts.update({f"{name}_nodes": record.verified_nodes, f"{name}_tau": record.tau,
                      f"{name}_ratio": round(roofline.ratio(profile), 2)})
    return facts


def batch_facts(card: Challenge, pair) -> dict:
    """The card's race at a batch (`decode_batch_race`, the page's new-token count) on its profile's
    modelled clock: each lane's speed-up, TAPS's and batch-aware TAPS's τ and nodes per round, as the
    finish table rounds them, and the share of batch-aware TAPS's steps that drafted."""
    from .race import DEFAULT_NEW_TOKENS, batch_companions, decode_batch_race, on_clock

    link, messages = parse_race_link(card.params, example_prompts(), pair)
    if messages:
        raise ValueError("the card's link is not clean: " + " ".join(messages))
    config = DecodeConfig(budget=link.budget, estimator=link.estimator, temperature=link.temperature,
                          max_new_tokens=DEFAULT_NEW_TOKENS)
    profile = _profile(pair, link.profile, config.budget)

    def finish(batch: int) -> tuple[dict, float]:
        decoded = decode_batch_race(pair, link.prompt, config, batch_companions(link.prompt, example_prompts(), batch),
                                    profile=profile, warm=False)
        steps = next(lane.steps for lane in decoded.lanes if lane.plan == "taps-batch")
        return ({row["method"]: row for row in on_clock(decoded, "modelled", profile).results()},
                sum(d for *_, d in steps) / len(steps))

    (rows, drafted), (alone, _) = finish(link.batch), finish(1)
    plan = rows[PLANS["taps-batch"]]
    return {"batch": link.batch, "budget": config.budget, "dflash_speedup": rows[DFLASH.label]["speed-up"],
            "ddtree_speedup": rows[DDTREE.label]["speed-up"], "taps_speedup": rows[TAPS.label]["speed-up"],
            "plan_speedup": plan["speed-up"], "taps_nodes": rows[TAPS.label]["verified / round"],
            "plan_nodes": plan["verified / round"], "taps_tau": rows[TAPS.label]["τ"], "plan_tau": plan["τ"],
            "plan_nodes_alone": alone[PLANS["taps-batch"]]["verified / round"], "plan_drafted": round(drafted, 2)}


def toy_facts(card: Challenge, pair=None) -> dict:
    """The toy at the card's Learn link: expected tokens per round of each ranking at its factor and at
    factor 1, and the nodes each ranking picked that its rejected prefix makes unreachable."""
    state, messages = parse_learn_link(card.params)
    if messages:
        raise ValueError("the card's link is not clean: " + " ".join(messages))
    facts = {}
    for suffix, factor in (("", state.factor), ("_at_1", 1.0)):
        tree = toy.LearnState(state.preset, factor, state.budget).tree()
        for name, score in ((DDTREE.name, tree.path_marginal), (TAPS.name, tree.reach)):
            chosen = toy.choose(score, state.budget)
            facts[f"{name}_expected{suffix}"] = round(toy.expected_tokens(tree, chosen), 2)
            if state.reject and not suffix:
                below = set(toy.descendants(tree, toy.node_by_path(tree, state.reject)))
                facts[f"{name}_unreachable"] = len(below & set(chosen.tolist()))
    return facts


# ---------------------------------------------------------------------------- the cards
def _step(example: str, number: int, view: str, named: tuple[str, ...] = (), profile: str | None = None,
          compare: int = 0, **settings) -> dict[str, str]:
    """A Step-through link (`taps.studio.link`'s writer): an example at a round and view, the settings
    that differ from the engine's defaults and those `named` (written even at their default)."""
    link = StepLink(dict(page_defaults(), **settings), "", example, number, view, profile=profile, compare=compare)
    return step_link_params(link, page_defaults(), named)


def _taps_step(example: str, number: int, view: str, compare: int = 0, **settings) -> dict[str, str]:
    """A Step-through link for TAPS at the default settings (named, so the card survives a change
    of defaults) with the shipped reference profile."""
    settings = {"selector": TAPS.name, "estimator": "online", "budget": 32, "taps_mode": "cost", **settings}
    return _step(example, number, view, tuple(settings), REFERENCE, compare, **settings)


def _race(example: str, budget: int, profile: str, batch: int = 1, estimator: str = "online") -> dict[str, str]:
    """A race link on the modelled clock of `profile`, greedy, TAPS with `estimator`, the prompt alone
    or in a batch of `batch` requests."""
    return race_link_params(RaceLink("", example, budget, estimator, 0.0, "modelled", profile, batch=batch))


def _learn(factor: float, budget: int, reject: str = "") -> dict[str, str]:
    return learn_link_params(toy.LearnState(TWO_OPENINGS, factor, budget, reject))


TWO_OPENINGS = "Two good openings"
STEP_EXAMPLES = ("search", "fib", "point", "sort", "merge", "words", "docstring", "comment")  # a search's order

CARDS = [
    Challenge(
        "waste-half", "Make marginal ranking waste half the budget",
        "Find an example, a budget and a round where DDTree, which ranks nodes by their marginal product, "
        "spends at least half of the nodes it verifies under a rejected prefix (waste).",
        "Waste needs a drafter that hedges near the root: open Stage by stage at Verify and look for a rejected "
        "node at depth 1 with a deep subtree under it. A small budget makes the share easy to read.",
        "*Python: merge two sorted lists*, budget {budget}, round {round}: DDTree verifies {verified} nodes and "
        "{waste} of them are waste, most of them under the rejected ‘{waste_under}’. The drafter hedges near the "
        "root, and the marginal product keeps ranking the likely-looking tokens under ‘{waste_under}’ high, though "
        "none of them can be accepted once ‘{waste_under}’ is rejected.",
        "Step_through", _step("merge", 2, "verify", selector=DDTREE.name, budget=16),
        facts=round_facts,
        holds=lambda f: 2 * f["waste"] >= f["verified"] > 0 and 2 * f["waste_under_count"] >= f["waste"],
        search=_search(("merge",), range(1, 13))),
    Challenge(
        "taps-below-ddtree", "Find a round where TAPS accepts fewer tokens than DDTree",
        "At the default settings (TAPS, online estimator, cost mode, budget 32), find an example and a round in "
        "which DDTree, run from the same position, would have committed more tokens than TAPS did (*Python: "
        "binary search* is a good place to start).",
        "TAPS's cost mode grows small trees on this CPU. Step through the first rounds and, at each, open "
        "*Marginal vs path* at DDTree's budget, 32: the same pool ranked both ways, and what each would have "
        "accepted.",
        "*{title}*, round {round}: TAPS verifies {taps_verified} nodes and commits τ {taps_tau}. *Marginal vs "
        "path* at {compare} nodes, DDTree's budget, ranks the same pool both ways: each ranking's tree now holds "
        "the target's ‘{ddtree_first}’, which TAPS's {taps_verified} left out (DDTree's ranking accepts ≥ "
        "{ddtree_accepts}, TAPS's ≥ {reach_accepts}). So DDTree, verifying {compare}, commits more from here. What "
        "TAPS lost was size, not ranking: a tree sized for this CPU's costs gives up the drafter's less likely "
        "guesses, and here one of them was the target's.",
        "Step_through", _taps_step("fib", 5, "compare", compare=32),
        facts=versus_facts,
        holds=lambda f: f["taps_tau"] < f["ddtree_tau"] and min(f["ddtree_accepts"], f["reach_accepts"]) >= 1
        and f["taps_missed_it"], search=_search(STEP_EXAMPLES, range(1, 21))),
    Challenge(
        "chain-vs-tree", "A chain with a path selector against a tree, at the same verify cost",
        "Open an example (*Python: merge two sorted lists*, say) at budget 16 in the *Candidates* view. DFlash2 "
        "verifies one chain 15 deep, DDTree a tree of 16 nodes: about the same verify cost. Find a round where "
        "DFlash's argmax chain fails at once, DFlash2's walk goes on and DDTree goes further: where does the chain "
        "lose?",
        "Follow the boxed target's tokens from the left: at each position, did each selector put a node on the "
        "boxed cell? A chain has one cell per position; a tree can hold several.",
        "*{title}*, round {round}: the target's first token ‘{first_text}’ is the drafter's rank {first_rank}, so "
        "DFlash's "
        "argmax chain fails at once (τ {dflash_tau}). DFlash2's walk takes it and goes on (τ {dflash2_tau}, "
        "{dflash2_verified} verified), then at position {miss_position} walks to rank {walk_rank} where the "
        "target's token is rank {miss_rank}. DDTree's tree ({ddtree_verified} verified) goes further: τ "
        "{ddtree_tau}. At the same cost a tree spends nodes on the alternatives a walk must choose among; a chain "
        "spends them deep, and past its first miss they are waste.",
        "Step_through", _taps_step("merge", 5, "candidates", budget=16),
        facts=candidates_facts,
        holds=lambda f: f["dflash_tau"] == 1 < (f["first_rank"] or 0) and f["dflash_tau"] < f["dflash2_tau"]
        < f["ddtree_tau"] and abs(f["dflash2_verified"] - f["ddtree_verified"]) <= 1
        and f["walk_rank"] != f["miss_rank"], search=_search(STEP_EXAMPLES, range(1, 21))),
    Challenge(
        "selector-keeps", "The selector keeps what the marginals drop",
        "Open *Candidates* with TAPS over DFlash2's candidates (estimator *selector*, reach mode, budget 16) and "
        "find a round where TAPS verifies a node that DDTree, ranking the same draft by the marginal product at "
        "the same budget, leaves out, and the target accepts it.",
        "DDTree's score for a node is the product of each token's marginal at its position, whatever came "
        "before. DFlash2's path selector scores each token after its parent. Compare the two overlays cell by "
        "cell: where does TAPS's tree have a node that DDTree's has not, and is it on the boxed target path?",
        "*{title}*, round {round}: at position {kept_depth}, ‘{kept_text}’ is only the drafter's rank {kept_rank} "
        "there (its parent: rank {parent_rank}). DDTree ranks nodes by the marginal product and leaves it out of "
        "its {ddtree_verified} nodes (τ {ddtree_tau}). The selector's transition score makes it likely *after "
        "that parent*, so TAPS verifies it, and the target accepts it: τ {taps_tau} with {taps_verified} nodes. "
        "A marginal says how likely a token is at a position; the selector, how likely it is after this prefix, "
        "which is what the target's verdict depends on.",
        "Step_through", _taps_step("search", 5, "candidates", estimator="selector", taps_mode="reach", budget=16),
        facts=selector_facts,
        holds=lambda f: f["kept_accepted"] >= 1 and f["kept_verdict"] == "accepted" and f["kept_rank"] > 1
        and f["taps_tau"] > f["ddtree_tau"] and f["taps_verified"] <= f["ddtree_verified"],
        search=_search(STEP_EXAMPLES, range(1, 21))),
    Challenge(
        "deep-narrow", "Find a deep, narrow round",
        "Find a round where TAPS commits at least 10 tokens while verifying at most 16 nodes.",
        "Look where what follows is predictable once it starts: the next method of a class is a good place. "
        "The counters show τ and the nodes verified of the round on screen.",
        "*Python: a Point class*, round {round}: TAPS verifies {verified} nodes and "
        "commits τ {tau} tokens: the accepted ‘{accepted_text}’ and the bonus token. Reach falls slowly along a "
        "confident path, so TAPS spends its nodes deep instead of wide.",
        "Step_through", _taps_step("point", 5, "verify"),
        facts=round_facts, holds=lambda f: f["tau"] >= 10 and f["verified"] <= 16,
        search=_search(("point",), range(1, 13))),
    Challenge(
        "cost-vs-reach", "Why verify so few nodes when the budget is 64?",
        "Open *Python: a Point class* with budget 64: TAPS's first tree has far fewer than 64 nodes. Why, and "
        "what would the full budget buy in that round?",
        "TAPS's cost mode picks the tree size with the most expected tokens per second under the latency "
        "profile: the Select stage draws that curve under the tree (hover it). Then switch *TAPS mode* to reach "
        "(always the budget's best nodes) and compare round 1.",
        "The cost model's curve under the tree (expected tokens per second against the nodes verified, on the "
        "reference CPU profile) peaks at {cost_nodes} nodes, {cost_rate} tokens/s, and falls to {budget_rate} at "
        "all {budget}: past {cost_nodes}, each node adds less expected τ than its verification costs on this CPU. "
        "So round 1 verifies {cost_nodes} nodes and commits τ {cost_tau}; reach mode would verify all {budget}, "
        "for a few more tokens at a slower round.",
        "Step_through", _taps_step("point", 1, "select", budget=64),
        facts=size_facts,
        holds=lambda f: f["peak"] == f["cost_nodes"] < f["budget"] and f["cost_rate"] > f["budget_rate"]),
    Challenge(
        "h200-vs-laptop", "See why a 64-node tree pays on an H200 but not on this laptop",
        "Race the methods on *Python: a Point class* at budget 64 on the modelled clock of the H200 roofline "
        "estimate (a Qwen3-8B-shaped target), then on the reference CPU profile. How big are TAPS's trees on "
        "each, and why?",
        "Compare verify(64) / verify(1) of the two profiles (the sidebar's *Model the speed on* draws the "
        "curve): TAPS's cost mode sizes every tree from the profile the race names.",
        "Verifying 64 nodes costs {h200_ratio:.2f}× one node on the H200 estimate (the page says so above the "
        "race), where the target's forward is bound by reading its weights once, whatever the rows, but "
        "{cpu_ratio:.2f}× on the reference CPU. So TAPS's first tree (its lane at round 1: press *Step*) holds "
        "{h200_nodes} nodes (τ {h200_tau}) there, and {cpu_nodes} (τ {cpu_tau}) once the race is run again on the "
        "reference CPU (*Back to the reference CPU*): with a parallel drafter the bottleneck is verification, and "
        "where verification is flat a wide tree is nearly free.",
        "Race_and_sweep", _race("point", 64, H200_8B),
        facts=hardware_facts,
        holds=lambda f: f["h200_ratio"] < 1.2 and f["cpu_ratio"] > 1.5 and f["h200_nodes"] > f["cpu_nodes"]),
    Challenge(
        "batch-eight", "Race eight requests at once: do trees still pay?",
        "Race *Python: Fibonacci* at budget 16 with 8 requests in a batch (TAPS with its learned estimator), on the "
        "reference CPU profile's modelled clock: every round's forward now verifies eight requests' trees. Which "
        "lanes still beat AR, by how much, and what does batch-aware TAPS do differently?",
        "Press *Race*, then *End*, and read the finish table: τ, nodes verified per round and the speed-up over AR "
        "in the same batch. Then press *Sweep the batch* at the foot of the page: the same race at 1, 2, 4 and 8 "
        "requests.",
        "With {batch} requests the forward is no longer nearly free on this CPU, and every request's round keeps "
        "costs of its own (the drafter pass is shared, the rest is not), while AR's step for eight requests costs "
        "far less than eight of its own: DFlash falls below AR ({dflash_speedup:.2f}×), DDTree and TAPS stay near "
        "it ({ddtree_speedup:.2f}× and {taps_speedup:.2f}×; TAPS τ {taps_tau:.2f} from {taps_nodes:.1f} nodes per "
        "round). Batch-aware TAPS gives the whole forward one tree width, sized from the verify cost at a batch: "
        "{plan_nodes:.1f} nodes per round, τ {plan_tau:.2f}, and {plan_speedup:.2f}× AR: fewer tokens per round, "
        "in rounds cheap enough to pay more. It drafts on {plan_drafted:.0%} of its steps: where by its estimate "
        "of the reach (at first a cautious curve saved with the pair's calibration, then its own drafted rounds') "
        "drafting would not pay, it takes a plain AR step with no drafter work, so it does not fall below AR. "
        "The batch sweep shows its trees growing back as the batch shrinks: "
        "{plan_nodes_alone:.1f} nodes per round for one request.",
        "Race_and_sweep", _race("fib", 16, REFERENCE, batch=8, estimator="learned"),
        facts=batch_facts,
        holds=lambda f: f["plan_speedup"] > max(f["taps_speedup"], f["ddtree_speedup"], f["dflash_speedup"], 1.0)
        and f["plan_nodes"] < min(f["taps_nodes"], f["plan_nodes_alone"]) and f["dflash_speedup"] < 1.0),
    Challenge(
        "learn-agree", "Make DDTree and TAPS pick the same tree",
        f"In Learn's *{TWO_OPENINGS}* at budget 8, DDTree expects fewer tokens per round than TAPS. Move one "
        "control so that the two expect the same.",
        "The two scores differ only through one knob of the toy's true model.",
        "Set the off-mode factor to 1: the marginals are then the truth, reach equals the marginal product, "
        "and both rankings expect {taps_expected_at_1} tokens per round (at 0.2: DDTree {ddtree_expected}, TAPS "
        "{taps_expected}).",
        "Learn", _learn(0.2, 8),
        facts=toy_facts,
        holds=lambda f: f["ddtree_expected"] < f["taps_expected"] and f["ddtree_expected_at_1"] == f[
            "taps_expected_at_1"]),
    Challenge(
        "learn-reject", "Count the waste a rejected opening makes",
        f"In *{TWO_OPENINGS}* at budget 8, suppose the target rejects ‘while’. How many of the nodes each "
        "ranking picked can no longer be accepted?",
        "Pick *depth 1: while* under *Suppose the target rejects*: the crossed-out nodes are waste, and the "
        "metrics count them for each ranking.",
        "DDTree loses {ddtree_unreachable} of its 8 nodes, TAPS {taps_unreachable}: the marginal product "
        "believes the marginals under ‘while’, while reach knows they overstate acceptance there (off-mode "
        "factor 0.2).",
        "Learn", _learn(0.2, 8, "while"),
        facts=toy_facts, holds=lambda f: f["taps_unreachable"] < f["ddtree_unreachable"]),
]


def card(key: str) -> Challenge:
    """The card with this key; a ValueError naming the keys otherwise."""
    for item in CARDS:
        if item.key == key:
            return item
    raise ValueError(f"unknown challenge '{key}': choose one of {', '.join(c.key for c in CARDS)}")
