"""Guided challenges: cards that send students into the app with a question, each with a hint, the
answer and a link (a URL path and query string in the app's shared link format) that opens the page
with the card's settings. Plain Python (no streamlit): the Learn page draws the cards.

Each card's answer is written on the shipped pair (taps-code-10m) with the shipped reference CPU
profile, and quotes numbers: `expected` holds them and the answer is a template over them.
`check(card, pair)` runs the engine (or the toy) at the card's link settings, through the same
parsers the pages read links with, and says whether the claim holds and the quoted numbers are
still what the engine gives (tests/test_challenges.py runs it for every card).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import quote, urlencode

from .. import roofline
from ..config import DecodeConfig, run_label
from ..eval.prompts import example_prompts
from ..policies import DDTREE, TAPS
from ..session import DecodeSession
from . import race, toy
from .failures import probe_round, visible_text
from .link import page_defaults, parse_step_link
from .speed import resolve_profile

SHIPPED_PAIR = "taps-code-10m"
REFERENCE = "reference-cpu-taps-code-10m"            # the shipped reference CPU profile's id
H200_8B = "roofline-h200-qwen3-8b"                   # the roofline estimate: NVIDIA H200, a Qwen3-8B-shaped target
PAGES = {"Step_through": "app_pages/1_Step_through.py", "Race_and_sweep": "app_pages/2_Race_and_sweep.py",
         "Learn": "app_pages/4_Learn.py"}


@dataclass
class Challenge:
    key: str
    title: str
    task: str
    hint: str
    answer_template: str             # str.format over `expected`
    page: str                        # a key of PAGES
    params: dict[str, str]           # the link's query parameters
    expected: dict                   # the numbers (and tokens) the answer quotes, on the shipped pair
    facts: Callable[..., dict] = field(repr=False, default=None)    # (card, pair) -> what the engine gives
    holds: Callable[[dict], bool] = field(repr=False, default=None)  # the claim itself, on those facts

    @property
    def answer(self) -> str:
        return self.answer_template.format(**self.expected)

    @property
    def link(self) -> str:
        """URL path and query string: `/Step_through?example=merge&selector=ddtree&...`."""
        return f"/{self.page}?{urlencode(self.params, quote_via=quote)}"

    @property
    def page_file(self) -> str:
        """The page's script, for `st.page_link(..., query_params=card.params)`."""
        return PAGES[self.page]


@dataclass
class Verdict:
    ok: bool
    facts: dict
    problems: list[str]


def check(card: Challenge, pair) -> Verdict:
    """Run the card's claim on `pair`: it holds, and every number the answer quotes is what the
    engine gives now (a problem per difference)."""
    try:
        facts = card.facts(card, pair)
    except ValueError as exc:
        return Verdict(False, {}, [f"{card.key}: {exc}"])
    problems = [f"{card.key}: the answer says {name} = {value!r}, the engine gives {facts.get(name)!r}"
                for name, value in card.expected.items() if facts.get(name) != value]
    if not card.holds(facts):
        problems.insert(0, f"{card.key}: the claim does not hold on {getattr(pair, 'name', 'the toy')}: {facts}")
    return Verdict(not problems, facts, problems)


# ---------------------------------------------------------------------------- facts from the engine
def _step_link(card: Challenge, pair, **changes):
    """The card's Step-through link read as the page reads it (with `changes` to its parameters):
    (prompt, DecodeConfig, round number, profile or None). A ValueError when the link is not clean."""
    params = {**card.params, **changes}
    link, messages = parse_step_link(params, example_prompts(), page_defaults(), pair)
    if messages:
        raise ValueError("the card's link is not clean: " + " ".join(messages))
    config = DecodeConfig(**link.settings)
    profile = None
    if link.profile:
        profile, why = resolve_profile(pair, link.profile, config.budget)
        if profile is None:
            raise ValueError(why)
    if config.uses_profile and profile is None:
        raise ValueError("the card's settings size trees from a latency profile and its link names none")
    return link.prompt, config, link.round, profile


