"""A lecture stays on screen, in Chromium: at 1280x720 in the default mode and at 1600x1000 in
presenter mode, after 6 Steps, 3 → presses and 4 autoplay rounds, the Step button, the round
counter and the whole tree figure lie inside the window (their bounding boxes), and the page has
not scrolled them away."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from test_browser import COUNT_STEP_CLICKS, LONG_RUN, browser, click_step, idle, server, settled, shown_once  # noqa: F401
from test_browser_lecture import press, title, unfocus

pytestmark = pytest.mark.browser

IN_VIEW = """() => {
  const box = el => { if (!el) return null; const r = el.getBoundingClientRect();
                      return [r.left, r.top, r.right, r.bottom]; };
  const step = [...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Step');
  const counter = [...document.querySelectorAll('[data-testid="stMetric"]')]
      .find(m => m.innerText.includes('τ this round'));
  const chart = [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
      .find(c => (c.querySelector('.gtitle') || {}).textContent?.includes('Round'));
  return {step: box(step), counter: box(counter), tree: box(chart && chart.querySelector('svg.main-svg')),
          window: [window.innerWidth, window.innerHeight], scroll: window.scrollY};
}"""


def assert_in_view(page, when: str) -> None:
    idle(page)
    page.wait_for_timeout(300)
    try:            # a rerun the page starts by itself (the AR baseline catching up) redraws them a moment
        page.wait_for_function(f"() => {{ const s = ({IN_VIEW})(); return s.step && s.counter && s.tree; }}",
                               timeout=15_000)
    except Exception:  # noqa: BLE001 - the assertion below names what is missing
        pass
    seen = page.evaluate(IN_VIEW)
    width, height = seen["window"]
    for name in ("step", "counter", "tree"):
        box = seen[name]
        assert box is not None, f"{when}: no {name} on the page"
        left, top, right, bottom = box
        assert left >= -1 and top >= -1 and right <= width + 1 and bottom <= height + 1, \
            f"{when}: the {name} ({[round(v) for v in box]}) is not inside the {width}x{height} window " \
            f"(scrolled {seen['scroll']} px)"


@pytest.mark.parametrize("size, presenter", [((1280, 720), False), ((1600, 1000), True)],
                         ids=["1280x720-default", "1600x1000-presenter"])
def test_controls_counters_and_tree_stay_in_view(server, browser, size, presenter):  # noqa: F811
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    page.set_default_timeout(90_000)
    page.add_init_script(COUNT_STEP_CLICKS)
    query = {"prompt": LONG_RUN, **({"presenter": "1"} if presenter else {})}
    page.goto(f"{server}/Step_through?{urlencode(query)}")
    shown_once(page, page.get_by_role("button", name="Step", exact=True))
    page.wait_for_function("() => (window.__tapsLecture || {}).gen >= 1")
    settled(page)
    for number in range(1, 7):
        idle(page)
        click_step(page)
        expect(title(page)).to_contain_text(f"Round {number} ·")
        assert_in_view(page, f"after Step {number}")
    unfocus(page)
    for number in range(7, 10):
        press(page, "ArrowRight")
        expect(title(page)).to_contain_text(f"Round {number} ·")
        assert_in_view(page, f"after → to round {number}")
    press(page, " ")                                                   # autoplay: four rounds by themselves
    expect(title(page)).to_contain_text("Round 13 ·", timeout=120_000)
    press(page, " ")
    idle(page)
    assert_in_view(page, "after 4 autoplay rounds")
    page.close()


COMPACT_DRAWN = """() => { const h = document.querySelector('header[data-testid="stHeader"]');
                             return !h || getComputedStyle(h).display === 'none'; }"""
AXIS_IN_VIEW = """() => {
  const chart = [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
      .find(c => (c.querySelector('.gtitle') || {}).textContent?.includes('Round'));
  const axis = chart && chart.querySelector('.xtitle');
  const r = axis ? axis.getBoundingClientRect() : null;
  return r ? r.bottom <= window.innerHeight + 1 : null;
}"""


@pytest.mark.parametrize("presenter", [False, True], ids=["default", "presenter"])
def test_the_last_round_fits_a_projector_after_run_to_end_and_autoplay(server, browser, presenter):  # noqa: F811
    """At 1280x720, the last round of a finished run (Run to end; then space, which stops autoplay at
    the end and says so; then the last round opened from its link): the Step button, the counters
    and the whole tree, its depth axis's title included, inside the window. The end-of-run note
    shares the buttons' row instead of pushing the tree down (issue 51, point 1)."""
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.set_default_timeout(90_000)
    query = {"prompt": LONG_RUN, "max_new_tokens": "24", **({"presenter": "1"} if presenter else {})}
    page.goto(f"{server}/Step_through?{urlencode(query)}")
    shown_once(page, page.get_by_role("button", name="Run to end", exact=True))
    page.wait_for_function("() => (window.__tapsLecture || {}).gen >= 1")
    settled(page)
    page.get_by_role("button", name="Run to end", exact=True).click()
    expect(page.get_by_text("Finished after")).to_be_visible()
    settled(page)
    assert_in_view(page, "after Run to end")
    assert page.evaluate(AXIS_IN_VIEW), "the depth axis's title is below the window after Run to end"
    last = title(page).text_content().split("Round ")[1].split(" ")[0]
    unfocus(page)
    press(page, " ")
    expect(page.get_by_text("Autoplay stopped at the end of the run")).to_be_visible()
    settled(page)
    assert_in_view(page, "after autoplay stopped at the end")
    assert page.evaluate(AXIS_IN_VIEW), "the depth axis's title is below the window after autoplay stopped"
    link = page.url
    assert f"round={last}" in link
    page.close()
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.set_default_timeout(90_000)
    page.goto(link)
    expect(title(page)).to_contain_text(f"Round {last} ·")
    page.wait_for_function(COMPACT_DRAWN)          # the browser's size report has laid the page out for 720 px
    settled(page)
    assert_in_view(page, "the last round opened from its link")
    assert page.evaluate(AXIS_IN_VIEW), "the depth axis's title is below the window on the last round's link"
    page.close()
