"""Hindsight over verified rounds, and the search for rounds where TAPS does badly.

Once a round is verified, the target's own tokens from its root are known up to depth
len(accepted) + 1: the accepted tokens and the bonus token. That settles, for every node of the
round's candidate pool, what verifying it would have done (`hindsight_status`): accepted (its path
is the target's), a rejected sibling, rejected-prefix waste, or unknown (deeper than we know).
From there: where the target's path left the pool, what ranking the pool by marginal product or
by reach would have accepted at a budget, and a one-line explanation of a bad round.

`find_failures` runs TAPS over prompts at T=0 and, from the root of every TAPS round, one DDTree
round and one oracle round over the same context, so the three are compared at the same position
(lossless decoding makes the context identical for all of them).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from ..config import DecodeConfig
from ..policies import DDTREE, DFLASH2, ORACLE, REGISTRY, TAPS, policy
from ..record import Round
from ..selectors import top_by_reach

SCORES = {"marginal": "pool_path_marginal", "reach": "pool_reach"}
# what a flagged round is, as the page's filter names it (a case can be several)
KINDS = {DDTREE.name: "TAPS below DDTree", DFLASH2.name: "TAPS below DFlash2", ORACLE.name: "TAPS below the oracle",
         "waste": "mostly waste"}


def target_tokens(record: Round) -> list[int]:
    """The target's tokens after the root that this round revealed: accepted tokens, then the bonus."""
    return [record.pool_tokens[i] for i in record.accepted] + [record.bonus_token]


def hindsight_status(record: Round) -> list[str]:
    """Per pool node: root | accepted | rejected | waste | unknown, had the node been verified.

    For the nodes the round did verify this equals `record.status`; an unverified node whose
    path is the target's continuation (for instance one holding the bonus token) is `accepted`."""
    known = target_tokens(record)
    status = ["root"] + ["unknown"] * (len(record.pool_tokens) - 1)
    for i in range(1, len(record.pool_tokens)):
        parent_status = status[record.pool_parents[i]]
        depth = record.pool_depths[i]
        if parent_status in ("root", "accepted") and depth <= len(known):
            status[i] = "accepted" if record.pool_tokens[i] == known[depth - 1] else "rejected"
        elif parent_status in ("rejected", "waste"):
            status[i] = "waste"
    return status


def target_path(record: Round) -> list[int]:
    """Pool nodes along the target's continuation, by depth (may run past the accepted nodes)."""
    status = hindsight_status(record)
    return [i for i, s in enumerate(status) if s == "accepted"]


def left_pool_depth(record: Round) -> int | None:
    """The depth at which the target's token is missing from the pool, or None when the pool holds
    every token the round revealed (or the miss is past the deepest depth the drafter drafted)."""
    reached = len(target_path(record))
    known = len(target_tokens(record))
    deepest = max(record.pool_depths)
    if reached >= known or reached + 1 > deepest:
        return None
    return reached + 1


def ranking_choice(record: Round, score: str, budget: int) -> np.ndarray:
    """The `budget` pool nodes of highest marginal product or reach (root included, prefix-closed)."""
    values = np.asarray(getattr(record, SCORES[score]), dtype=float)
    return top_by_reach(values, max(0, min(int(budget), len(values) - 1)))


def hindsight_accepts(record: Round, chosen) -> tuple[int, bool]:
    """Draft tokens a tree of `chosen` pool nodes would have accepted this round, and whether that
    is only a lower bound (the tree reaches as deep as the round revealed, so it may go further)."""
    status = hindsight_status(record)
    count = sum(1 for i in chosen if i and status[i] == "accepted")
    return count, count >= len(target_tokens(record))


@dataclass
class RankingComparison:
    budget: int
    by_marginal: list[int]           # pool nodes (root first) the marginal product picks
    by_reach: list[int]              # pool nodes (root first) reach picks
    accepts_marginal: int
    accepts_reach: int
    marginal_is_lower_bound: bool
    reach_is_lower_bound: bool
    waste_marginal: int              # picked nodes under a prefix the target rejects
    waste_reach: int

    def describe(self, kind: str) -> str:
        count, bound = ((self.accepts_marginal, self.marginal_is_lower_bound) if kind == "marginal"
                        else (self.accepts_reach, self.reach_is_lower_bound))
        waste = self.waste_marginal if kind == "marginal" else self.waste_reach
        return f"accepts {'≥ ' if bound else ''}{count}, {waste} under a rejected prefix"


