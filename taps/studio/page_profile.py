"""Which latency profiles a page uses (plain Python, no streamlit): the one place the app's pages and
sidebar, the lecture file, the challenge cards and the scripts ask (`page_profile`).

A page uses one profile per role at a time, and names it wherever that role shows:
- *sizing*: cost mode (TAPS's, and DDTree's when asked) sizes every tree from it. A link's (or a
  challenge card's) profile when it applies to this pair, else this machine's saved profile, else
  the shipped reference measured for this very pair (`taps.profiles.shipped_reference`); none only
  when neither exists (`default_profile`).
- *modelled*: every modelled figure of the page (Step through's counters, the race's lanes on the
  modelled clock and their caption, the repeated race, the sweep) is priced by it: the what-if the
  sidebar picked (a shipped reference, a measured target shape, a roofline estimate), else the
  sizing profile. A what-if prices the rounds the sizing profile shaped; it never resizes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..profiles import shipped_reference
from .speed import MACHINE, resolve_profile, shipped_profiles


@dataclass
class PageProfile:
    """The profiles of a page, by role, with their ids ("" for none)."""

    sizing: object | None            # the LatencyProfile trees are sized from
    sizing_id: str
    model: object | None             # the LatencyProfile every modelled figure is priced by
    model_id: str
    default_id: str                  # what sizes trees when no link names a profile
    default: object | None = None    # its LatencyProfile
    link_id: str = ""                # a link's profile in force, when it is not the default anyway
    link_problem: str = ""           # why a link's profile does not apply here ("" when it does)
    why_none: str = ""               # why nothing sizes trees ("" when something does)

    @property
    def what_if(self) -> bool:
        """Whether the modelled figures are priced by another profile than the one sizing the trees."""
        return self.model_id != self.sizing_id


def default_profile(pair, budget: int = 0):
    """The profile runs size trees from when no link names one: this machine's saved profile, else
    the shipped reference measured for this very pair. (profile, id, why none): (None, "", why) only
    when neither exists."""
    profile, why_not_machine = resolve_profile(pair, MACHINE, budget)
    if profile is not None:
        return profile, MACHINE, ""
    if pair is None:
        return None, "", why_not_machine
    name, found, why = shipped_reference(pair, shipped_profiles(pair.name))
    if found is None:
        return None, "", f"{why_not_machine}, and {why}"
    return found, name, ""


def page_profile(pair, budget: int = 0, link_id: str | None = None, what_if: str | None = None) -> PageProfile:
    """The profiles a page uses: trees sized from `link_id`'s profile when it applies to `pair`
    (else the default, and why not in `link_problem`), modelled figures priced by `what_if`'s
    when given and usable (else by the sizing profile)."""
    sizing, sizing_id, why_none = default_profile(pair, budget)
    default, default_id, link_problem, used_link = sizing, sizing_id, "", ""
    if link_id and link_id != default_id:
        found, link_problem = resolve_profile(pair, link_id, budget)
        if found is not None:
            sizing, sizing_id, used_link, why_none = found, link_id, link_id, ""
    model, model_id = sizing, sizing_id
    if what_if and what_if != sizing_id and pair is not None:
        priced, _ = resolve_profile(pair, what_if)
        if priced is not None:
            model, model_id = priced, what_if
    return PageProfile(sizing, sizing_id, model, model_id, default_id, default, used_link, link_problem, why_none)


def batch_offer(pair) -> tuple[str, str]:
    """A profile with the verify cost at a batch for a race at a batch, when the page's has none:
    (its id, its name for a button): the pair's shipped reference when it has one, else the H200 x
    Qwen3-8B roofline estimate (every roofline profile carries it)."""
    from .. import roofline
    from ..batch_cost import of_profile

    name, reference, _ = shipped_reference(pair, shipped_profiles(pair.name))
    if reference is not None and of_profile(reference) is not None:
        return name, "the shipped reference profile"
    return roofline.profile_id("h200", "qwen3-8b"), "the H200 x Qwen3-8B roofline estimate"
