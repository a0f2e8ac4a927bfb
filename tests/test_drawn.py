"""What every page on a link draws for a shared round is built once (issue 49): the tree figure of
a round at a view is built by the first page that shows it and read by every other page, which
shows exactly what it would have built itself (`taps.studio.drawn`)."""

from __future__ import annotations

import json
import re
import threading
import weakref
from pathlib import Path

import plotly.io
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


# ---------------------------------------------------------------------------- light drawing (a class)
def light_svg_of(at: AppTest) -> str | None:
    """The Draft tree tab's light picture (`taps.studio.figures.light`), None when it draws a chart."""
    found = [c for c in at.get("bidi_component") if c.proto.component_name == "taps_picture"]
    return json.loads(found[0].proto.json)["svg"] if found else None


def svg_text(svg: str) -> str:
    return re.sub("<[^>]+>", "", svg)


def open_class_link(**params) -> AppTest:
    return test_link_pages.open_page("1_Step_through.py", secrets={"lecturer_password": "light-drawing-test"},
                                     **params)


def test_a_class_page_draws_the_tree_light_once_for_every_page_and_a_student_can_choose_the_chart():
    from taps.studio.figures.light import light_svg

    drawn = drawn_figures()
    drawn.clear()
    link = dict(prompt="def sub(a, b):\n    return", budget="8")
    pages = [open_class_link(**link) for _ in range(3)]
    for at in pages:
        at.button(key="step_btn_step").click().run()
    svgs = [light_svg_of(at) for at in pages]
    assert all(svgs) and len(set(svgs)) == 1 and "Round 1 ·" in svg_text(svgs[0])
    assert not [el for el in pages[0].get("plotly_chart") if el.key == "step_tree_chart"]
    assert drawn.built == 2                         # the round's figure and its light drawing, for three pages
    lone = open_link(**link)                         # the same figure a lone user's chart shows, drawn light
    lone.button(key="step_btn_step").click().run()
    assert light_svg_of(lone) is None
    still = [h for h in pages[0].get("html") if "animation: none" in h.proto.body]    # a class's pages hold still
    assert still and not [h for h in lone.get("html") if "animation: none" in h.proto.body]
    width = int(re.search(r'viewBox="0 0 (\d+) ', svgs[0]).group(1))
    assert light_svg(plotly.io.from_json(tree_spec(lone)), width) == svgs[0]
    pages[1].toggle(key="step_light_trees").set_value(False).run()        # one student's own choice
    assert light_svg_of(pages[1]) is None and tree_spec(pages[1])
    pages[2].button(key="step_btn_step").click().run()
    pages[0].button(key="step_btn_step").click().run()
    assert "Round 2 ·" in svg_text(light_svg_of(pages[0])) and light_svg_of(pages[2]) == light_svg_of(pages[0])