def compare_rankings(record: Round, budget: int) -> RankingComparison:
    status = hindsight_status(record)
    by_marginal = ranking_choice(record, "marginal", budget)
    by_reach = ranking_choice(record, "reach", budget)
    acc_m, bound_m = hindsight_accepts(record, by_marginal)
    acc_r, bound_r = hindsight_accepts(record, by_reach)
    return RankingComparison(
        budget=int(budget), by_marginal=by_marginal.tolist(), by_reach=by_reach.tolist(),
        accepts_marginal=acc_m, accepts_reach=acc_r, marginal_is_lower_bound=bound_m, reach_is_lower_bound=bound_r,
        waste_marginal=sum(status[i] == "waste" for i in by_marginal),
        waste_reach=sum(status[i] == "waste" for i in by_reach))


def _tokens(count: int) -> str:
    return f"{count} token" if count == 1 else f"{count} tokens"


def visible_text(text: str) -> str:
    """Token text with whitespace made visible (␣ space, ⏎ newline, ⇥ tab; ∅ for nothing)."""
    if text == "":
        return "∅"
    return text.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥").replace("\r", "␍")


def display_name(name: str, capital: bool = False) -> str:
    """A selector's name in prose ("DDTree", "the oracle"); `capital` to start a sentence or label."""
    text = REGISTRY[name].in_prose() if name in REGISTRY else name
    return text[0].upper() + text[1:] if capital else text


def explain_round(record: Round, others: dict[str, Round | None] | None = None, waste_threshold: float = 0.5) -> str:
    """One line on what went wrong in `record`, compared with rounds of other selectors from the
    same position (`{"ddtree": round, "oracle": round}`)."""
    me = display_name(record.selector)
    parts = []
    for name, other in (others or {}).items():
        if other is not None and len(other.accepted) > len(record.accepted):
            parts.append(f"{display_name(name)} accepted {_tokens(len(other.accepted))} where {me} "
                         f"accepted {len(record.accepted)}")
            break
    cause = _cause(record, me)
    if cause:
        parts.append(cause)
    if record.verified_nodes and record.waste_nodes / record.verified_nodes >= waste_threshold:
        share = round(100 * record.waste_nodes / record.verified_nodes)
        parts.append(f"{me} spent {share}% of its budget ({record.waste_nodes} of {record.verified_nodes} "
                     f"verified nodes) under a rejected prefix")
    if not parts:
        return f"{me} accepted {_tokens(len(record.accepted))}; nothing went wrong that hindsight can see"
    line = parts[0]
    if len(parts) > 1:
        line += ": " + "; ".join(parts[1:])
    return line[0].upper() + line[1:]


def _cause(record: Round, me: str) -> str:
    path = target_path(record)
    depth = len(record.accepted) + 1
    if depth > max(record.pool_depths):
        return ""
    if left_pool_depth(record) == depth:
        return (f"the target's token '{visible_text(record.bonus_text)}' (id {record.bonus_token}) left the pool "
                f"at depth {depth}")
    if len(path) < depth:
        return ""
    node = path[depth - 1]
    score, score_name = ((record.pool_reach, "reach") if policy(record.selector).uses_estimator
                         else (record.pool_path_marginal, "the marginal product"))
    order = np.lexsort((np.arange(len(score)), -np.asarray(score)))
    position = int(np.flatnonzero(order == node)[0])   # the root is position 0
    return (f"the target's token '{visible_text(record.pool_texts[node])}' at depth {depth} was in the pool "
            f"(drafter rank {record.pool_ranks[node] + 1}, reach {record.pool_reach[node]:.3f}) but "
            f"{score_name} ranked it #{position} and {me} verified {record.verified_nodes} nodes")


