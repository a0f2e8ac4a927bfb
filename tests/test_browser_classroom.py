"""A class on one link, in Chromium: one server with the shipped pair and an empty cache, six
browser pages (one Chromium, six contexts, 1280x720) on one shared link press Step together, three
times. Every page reaches round 3 with the single-user rounds, no page shows an error, and the
server's log shows the link's three rounds decoded once each (taps.studio.serve)."""

from __future__ import annotations

import re
import time

import pytest
import test_browser
from test_browser import idle, metric, settled, streamlit_server, tree_chart

browser = test_browser.browser          # the shared Chromium fixture

pytestmark = pytest.mark.browser

LINK = "/Step_through?example=merge&estimator=learned&budget=16"
PAGES = 6
STEPS = 3

# arms the page's Step button to be clicked at one wall-clock moment (every page the same), and
# returns at once; window.__classClicks counts the clicks made
ARM_CLICK = """at => {
  setTimeout(() => {
    const button = [...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Step' && !b.disabled);
    if (button) { button.click(); window.__classClicks = (window.__classClicks || 0) + 1; }
  }, Math.max(0, at - Date.now()));
}"""


@pytest.fixture(scope="module")
def class_server(tmp_path_factory):
    """`streamlit run app.py` on the shipped pair with a fresh, empty cache, and its log."""
    folder = tmp_path_factory.mktemp("classroom")
    cache = folder / "cache"
    cache.mkdir()
    log = folder / "server.log"
    with streamlit_server("", cache, log) as url:
        yield url, log


def solo_rounds() -> list[tuple[int, int]]:
    """(tokens so far, tau) of the link's first rounds decoded alone in this process, with the
    profile a fresh machine's app sizes trees from (the shipped reference CPU's)."""
    from taps import load_pair
    from taps.config import DecodeConfig
    from taps.eval.prompts import example_prompts
    from taps.studio.link import page_defaults, parse_step_link
    from taps.studio.page_profile import default_profile
    from taps.studio.serve import SharedRuns
    from taps.studio.stepper import StepController

    pair = load_pair()
    defaults = page_defaults(max_new_tokens=64, block_size=pair.drafter.block_size)
    link, messages = parse_step_link({"example": ["merge"], "estimator": ["learned"], "budget": ["16"]},
                                     example_prompts(), defaults, pair)
    assert not messages
    config = DecodeConfig(**link.settings)
    profile, _, why = default_profile(pair, config.budget)
    assert profile is not None, why
    ctrl = StepController(runs=SharedRuns())
    ctrl.advance(pair, link.prompt, config, profile, rounds=STEPS)
    out, tokens = [], 0
    for record in ctrl.visible:
        tokens += record.tau
        out.append((tokens, record.tau))
    return out


def test_six_pages_on_one_link_step_together_and_the_link_decodes_once(class_server, browser):
    from playwright.sync_api import expect

    url, log = class_server
    expected = solo_rounds()
    contexts = [browser.new_context(viewport={"width": 1280, "height": 720}) for _ in range(PAGES)]
    pages = []
    for context in contexts:
        page = context.new_page()
        page.set_default_timeout(120_000)
        page.goto(url + LINK)
        pages.append(page)
    for page in pages:
        page.get_by_role("button", name="Step", exact=True).wait_for()
        settled(page)
    latencies = []
    for number in range(1, STEPS + 1):
        at = int(pages[0].evaluate("Date.now()")) + 1500
        for page in pages:                                  # all armed before the moment comes
            page.evaluate(ARM_CLICK, at)
        time.sleep(1.5)
        started = time.perf_counter()
        for page in pages:
            page.wait_for_function(f"(window.__classClicks || 0) >= {number}")
        for page in pages:
            expect(tree_chart(page).locator(".gtitle")).to_contain_text(f"Round {number} ·", timeout=120_000)
            latencies.append(time.perf_counter() - started)
        for page in pages:
            idle(page)
            tokens, tau = expected[number - 1]
            expect(metric(page, "Tokens")).to_have_text(str(tokens))
            expect(metric(page, "τ this round")).to_have_text(str(tau))
    for page in pages:
        errors = page.locator('[data-testid="stException"], [data-testid="stAlertContentError"]')
        assert errors.count() == 0, errors.all_inner_texts()
        assert "Cannot run" not in page.locator('[data-testid="stApp"]').inner_text()
    text = log.read_text()
    decoded = re.findall(r"link (\w+): decoded round (\d+)", text)
    assert [number for _, number in decoded] == [str(n) for n in range(1, STEPS + 1)], text[-3000:]
    assert len({name for name, _ in decoded}) == 1 and len(re.findall(r"link \w+: opened", text)) == 1
    print(f"{PAGES} pages, {STEPS} Steps together: slowest page {max(latencies):.2f} s after the click")
    for context in contexts:
        context.close()
