"""The policy registry: every decoding policy (selector) once, with what the rest of the code asks of it.

A policy is one `Policy` entry here (its name, label, colour, symbol and needs) plus one selector
class in `taps.selectors` whose `policy` attribute is that entry. The settings, the command line,
the bench, the figures and the pages read this registry; nobody compares policy names as
strings. Registering a new one is one line:

    MINE = register(Policy("mine", "Mine", colour="#F0E442", symbol="hexagon", pattern="-"))

Pure Python (no torch), so model-free code (the Learn toy, figures) can import it.
"""

from __future__ import annotations

from dataclasses import dataclass

# Okabe-Ito colours: told apart by colour-blind viewers; figures add shapes and patterns besides.
PALETTE = {"black": "#000000", "orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73", "yellow": "#F0E442",
           "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7", "grey": "#8C8C8C"}


@dataclass(frozen=True)
class Policy:
    name: str                         # in settings, rows, links and latency profiles: "ddtree"
    label: str                        # in figures, tables and pages: "DDTree"
    colour: str                       # the same in every figure and bench plot
    symbol: str                       # plotly marker symbol
    pattern: str = ""                 # plotly bar pattern (colour never carries meaning alone)
    prose: str = ""                   # in a sentence ("the oracle"); the label when empty
    needs_drafter: bool = True        # False only for plain autoregressive decoding
    needs_path_selector: bool = False  # DFlash2: the pair must hold a trained path selector (pair.path_selector)
    uses_estimator: bool = False      # TAPS: its reach comes from the chosen estimator
    size_field: str = ""              # the DecodeConfig field that picks its tree size ("taps_mode")
    size_modes: tuple[str, ...] = ()  # that field's choices, the default first
    profile_modes: tuple[str, ...] = ()   # the size modes that read the latency profile
    greedy_only: bool = False         # defined at temperature 0 only
    hindsight: bool = False           # reads the target's own continuation (the oracle)
    baseline: bool = False            # the run every speed-up is measured against (AR)

    def uses_profile(self, size_mode: str) -> bool:
        """Whether a run of this policy with this size choice sizes its trees from a latency profile."""
        return size_mode in self.profile_modes

    def run_label(self, estimator: str = "", budget: int | None = None) -> str:
        """A run's name in tables, legends, progress lines and latency profiles: `ar`, `ddtree@16`,
        `taps/online@16`, or without the budget `ddtree`, `taps/online`."""
        name = f"{self.name}/{estimator}" if self.uses_estimator else self.name
        return name if self.baseline or budget is None else f"{name}@{budget}"

    def in_prose(self) -> str:
        return self.prose or self.label

    def runs_on(self, pair) -> bool:
        """Whether `pair` has what this policy needs (a drafter, a path selector); `DecodeConfig.validate`
        says what is missing when it does not."""
        if self.needs_drafter and getattr(pair, "drafter", None) is None:
            return False
        return not self.needs_path_selector or getattr(pair, "path_selector", None) is not None


REGISTRY: dict[str, Policy] = {}


def register(policy: Policy) -> Policy:
    """Add a policy (its selector class names it in `taps.selectors`); returns it, for a constant."""
    if policy.name in REGISTRY and REGISTRY[policy.name] != policy:
        raise ValueError(f"a different policy named '{policy.name}' is registered already")
    REGISTRY[policy.name] = policy
    return policy


def unregister(name: str) -> None:
    """Drop a policy (tests that register one of their own)."""
    REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    """Every registered policy's name, in registration order (the built-ins: AR, DFlash, DDTree, TAPS, oracle,
    DFlash2)."""
    return tuple(REGISTRY)


def policy(name: str) -> Policy:
    """The registered policy of this name; a ValueError listing the choices otherwise."""
    if name not in REGISTRY:
        raise ValueError(f"unknown selector '{name}': choose one of {', '.join(REGISTRY)}")
    return REGISTRY[name]


def label_policy(run_label: str) -> Policy | None:
    """The policy a run label (`taps/online@16`, `ddtree`) names, or None."""
    return REGISTRY.get(run_label.split("@")[0].split("/")[0])


AR = register(Policy("ar", "AR", PALETTE["grey"], "square", needs_drafter=False, baseline=True))
DFLASH = register(Policy("dflash", "DFlash", PALETTE["sky"], "triangle-up", "/"))
DDTREE = register(Policy("ddtree", "DDTree", PALETTE["orange"], "diamond", "x", size_field="ddtree_mode",
                         size_modes=("budget", "cost"), profile_modes=("cost",)))
TAPS = register(Policy("taps", "TAPS", PALETTE["blue"], "circle", ".", uses_estimator=True, size_field="taps_mode",
                       size_modes=("cost", "reach", "utility"), profile_modes=("cost",)))
ORACLE = register(Policy("oracle", "Oracle", PALETTE["green"], "star", "+", prose="the oracle", greedy_only=True,
                         hindsight=True))
# DFlash2's path selector on the drafter's top-K candidates: a chain, so no size modes
DFLASH2 = register(Policy("dflash2", "DFlash2", PALETTE["purple"], "triangle-down", "\\", needs_path_selector=True))