@dataclass
class FailureCase:
    prompt_id: str
    prompt: str
    taps_round: Round
    others: dict[str, Round | None]
    kinds: list[str]                 # "ddtree", "oracle", "waste"
    gap: int                         # best other's accepted tokens minus TAPS's
    explanation: str

    @property
    def waste_share(self) -> float:
        r = self.taps_round
        return r.waste_nodes / r.verified_nodes if r.verified_nodes else 0.0

    def lost_to(self, name: str) -> int:
        """Tokens TAPS accepted fewer than `name` from the same position (0 when not fewer, or not compared)."""
        other = self.others.get(name)
        return max(len(other.accepted) - len(self.taps_round.accepted), 0) if other is not None else 0

    def rank_key(self) -> tuple:
        """Worst first, as a researcher reads them: rounds below DDTree by the tokens lost to it, then
        below the oracle (when compared), then by waste; ties in run order."""
        return (-self.lost_to(DDTREE.name), -self.lost_to(DFLASH2.name), -self.lost_to(ORACLE.name), -self.waste_share,
                self.prompt_id,
                self.taps_round.index)

    def row(self) -> dict:
        r = self.taps_round
        row = {"prompt": self.prompt_id, "round": r.number, "position": r.start, "TAPS accepted": len(r.accepted),
               "TAPS verified": r.verified_nodes}
        for name, other in self.others.items():
            row[f"{display_name(name, capital=True)} accepted"] = len(other.accepted) if other is not None else None
        for name in (DDTREE.name, DFLASH2.name):
            if name in self.others:
                row[f"tokens lost to {policy(name).label}"] = self.lost_to(name)
        row.update({"waste %": round(100 * self.waste_share, 1), "why": self.explanation})
        return row


@dataclass
class FailureReport:
    cases: list[FailureCase] = field(default_factory=list)
    rounds_checked: int = 0
    prompts_run: int = 0
    skipped: list[str] = field(default_factory=list)   # one message per prompt that could not run
    config: dict = field(default_factory=dict)          # the TAPS settings the report ran with
    compared: tuple[str, ...] = (DDTREE.name,)          # the selectors TAPS was compared with
    waste_threshold: float = 0.5
    # per run label (TAPS's, and DDTree's over its probe rounds): reliability counts of the verified
    # nodes (`taps.eval.metrics.reliability_counts`) and the summed expected and accepted tau
    reliability: dict[str, dict] = field(default_factory=dict)

    def add_rounds(self, label: str, rounds: list[Round]) -> None:
        """Count these rounds' verified nodes and taus into `label`'s reliability."""
        from ..eval.metrics import reliability_counts

        entry = self.reliability.setdefault(label, {"counts": np.zeros((10, 3)), "rounds": 0, "expected": 0.0,
                                                    "accepted": 0.0})
        entry["counts"] = entry["counts"] + np.asarray(reliability_counts(rounds))
        entry["rounds"] += len(rounds)
        entry["expected"] += sum(r.expected_tau for r in rounds)
        entry["accepted"] += sum(1 + len(r.accepted) for r in rounds)

    def reliability_tables(self) -> dict[str, list[dict]]:
        from ..eval.metrics import reliability_table

        return {label: reliability_table(entry["counts"]) for label, entry in self.reliability.items()}

    def calibration_line(self) -> str:
        """One sentence per run label: its predicted tau per round against the accepted one."""
        parts = []
        for label, entry in self.reliability.items():
            if entry["rounds"]:
                expected, accepted = entry["expected"] / entry["rounds"], entry["accepted"] / entry["rounds"]
                parts.append(f"{label} predicted {expected:.2f} tokens a round and had {accepted:.2f} accepted "
                             f"({expected / accepted:.2f}x) over {entry['rounds']} rounds")
        return "; ".join(parts) + "." if parts else ""

    @property
    def kinds(self) -> list[str]:
        """The kinds this report can flag: below each compared selector, and waste."""
        return [kind for kind in KINDS if kind in self.compared or kind == "waste"]

    def counts(self) -> dict[str, int]:
        """Cases per kind (a case of several kinds counts in each)."""
        return {kind: sum(kind in case.kinds for case in self.cases) for kind in self.kinds}

    def of_kind(self, kind: str | None) -> list[FailureCase]:
        """The cases of one kind (None: all), worst first."""
        if kind is not None and kind not in self.kinds:
            raise ValueError(f"unknown kind '{kind}': choose one of {', '.join(self.kinds)}")
        return [case for case in self.cases if kind is None or kind in case.kinds]


