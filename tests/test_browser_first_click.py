"""The first click on a fresh machine, in Chromium, on the SHIPPED pair (and a Step card landing
on its answer): no saved latency profile (an empty cache folder), default settings (TAPS in cost
mode). The first Step shows a tree within 10 s, with no error and no button to press first, and
the page names the profile its trees and figures used (the shipped reference CPU's until this
machine's own is measured). Home says what the profile is for, and fits the window in presenter
mode."""

from __future__ import annotations

import os
import re
import time

import pytest
import test_browser
from test_browser import idle, settled, shown_once, streamlit_server, tree_chart

browser = test_browser.browser          # the shared Chromium fixture

pytestmark = pytest.mark.browser

REFERENCE_NAME = "2-core reference CPU"


@pytest.fixture(scope="module")
def shipped_server(tmp_path_factory):
    """`streamlit run app.py` on the shipped pair (test_browser's server env sets TAPS_PAIR to the
    folder given: "" is the shipped pair) with a fresh, empty cache."""
    folder = tmp_path_factory.mktemp("first-click")
    cache = folder / "cache"
    cache.mkdir()
    with streamlit_server("", cache, folder / "server.log") as url:
        yield url, cache


def page_text(page) -> str:
    return page.locator('[data-testid="stApp"]').inner_text()