def _run_to(pair, prompt: str, config: DecodeConfig, number: int, profile):
    """(the session, its round `number`), decoded from the prompt."""
    session = DecodeSession(pair, prompt, config, profile=profile)
    record = None
    while len(session.rounds) < number:
        if session.finished:
            raise ValueError(f"the run ends after {len(session.rounds)} rounds, before round {number}")
        record = session.step()
    return session, record


def round_facts(card: Challenge, pair, **changes) -> dict:
    """τ, nodes verified and waste of the round the card's Step link opens."""
    prompt, config, number, profile = _step_link(card, pair, **changes)
    _, record = _run_to(pair, prompt, config, number, profile)
    owners: dict[str, int] = {}                    # waste per depth-1 node it sits under
    for v in record.selected[1:]:
        if record.status[v] == "waste":
            top = v
            while record.pool_depths[top] > 1:
                top = record.pool_parents[top]
            owners[visible_text(record.pool_texts[top])] = owners.get(visible_text(record.pool_texts[top]), 0) + 1
    label = run_label(config.selector, config.estimator)
    per_s = record.tau / float(profile.round_time(label, record.verified_nodes)) if profile is not None else None
    return {"tau": record.tau, "verified": record.verified_nodes, "waste": record.waste_nodes,
            "budget": config.budget, "waste_under": max(owners, key=owners.get) if owners else "",
            "tokens_per_s": round(per_s) if per_s is not None else None,
            "accepted_text": visible_text("".join(record.pool_texts[v] for v in record.accepted))}


def versus_facts(card: Challenge, pair) -> dict:
    """TAPS's round (the link's) beside one DDTree round from the same position, and DDTree's first
    accepted token with whether TAPS verified it."""
    prompt, config, number, profile = _step_link(card, pair)
    session, record = _run_to(pair, prompt, config, number, profile)
    other = probe_round(pair, session.tokens[: record.start + 1], config, DDTREE.name, profile=profile,
                        index=record.index)
    if other is None:
        raise ValueError("DDTree cannot run from that position")
    first = visible_text(other.pool_texts[other.accepted[0]]) if other.accepted else ""
    taps_verified = {visible_text(record.pool_texts[v]) for v in record.selected[1:] if record.pool_depths[v] == 1}
    return {"taps_tau": record.tau, "taps_verified": record.verified_nodes, "ddtree_tau": other.tau,
            "ddtree_verified": other.verified_nodes, "ddtree_first": first,
            "taps_missed_it": bool(first) and first not in taps_verified}


def size_facts(card: Challenge, pair) -> dict:
    """Round `round` of the card's Step link in cost mode (its profile) and in reach mode, and the
    profile's verify(64) / verify(1)."""
    prompt, config, number, profile = _step_link(card, pair)
    cost = round_facts(card, pair)
    reach = round_facts(card, pair, taps_mode="reach")
    return {"cost_nodes": cost["verified"], "cost_tau": cost["tau"], "reach_nodes": reach["verified"],
            "reach_tau": reach["tau"], "budget": config.budget, "cpu_ratio": round(roofline.ratio(profile), 1),
            "cost_rate": cost["tokens_per_s"], "reach_rate": reach["tokens_per_s"]}


def hardware_facts(card: Challenge, pair) -> dict:
    """TAPS's first round (cost mode) sized by the reference CPU profile and by the card's roofline
    profile, and each profile's verify(64) / verify(1)."""
    values, problems = race.link_values(card.params, example_prompts())
    if problems:
        raise ValueError("the card's link is not clean: " + " ".join(problems))
    config = DecodeConfig(budget=values["budget"], estimator=values["estimator"],
                          temperature=values["temperature"])
    facts = {}
    for name, profile_id in (("cpu", REFERENCE), ("h200", values["profile"])):
        profile, why = resolve_profile(pair, profile_id, config.budget)
        if profile is None:
            raise ValueError(why)
        _, record = _run_to(pair, values["prompt"], config, 1, profile)
        facts.update({f"{name}_nodes": record.verified_nodes, f"{name}_tau": record.tau,
                      f"{name}_ratio": round(roofline.ratio(profile), 1)})
    return facts