def probe_round(pair, context: list[int], config: DecodeConfig, selector: str,
                oracle_tokens: list[int] | None = None, profile=None, index: int = 0,
                remaining: int | None = None) -> Round | None:
    """One round of `selector` from the end of `context` (None when the context is too long),
    numbered `index` (the round of the run it is compared with). `remaining`: the tokens the run had
    left to generate there, so that a round Max new tokens cut is cut the same way here (a round the
    stop rule cut is not a loss)."""
    from ..session import DecodeSession

    block = config.block_size or (pair.drafter.block_size if pair.drafter is not None else 2)
    limit = block + 1 if remaining is None else max(min(block + 1, remaining), 1)
    try:
        session = DecodeSession(pair, context, config, profile=profile, oracle_tokens=oracle_tokens,
                                selector=selector, max_new_tokens=limit)
    except ValueError:
        return None
    return replace(session.step(), index=index)


def find_failures(pair, prompts: list[dict], config: DecodeConfig, compare: tuple[str, ...] = (DDTREE.name,),
                  waste_threshold: float = 0.5, min_gap: int = 1,
                  on_progress: Callable[[int, int, str], None] | None = None, profile=None) -> FailureReport:
    """Run TAPS (T=0) on each prompt; flag rounds that accepted at least `min_gap` fewer tokens
    than a compared selector from the same position (DDTree; the oracle too when asked: it knows
    the target's tokens, so TAPS is below it in most rounds), or spent at least `waste_threshold` of
    the verified nodes under a rejected prefix. Cases come back worst first (`FailureCase.rank_key`)."""
    from ..reference import greedy_continuation
    from ..session import DecodeSession

    config = replace(config, selector=TAPS.name, temperature=0.0)
    report = FailureReport(config=config.as_dict(), waste_threshold=waste_threshold, compared=tuple(compare))
    block = config.block_size or (pair.drafter.block_size if pair.drafter is not None else 2)
    for n, item in enumerate(prompts):
        if on_progress:
            on_progress(n, len(prompts), item["id"])
        try:
            session = DecodeSession(pair, item["prompt"], config, profile=profile)
        except ValueError as exc:
            report.skipped.append(f"{item['id']}: {exc}")
            continue
        session.run()
        report.prompts_run += 1
        report.add_rounds(TAPS.run_label(config.estimator), session.rounds)
        prompt_len = len(session.prompt_ids)
        continuation = None
        if ORACLE.name in compare:
            continuation = greedy_continuation(pair, session.prompt_ids, len(session.generated) + block)
        for record in session.rounds:
            report.rounds_checked += 1
            context = session.tokens[: record.start + 1]
            others: dict[str, Round | None] = {}
            for name in compare:
                future = continuation[record.start + 1 - prompt_len:] if policy(name).hindsight else None
                others[name] = probe_round(pair, context, config, name, future, profile, record.index,
                                           remaining=config.max_new_tokens - (len(context) - prompt_len))
                if others[name] is not None and not policy(name).hindsight:
                    report.add_rounds(policy(name).run_label(), [others[name]])
            kinds = [name for name, other in others.items()
                     if other is not None and len(other.accepted) - len(record.accepted) >= min_gap]
            wasteful = record.verified_nodes >= 2 and record.waste_nodes / record.verified_nodes >= waste_threshold
            if wasteful:
                kinds.append("waste")
            if not kinds:
                continue
            gap = max([len(o.accepted) - len(record.accepted) for o in others.values() if o is not None] or [0])
            report.cases.append(FailureCase(
                prompt_id=item["id"], prompt=item["prompt"], taps_round=record, others=others, kinds=kinds,
                gap=gap, explanation=explain_round(record, others, waste_threshold)))
    if on_progress:
        on_progress(len(prompts), len(prompts), "done")
    report.cases.sort(key=FailureCase.rank_key)
    return report


# the Failure cases page's prompt sources, as a sentence names them ("… over 8 prompts from the shipped examples")
SOURCE_PHRASES = {"Shipped examples": "the shipped examples", "HumanEval": "HumanEval",
                  "Your own": "your own prompts"}


def source_phrase(source: str) -> str:
    """The page's prompt source (its radio label) in a sentence: "the shipped examples", "your own
    prompts"; another label as it is."""
    return SOURCE_PHRASES.get(source, source)


def checked_summary(rounds: int, prompts: int, source: str) -> str:
    """ "Checked **12** TAPS rounds over **2** prompts from your own prompts" (markdown)."""
    return (f"Checked **{rounds}** TAPS round{'' if rounds == 1 else 's'} over **{prompts}** "
            f"prompt{'' if prompts == 1 else 's'} from {source_phrase(source)}")