@pytest.mark.parametrize("size", [(1280, 720), (1600, 1000)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_first_step_on_a_fresh_machine_shows_a_tree_and_names_the_profile(shipped_server, browser, size):
    from playwright.sync_api import expect

    url, cache = shipped_server
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    page.set_default_timeout(90_000)
    page.goto(f"{url}/Step_through")
    step_button = shown_once(page, page.get_by_role("button", name="Step", exact=True))
    settled(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    started = time.perf_counter()
    step_button.click()
    expect(tree_chart(page).locator(".gtitle")).to_contain_text("Round 1 ·", timeout=10_000)
    took = time.perf_counter() - started
    idle(page)
    assert took < 10, f"the first Step took {took:.1f} s"
    print(f"first Step at {size[0]}x{size[1]}: {took:.2f} s from the click to the tree")
    errors = page.locator('[data-testid="stException"], [data-testid="stAlertContentError"]')
    assert errors.count() == 0, errors.all_inner_texts()
    text = page_text(page)
    assert "Cannot run" not in text and "none is saved" not in text
    assert REFERENCE_NAME in text                         # the profile the trees were sized from, named
    sidebar = page.locator('[data-testid="stSidebar"]')
    expect(sidebar).to_contain_text("until this machine's own are measured")       # the one-line reason
    expect(sidebar.get_by_role("button", name="Measure latency profile")).to_be_visible()
    assert not list(cache.rglob("*.json"))                # nothing was measured or saved to get there
    page.close()


def test_home_says_what_the_profile_is_for_and_fits_presenter_mode(shipped_server, browser):
    from playwright.sync_api import expect

    url, _ = shipped_server
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.set_default_timeout(90_000)
    page.goto(url)
    chart = page.locator('[data-testid="stPlotlyChart"]').first
    chart.wait_for()
    settled(page)
    expect(page.locator('[data-testid="stMain"]')).to_contain_text("Latency profile")
    expect(page.locator('[data-testid="stMain"]')).to_contain_text(REFERENCE_NAME)
    # one depth title under both panels, clear of the tick labels and the legend
    titles = chart.locator(".annotation-text", has_text="depth")
    assert titles.count() == 1 and chart.locator(".xtitle").count() == 0
    page.locator('label:has-text("Presenter mode")').first.click()
    expect(page.locator('[data-testid="stSidebar"]')).to_be_hidden()
    settled(page)
    chart = page.locator('[data-testid="stPlotlyChart"]').first
    box = chart.locator("svg.main-svg").first.bounding_box()
    assert box is not None and box["y"] + box["height"] <= 720 + 1, box     # the whole toy tree in the window
    assert page.locator('[data-testid="stException"]').count() == 0
    if os.environ.get("TAPS_SCREENSHOT_DIR"):
        page.screenshot(path=os.path.join(os.environ["TAPS_SCREENSHOT_DIR"], "home-presenter-1280x720.png"))
    page.close()


def test_the_first_pages_after_a_start_say_what_they_wait_for(tmp_path, browser):
    """A fresh server: the first page says at once that the engine is loading (not grey boxes),
    and four pages opening one link at that moment all draw the Step page with no error."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with streamlit_server("", cache, tmp_path / "server.log") as url:
        pages = []
        for _ in range(4):
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.set_default_timeout(90_000)
            page.goto(f"{url}/Step_through?example=merge", wait_until="commit")
            pages.append(page)
        pages[0].get_by_text("Starting TAPS Studio").wait_for()
        assert "loading the" in page_text(pages[0])
        for page in pages:
            page.get_by_role("button", name="Step", exact=True).wait_for()
            settled(page)
            assert "Starting TAPS Studio" not in page_text(page)
            assert page.locator('[data-testid="stException"]').count() == 0
            page.close()


def test_step_cards_land_on_their_answer(shipped_server, browser):  # noqa: F811
    """A Step card's link opens its page with the answer inside a 1280x720 window: 'TAPS fewer than
    DDTree' the target's token its answer names, a label on Marginal vs path's tree (not inside a
    "+N more" entry); 'cost vs reach' the cost model's curve, beside the Select stage's tree."""
    from urllib.parse import urlencode

    from taps import load_pair
    from taps.studio.challenges import card, check

    def inside(box) -> bool:
        return bool(box) and 0 <= box["y"] and box["y"] + box["height"] <= 720 and box["x"] + box["width"] <= 1280

    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.set_default_timeout(90_000)
    item = card("taps-below-ddtree")
    verdict = check(item, load_pair(None))                              # where the claim holds on this machine
    page.goto(f"{shipped_server[0]}/{item.page}?{urlencode(verdict.params)}")
    first = verdict.facts["ddtree_first"]                               # the target's token: whole or cut to fit
    shown = "|".join([re.escape(first)] + [re.escape(first[:i]) + "…" for i in range(2, len(first))])
    answer = page.locator('[data-testid="stPlotlyChart"] svg text').filter(has_text=re.compile(f"^({shown})$"))
    answer.first.wait_for(timeout=40_000)
    time.sleep(1)                                       # the figure settles at its final size
    boxes = [answer.nth(i).bounding_box() for i in range(answer.count())]
    assert any(inside(b) for b in boxes), boxes
    item = card("cost-vs-reach")
    page.goto(f"{shipped_server[0]}/{item.page}?{urlencode(item.params)}")
    charts = page.locator('[data-testid="stPlotlyChart"]')
    curve = charts.filter(has=page.locator(".gtitle", has_text="expected tokens"))
    curve.first.locator(".xtitle").wait_for()
    settled(page)
    time.sleep(1)
    assert inside(curve.first.bounding_box()), curve.first.bounding_box()
    page.close()


def test_the_candidates_view_fits_a_projector(shipped_server, browser):  # noqa: F811
    """Step through's Candidates view in presenter mode at 1280x720 on the shipped pair: the whole grid
    (title, legend with the five selectors, TAPS twice, every row down to the headroom rows) inside the window."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.set_default_timeout(90_000)
    page.goto(f"{shipped_server[0]}/Step_through?example=search&round=5&view=candidates&presenter=1")
    chart = page.locator('[data-testid="stPlotlyChart"]').filter(has=page.locator(".gtitle", has_text="top 16"))
    chart.first.locator(".ytick").first.wait_for()
    settled(page)
    time.sleep(1)
    box = chart.first.locator("svg.main-svg").first.bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= 720 and box["x"] + box["width"] <= 1280, box
    legend = chart.first.locator(".legendtext").evaluate_all("els => els.map(e => e.textContent)")
    assert [name.split(" τ")[0] for name in legend[1:]] == ["DFlash", "DFlash2", "DDTree", "TAPS/online",
                                                            "TAPS/selector"], legend
    assert chart.first.locator(".ytick", has_text="top-16").count() == 1
    page.close()
