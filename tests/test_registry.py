"""A new policy is one Selector class and one registry line: a toy policy registered here runs through
the engine (losslessly), the command line and the Step through page, with nothing else edited."""

from __future__ import annotations

import numpy as np
import pytest

from taps import greedy_continuation
from taps.eval.cli import main
from taps.policies import PALETTE, REGISTRY, Policy, names, register, unregister
from taps.pool import tree_from_nodes
from taps.selectors import Selector, make_selector

TWIN = Policy("twin", "Twin paths", PALETTE["purple"], "hexagon", "-")


class TwinPathsSelector(Selector):
    """The drafter's two best tokens at depth 1, each followed by the argmax chain (a toy policy)."""

    policy = TWIN

    def pool(self, root_token, lattice, cfg, ctx):
        depth = min(lattice.depth, max(1, cfg.budget // 2))
        nodes = []                     # (parent index, depth, rank at that depth), parents first
        for branch in (0, 1):
            above = 0
            for d in range(1, depth + 1):
                nodes.append((above, d, branch if d == 1 else 0))
                above = len(nodes)
        return tree_from_nodes(root_token, nodes, lattice)


@pytest.fixture
def twin():
    register(TWIN)
    yield TWIN
    unregister(TWIN.name)


def test_registering_adds_it_everywhere_a_policy_is_listed(twin):
    from taps.config import field_spec

    assert names()[-1] == "twin" and REGISTRY["twin"] is twin
    assert "twin" in field_spec("selector")["choices"]
    assert isinstance(make_selector("twin"), TwinPathsSelector)
    with pytest.raises(ValueError, match="different policy named 'twin'"):
        register(Policy("twin", "Another", "#000000", "circle"))


def test_every_registered_policy_looks_apart_and_has_its_selector():
    """The built-ins (DFlash2 among them) each have a colour, a marker and a bar pattern of their own,
    and a Selector class that names them."""
    assert {"ar", "dflash", "ddtree", "taps", "oracle", "dflash2"} <= set(names())
    for what in ("colour", "symbol", "pattern"):
        values = [getattr(p, what) for p in REGISTRY.values()]
        assert len(set(values)) == len(values), what
    for name in names():
        assert make_selector(name).policy is REGISTRY[name]


def test_the_toy_policy_is_lossless(twin, tiny_pair):
    from taps import DecodeSession

    prompt = [5, 17, 33, 2, 60, 8]
    for budget in (2, 6, 16):
        session = DecodeSession(tiny_pair, prompt, selector="twin", budget=budget, max_new_tokens=24,
                                stop_at_eos=False)
        session.run()
        assert session.generated == greedy_continuation(tiny_pair, prompt, 24)
        assert all(np.all(np.diff(r.selected) > 0) and r.verified_nodes <= budget for r in session.rounds)


def test_the_toy_policy_runs_through_the_command_line(twin, tiny_pair_dir, capsys):
    assert main(["generate", "--pair", str(tiny_pair_dir), "--selector", "twin", "--budget", "6",
                 "--max-new-tokens", "8", "--prompt", "def f(x):"]) == 0
    out = capsys.readouterr().out
    assert "selector twin, budget 6" in out and "tokens in" in out
    assert main(["compare", "--pair", str(tiny_pair_dir), "--prompt", "def f(x):", "--selectors", "ar,twin",
                 "--budgets", "4", "--max-new-tokens", "8"]) == 0
    table = capsys.readouterr().out
    assert any(line.startswith("twin ") and line.endswith("yes") for line in table.splitlines())


def test_the_toy_policy_runs_on_the_step_through_page(twin, tiny_pair_dir, monkeypatch):
    pytest.importorskip("streamlit", reason="the app's packages are not installed (a bare GPU server)")
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("TAPS_PAIR", str(tiny_pair_dir))
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app.py"), default_timeout=120).run()
    at.switch_page("app_pages/1_Step_through.py").run()
    assert "twin" in at.selectbox(key="step_selector").options
    at.text_area(key="step_prompt").set_value("def add(a, b):\n    return")
    at.selectbox(key="step_selector").set_value("twin")
    at.number_input(key="step_budget").set_value(6)
    at.button(key="step_btn_step").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    record = at.session_state["step_controller"].session.rounds[-1]
    assert record.selector == "twin" and record.number == 1 and record.verified_nodes <= 6
