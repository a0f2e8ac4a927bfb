"""A model-free toy tree for the Learn page: why a marginal product misleads and reach does not.

The toy drafter proposes, at each depth d = 1..H, a marginal distribution m_d over a few candidate
tokens (rank 0 is its favourite). The full tree holds every path: K + K^2 + ... + K^H nodes.

The toy's "true" target (what would really be accepted) is one rule with one knob:

    q(child | parent reached) = m_d(child)                     if every token on the parent's path
                                                                is the drafter's favourite
                              = off_mode_factor * m_d(child)    once the path has left the favourites

So the marginals describe the continuation of the drafter's favourite prefix, and after an off-mode
choice they overstate acceptance by 1 / off_mode_factor; the missing mass goes to tokens outside
the tree. With the factor at 1 the marginals are exact and both rankings agree.

Reach r(v) = product of q along v's path = P(v accepted). DDTree ranks nodes by the marginal
product, TAPS by reach; the expected tokens per round of a prefix-closed tree T is
1 + sum of r over T (accepted draft tokens plus the bonus token).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..subtree import path_to, top_by_reach

MAX_DEPTH = 6
MAX_CANDIDATES = 4
MAX_NODES = 1500


@dataclass
class ToyTree:
    labels: list[str]          # node token text; index 0 is the root
    parents: np.ndarray        # parent index, -1 for the root (parents precede children)
    depths: np.ndarray
    ranks: np.ndarray          # rank of the token among its depth's candidates (0 = favourite)
    marginal: np.ndarray       # m_d of the node's token (1 at the root)
    path_marginal: np.ndarray  # product of marginals along the path: DDTree's score
    reach: np.ndarray          # product of true q along the path: P(accepted), TAPS's score
    off_mode_factor: float

    @property
    def size(self) -> int:
        """Draft nodes (the root is not counted)."""
        return len(self.labels) - 1

    def path(self, node: int) -> list[int]:
        """Node indices from depth 1 down to `node`."""
        return path_to(self.parents, node)

    def path_text(self, node: int) -> str:
        return " ".join(self.labels[i] for i in self.path(node)) or "(root)"


@dataclass
class Preset:
    description: str
    marginals: list[list[float]]
    tokens: list[list[str]]
    off_mode_factor: float

    def as_text(self) -> str:
        return format_marginals(self.marginals, self.tokens)


PRESETS: dict[str, Preset] = {
    "Two good openings": Preset(
        "The drafter is torn between two first tokens, then confident. Its later marginals describe "
        "what follows its favourite opening, so under the second opening they are too optimistic.",
        [[0.50, 0.45], [0.90, 0.10], [0.90, 0.10], [0.90, 0.10], [0.90, 0.10], [0.90, 0.10]],
        [["for", "while"], ["i", "x"], ["in", "="], ["range", "len"], ["(", "["], ["n", ")"]], 0.2),
    "Sure start, shaky finish": Preset(
        "Confident early, unsure late: both rankings agree at the top of the tree and part ways deeper.",
        [[0.90, 0.08, 0.02], [0.70, 0.20, 0.10], [0.50, 0.30, 0.20], [0.40, 0.35, 0.25]],
        [["the", "a", "one"], ["cat", "dog", "cow"], ["sat", "ran", "hid"], ["down", "away", "up"]], 0.3),
    "Calibrated drafter": Preset(
        "Off-mode factor 1: the marginals are the truth, so ranking by marginal product is already optimal.",
        [[0.60, 0.30, 0.10], [0.60, 0.30, 0.10], [0.60, 0.30, 0.10], [0.60, 0.30, 0.10]],
        [["def", "class", "import"], ["f", "g", "main"], ["(", ":", "="], ["x", "n", ")"]], 1.0),
    "Flat drafter": Preset(
        "Every position is a near coin toss: trees stay shallow and wide whichever ranking you use.",
        [[0.40, 0.35, 0.25], [0.40, 0.35, 0.25], [0.40, 0.35, 0.25]],
        [["yes", "no", "maybe"], ["and", "or", "but"], ["so", "then", "now"]], 0.5),
}


def format_marginals(marginals: list[list[float]], tokens: list[list[str]] | None = None) -> str:
    """One line per depth: `token=prob, token=prob, ...` (the Learn page's editable text)."""
    lines = []
    for d, row in enumerate(marginals):
        words = tokens[d] if tokens and d < len(tokens) else default_tokens(d, len(row))
        lines.append(", ".join(f"{w}={p:g}" for w, p in zip(words, row)))
    return "\n".join(lines)


def default_tokens(depth_index: int, count: int) -> list[str]:
    return [f"{chr(ord('A') + k)}{depth_index + 1}" for k in range(count)]


def parse_marginals(text: str) -> tuple[list[list[float]], list[list[str]]]:
    """Parse one line per depth of `prob` or `token=prob` items separated by commas or spaces.

    Raises ValueError with a message that names the line and the item at fault."""
    rows: list[list[float]] = []
    words: list[list[str]] = []
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError("no marginals: write one line per depth, e.g. `for=0.6, while=0.3, if=0.1`")
    for n, line in enumerate(lines, start=1):
        items = [item for item in line.replace(",", " ").split() if item]
        probs, names = [], []
        for k, item in enumerate(items):
            name, _, value = item.rpartition("=")
            try:
                prob = float(value)
            except ValueError:
                raise ValueError(f"depth {n}: '{item}' is not a probability (write `token=0.5` or `0.5`)") from None
            probs.append(prob)
            names.append(name or default_tokens(n - 1, k + 1)[k])
        rows.append(probs)
        words.append(names)
    clean_marginals(rows)
    check_tokens(words)
    return rows, words


def check_tokens(tokens: list[list[str]]) -> None:
    """Raise ValueError when a depth names one token twice: every node at a depth gets that depth's
    tokens as children, and one parent cannot have the same token twice."""
    for d, row in enumerate(tokens, start=1):
        seen = set()
        for word in row:
            if word in seen:
                raise ValueError(f"depth {d}: the token '{word}' appears twice; one parent cannot have the same "
                                 "token twice, so give every candidate at a depth a different token")
            seen.add(word)


def clean_marginals(marginals) -> np.ndarray:
    """Check the user's marginals: non-negative, at most 1 in total per depth (a drafter's
    probabilities at one position; a row summing below 1 leaves the rest to tokens outside the
    tree). Raises ValueError naming the depth at fault."""
    if len(marginals) == 0:
        raise ValueError("no marginals: give at least one depth")
    if len(marginals) > MAX_DEPTH:
        raise ValueError(f"at most {MAX_DEPTH} depths, got {len(marginals)}")
    widths = {len(row) for row in marginals}
    if len(widths) != 1:
        raise ValueError("every depth needs the same number of candidate tokens")
    width = widths.pop()
    if not 1 <= width <= MAX_CANDIDATES:
        raise ValueError(f"each depth needs 1 to {MAX_CANDIDATES} candidate tokens, got {width}")
    nodes = sum(width ** d for d in range(1, len(marginals) + 1))
    if nodes > MAX_NODES:
        raise ValueError(f"that tree has {nodes} nodes; keep it under {MAX_NODES} (fewer depths or candidates)")
    values = np.asarray(marginals, dtype=float)
    if not np.all(np.isfinite(values)):
        raise ValueError("marginals must be finite numbers")
    if np.any(values < 0):
        raise ValueError("marginals cannot be negative")
    sums = values.sum(axis=1)
    if np.any(sums <= 0):
        raise ValueError(f"depth {int(np.argmax(sums <= 0)) + 1} has no probability mass")
    if np.any(sums > 1 + 1e-9):
        d = int(np.argmax(sums > 1 + 1e-9))
        raise ValueError(f"depth {d + 1}: the probabilities add up to {sums[d]:.2f}, but a drafter's probabilities "
                         "at one depth add up to at most 1; lower them (what is left goes to tokens outside "
                         "the tree)")
    return values


def build_toy_tree(marginals, off_mode_factor: float, tokens: list[list[str]] | None = None) -> ToyTree:
    """Every path of the lattice, breadth first, children in rank order (favourite first)."""
    if not 0.0 <= float(off_mode_factor) <= 1.0 or math.isnan(float(off_mode_factor)):
        raise ValueError(f"the off-mode factor must be between 0 and 1, got {off_mode_factor!r}")
    m = clean_marginals(marginals)
    depth_count, width = m.shape
    if tokens:
        check_tokens([row for row in tokens if len(row) == width])
    labels, parents, depths, ranks = ["root"], [-1], [0], [0]
    marginal, path_marginal, reach, on_mode = [1.0], [1.0], [1.0], [True]
    frontier = [0]
    for d in range(depth_count):
        words = tokens[d] if tokens and d < len(tokens) and len(tokens[d]) == width else default_tokens(d, width)
        next_frontier = []
        for parent in frontier:
            for k in range(width):
                q = m[d, k] * (1.0 if on_mode[parent] else off_mode_factor)
                labels.append(words[k])
                parents.append(parent)
                depths.append(d + 1)
                ranks.append(k)
                marginal.append(m[d, k])
                path_marginal.append(path_marginal[parent] * m[d, k])
                reach.append(reach[parent] * q)
                on_mode.append(on_mode[parent] and k == 0)
                next_frontier.append(len(labels) - 1)
        frontier = next_frontier
    return ToyTree(labels=labels, parents=np.array(parents), depths=np.array(depths), ranks=np.array(ranks),
                   marginal=np.array(marginal), path_marginal=np.array(path_marginal), reach=np.array(reach),
                   off_mode_factor=float(off_mode_factor))


def choose(score: np.ndarray, budget: int) -> np.ndarray:
    """The `budget` nodes of highest score, root included; prefix-closed for any score that never
    grows along a path (both the marginal product and reach)."""
    return top_by_reach(np.asarray(score, dtype=float), max(0, min(int(budget), len(score) - 1)))


def expected_tokens(tree: ToyTree, chosen: np.ndarray) -> float:
    """1 + sum of true reach over the chosen draft nodes: expected tokens per round."""
    chosen = np.asarray(chosen)
    return float(1.0 + tree.reach[chosen[chosen > 0]].sum())


def acceptance_curve(tree: ToyTree, max_budget: int | None = None) -> pd.DataFrame:
    """Expected tokens per round at each budget, for the tree each ranking picks."""
    top = tree.size if max_budget is None else min(max_budget, tree.size)
    rows = []
    for budget in range(0, top + 1):
        rows.append({"budget": budget,
                     "by_marginal": expected_tokens(tree, choose(tree.path_marginal, budget)),
                     "by_reach": expected_tokens(tree, choose(tree.reach, budget))})
    return pd.DataFrame(rows)


def descendants(tree: ToyTree, node: int) -> list[int]:
    """Every node under `node` (not `node` itself): unreachable once `node` is rejected."""
    under = np.zeros(len(tree.labels), dtype=bool)
    for i in range(node + 1, len(tree.labels)):
        parent = int(tree.parents[i])
        under[i] = parent == node or under[parent]
    return [int(i) for i in np.flatnonzero(under)]


def ranking_table(tree: ToyTree, budget: int) -> pd.DataFrame:
    """Every draft node with both scores, its rank under each, and which tree it makes at `budget`."""
    by_marginal = set(choose(tree.path_marginal, budget).tolist())
    by_reach = set(choose(tree.reach, budget).tolist())
    nodes = np.arange(1, len(tree.labels))
    rank_marginal = _rank(tree.path_marginal[1:])
    rank_reach = _rank(tree.reach[1:])
    # the picks right after the path: a narrow column (1280 px with the sidebar) still shows both
    frame = pd.DataFrame({
        "path": [tree.path_text(int(i)) for i in nodes], "DDTree picks": [int(i) in by_marginal for i in nodes],
        "TAPS picks": [int(i) in by_reach for i in nodes], "marginal product": tree.path_marginal[1:],
        "reach": tree.reach[1:], "rank by marginal": rank_marginal, "rank by reach": rank_reach,
        "depth": tree.depths[1:], "node": nodes})
    return frame.sort_values("rank by marginal").reset_index(drop=True)


def _rank(score: np.ndarray) -> np.ndarray:
    order = np.lexsort((np.arange(len(score)), -score))
    ranks = np.empty(len(score), dtype=np.int64)
    ranks[order] = np.arange(1, len(score) + 1)
    return ranks


# ---------------------------------------------------------------------------- the Learn page's state
FACTOR_STEP = 0.05               # the off-mode factor slider's step
MAX_BUDGET = 60                  # the budget slider's top (or the tree's size when smaller)
DEFAULT_BUDGET = 8
MAX_REJECT_DEPTH = 2             # "suppose the target rejects" offers the nodes of depth 1 and 2


@dataclass
class LearnState:
    """What a Learn link describes: a preset, the off-mode factor, the budget and the rejected
    prefix (a node's path text, "" for none)."""
    preset: str
    factor: float
    budget: int
    reject: str = ""

    def tree(self) -> ToyTree:
        preset = PRESETS[self.preset]
        return build_toy_tree(preset.marginals, self.factor, preset.tokens)


def budget_limit(tree: ToyTree) -> int:
    """The largest budget the page offers for this tree."""
    return min(tree.size, MAX_BUDGET)


def reject_options(tree: ToyTree) -> list[int]:
    """The nodes a lecturer may suppose rejected (0: nothing): those of depth 1 and 2."""
    return [0] + [v for v in range(1, len(tree.labels)) if tree.depths[v] <= MAX_REJECT_DEPTH]


def node_by_path(tree: ToyTree, text: str) -> int | None:
    """The node of depth <= 2 whose path reads `text` ("while i"), or None."""
    wanted = " ".join(text.split())
    return next((v for v in reject_options(tree)[1:] if tree.path_text(v) == wanted), None)


def find_preset(text: str) -> str | None:
    """The preset a link names: its name, in any case, spaces or hyphens ("two-good-openings")."""
    def squash(name: str) -> str:
        return "".join(c for c in name.lower() if c.isalnum())

    return next((name for name in PRESETS if squash(name) == squash(text)), None)
