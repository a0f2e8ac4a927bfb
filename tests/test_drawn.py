"""What every page on a link draws for a shared round is built once (issue 49): the tree figure of
a round at a view is built by the first page that shows it and read by every other page, which
shows exactly what it would have built itself (`taps.studio.drawn`)."""

from __future__ import annotations

import json
import threading
import weakref
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the app's packages are not installed (a bare GPU server)")
import test_app  # noqa: E402
import test_link_pages  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from taps.studio.drawn import DrawnFigures, drawn_figures, figure_key  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
tiny_pair_env = test_app.tiny_pair_env     # the app on the tiny pair with a fixed profile saved (autouse)
fresh_runs = test_app.fresh_runs


def open_link(**params) -> AppTest:
    return test_link_pages.open_page("1_Step_through.py", **params)


def tree_spec(at: AppTest) -> str:
    found = [el for el in at.get("plotly_chart") if el.key == "step_tree_chart"]
    assert found
    return found[0].proto.spec


def test_a_shared_rounds_tree_is_built_once_for_every_page_on_the_link():
    drawn = drawn_figures()
    drawn.clear()
    pages = [open_link(prompt="def add(a, b):\n    return", budget="8") for _ in range(3)]
    for at in pages:
        at.button(key="step_btn_step").click().run()
    assert drawn.built == 1                                  # round 1 at the default view, for three pages
    specs = {tree_spec(at) for at in pages}
    assert len(specs) == 1 and "Round 1" in specs.pop()
    for at in pages:
        at.button(key="step_btn_step").click().run()
    assert drawn.built == 2
    pages[0].radio(key="step_color_by").set_value("marginal").run()     # one page's own view: its own figure
    assert drawn.built == 3 and tree_spec(pages[0]) != tree_spec(pages[1])


def test_the_figure_read_from_the_cache_is_the_one_the_page_would_build():
    drawn = drawn_figures()
    drawn.clear()
    first = open_link(prompt="def mul(a, b):\n    return", budget="8")
    first.button(key="step_btn_step").click().run()
    cached = tree_spec(first)
    drawn.clear()                                            # the second page builds its own
    second = open_link(prompt="def mul(a, b):\n    return", budget="8")
    second.button(key="step_btn_step").click().run()
    assert json.loads(tree_spec(second)) == json.loads(cached)


class Round:                      # any object a weak reference can point at
    pass


def test_one_build_per_key_while_many_threads_ask_and_a_gone_round_is_dropped():
    drawn, record, calls = DrawnFigures(limit=4), Round(), []
    gate = threading.Barrier(8)

    def ask() -> None:
        gate.wait()
        drawn.get(record, figure_key("tree", {"b": 1, "a": 2}), lambda: calls.append(1) or object())

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and drawn.built == 1
    assert figure_key({"a": 2, "b": 1}) == figure_key({"b": 1, "a": 2})
    other = DrawnFigures()
    for _ in range(20):                                      # a new round, even one at a gone round's id,
        old = Round()                                        # never gets the gone round's figure
        ref = weakref.ref(old)
        assert other.get(old, "k", lambda: "old figure") == "old figure"
        del old
        assert ref() is None
        assert other.get(Round(), "k", lambda: "new figure") == "new figure"
    for n in range(6):                                       # bounded: the oldest go first
        drawn.get(Round(), n, object)
    assert len(drawn._items) == 4