def toy_facts(card: Challenge, pair=None) -> dict:
    """The toy at the card's Learn link: expected tokens per round of each ranking at its factor and at
    factor 1, and the nodes each ranking picked that its rejected prefix makes unreachable."""
    state, messages = toy.parse_learn_params(card.params)
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
def _taps_step(example: str, number: int, view: str, **settings) -> dict[str, str]:
    """A Step-through link for TAPS at the default settings (named, so the card survives a change
    of defaults) with the shipped reference profile."""
    params = {"example": example, "selector": TAPS.name, "estimator": "online", "budget": "32",
              "taps_mode": "cost", **{k: str(v) for k, v in settings.items()}}
    return {**params, "round": str(number), "view": view, "profile": REFERENCE}


TWO_OPENINGS = "Two good openings"

CARDS = [
    Challenge(
        "waste-half", "Make marginal ranking waste half the budget",
        "Find an example, a budget and a round where DDTree, which ranks nodes by their marginal product, "
        "spends at least half of the nodes it verifies under a rejected prefix (waste).",
        "Waste needs a drafter that hedges near the root: open Stage by stage at Verify and look for a rejected "
        "node at depth 1 with a deep subtree under it. A small budget makes the share easy to read.",
        "*Python: merge two sorted lists*, budget {budget}, round 2: DDTree verifies {verified} nodes and {waste} "
        "of them are waste, all under the rejected ‘{waste_under}’. The drafter hedges between ‘]’ and ‘])’, and "
        "the marginal product keeps ranking the likely-looking tokens under ‘]’ high, though none of them can be "
        "accepted once ‘]’ is rejected.",
        "Step_through", {"example": "merge", "selector": DDTREE.name, "budget": "16", "round": "2", "view": "verify"},
        {"budget": 16, "verified": 16, "waste": 12, "waste_under": "]"},
        facts=round_facts, holds=lambda f: 2 * f["waste"] >= f["verified"] > 0),
    Challenge(
        "taps-below-ddtree", "Find a round where TAPS accepts fewer tokens than DDTree",
        "At the default settings (TAPS, online estimator, cost mode, budget 32), find a round of *Python: "
        "Fibonacci* in which DDTree, run from the same position, would have committed more tokens than TAPS did.",
        "TAPS's cost mode grows small trees on this CPU. Step through the first rounds and, at each, open "
        "*Marginal vs path*: the same pool ranked DDTree's way, and what that would have accepted.",
        "Round 5: TAPS verifies {taps_verified} nodes and accepts none of them (τ {taps_tau}); DDTree from the "
        "same position verifies {ddtree_verified}, among them the target's ‘{ddtree_first}’, which TAPS's tree "
        "left out, and commits τ {ddtree_tau}. A tree sized for this CPU's costs gives up the drafter's less "
        "likely guesses, and here one of them was the target's.",
        "Step_through", _taps_step("fib", 5, "compare"),
        {"taps_tau": 1, "taps_verified": 11, "ddtree_tau": 3, "ddtree_verified": 32, "ddtree_first": "␣return",
         "taps_missed_it": True},
        facts=versus_facts, holds=lambda f: f["taps_tau"] < f["ddtree_tau"]),
    Challenge(
        "deep-narrow", "Find a deep, narrow round",
        "Find a round where TAPS commits at least 6 tokens while verifying at most 10 nodes.",
        "Look where the rest of a line is predictable once it starts: a familiar call after `os.` is a good "
        "place. The counters show τ and the nodes verified of the round on screen.",
        "*Docstring: describe a config file*, round 6: after ‘if os.’ TAPS verifies {verified} nodes and "
        "commits τ {tau} tokens: the accepted ‘{accepted_text}’ (the rest of the line) and the bonus "
        "token. Reach falls slowly along a confident path, so "
        "TAPS spends its nodes deep instead of wide.",
        "Step_through", _taps_step("docstring", 6, "verify"),
        {"tau": 8, "verified": 9, "accepted_text": "path.isfile(path):"},
        facts=round_facts, holds=lambda f: f["tau"] >= 6 and f["verified"] <= 10),
    Challenge(
        "cost-vs-reach", "Why verify 16 nodes when the budget is 64?",
        "Open *Python: a Point class* with budget 64: TAPS's first tree has far fewer than 64 nodes. Why, and "
        "what would the full budget buy in that round?",
        "TAPS's cost mode picks the tree size with the most expected tokens per second under the latency "
        "profile. Switch *TAPS mode* to reach (always the budget's best nodes) and compare round 1.",
        "On the reference CPU verify(64) takes {cpu_ratio}× as long as verify(1), so cost mode stops round 1 at "
        "{cost_nodes} nodes (τ {cost_tau}). Reach mode verifies all {reach_nodes} and commits τ {reach_tau}; by "
        "the profile's clock that round makes {reach_rate} tokens/s against cost mode's {cost_rate}: the extra "
        "nodes buy tokens, but not enough to pay for their verification here.",
        "Step_through", _taps_step("point", 1, "select", budget=64),
        {"cpu_ratio": 1.9, "cost_nodes": 16, "cost_tau": 5, "reach_nodes": 64, "reach_tau": 7, "cost_rate": 248,
         "reach_rate": 227},
        facts=size_facts,
        holds=lambda f: f["cost_nodes"] < f["budget"] == f["reach_nodes"] and f["cost_rate"] > f["reach_rate"]),
    Challenge(
        "h200-vs-laptop", "See why a 64-node tree pays on an H200 but not on this laptop",
        "Race the methods on *Python: a Point class* at budget 64 on the modelled clock of the H200 roofline "
        "estimate (a Qwen3-8B-shaped target), then on the reference CPU profile. How big are TAPS's trees on "
        "each, and why?",
        "Compare verify(64) / verify(1) of the two profiles (the sidebar's *Model the speed on* draws the "
        "curve): TAPS's cost mode sizes every tree from the profile the race names.",
        "Verifying 64 nodes costs {cpu_ratio}× one node on the reference CPU but {h200_ratio}× on the H200 "
        "estimate, where the target's forward is bound by reading its weights once, whatever the rows. So TAPS's "
        "first tree grows from {cpu_nodes} nodes (τ {cpu_tau}) here to {h200_nodes} (τ {h200_tau}) there: with a "
        "parallel drafter the bottleneck is verification, and where verification is flat a wide tree is nearly "
        "free.",
        "Race_and_sweep", {"example": "point", "budget": "64", "estimator": "online", "temperature": "0",
                           "clock": "modelled", "profile": H200_8B},
        {"cpu_ratio": 1.9, "h200_ratio": 1.0, "cpu_nodes": 16, "cpu_tau": 5, "h200_nodes": 64, "h200_tau": 7},
        facts=hardware_facts,
        holds=lambda f: f["h200_ratio"] < 1.2 and f["cpu_ratio"] > 1.5 and f["h200_nodes"] > f["cpu_nodes"]),
    Challenge(
        "learn-agree", "Make DDTree and TAPS pick the same tree",
        f"In Learn's *{TWO_OPENINGS}* at budget 8, DDTree expects fewer tokens per round than TAPS. Move one "
        "control so that the two expect the same.",
        "The two scores differ only through one knob of the toy's true model.",
        "Set the off-mode factor to 1: the marginals are then the truth, reach equals the marginal product, "
        "and both rankings expect {taps_expected_at_1} tokens per round (at 0.2: DDTree {ddtree_expected}, TAPS "
        "{taps_expected}).",
        "Learn", {"preset": TWO_OPENINGS, "factor": "0.2", "budget": "8"},
        {"ddtree_expected": 3.27, "taps_expected": 3.87, "taps_expected_at_1": 4.27},
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
        "Learn", {"preset": TWO_OPENINGS, "factor": "0.2", "budget": "8", "reject": "while"},
        {"ddtree_unreachable": 3, "taps_unreachable": 1},
        facts=toy_facts, holds=lambda f: f["taps_unreachable"] < f["ddtree_unreachable"]),
]


def card(key: str) -> Challenge:
    """The card with this key; a ValueError naming the keys otherwise."""
    for item in CARDS:
        if item.key == key:
            return item
    raise ValueError(f"unknown challenge '{key}': choose one of {', '.join(c.key for c in CARDS)}")
