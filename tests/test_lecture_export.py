"""The lecture file in a real browser (Chromium through Playwright), opened from file:// with the
network off and every non-file request aborted and recorded (none may be attempted):

- a run of the shipped pair decoded by the Step page's controller: → ← ↓ ↑ End Home and space
  (autoplay moves by itself, space stops it) show the round, stage and counters that the page's
  `StepController.numbers` gives for that round; `?` lists the keys; at 1280x720 nothing is cut off
  (screenshots kept in $TAPS_SCREENSHOT_DIR when set); `#round=` opens a round, on opening and when
  the address changes, and a round outside the run opens the nearest one with a note;
- the file the live Step page's *Lecture as offline HTML* button makes (the tiny pair) opens at the
  page's round with the page's own counters, and at round 1 after Home on both.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlencode

import pytest
from test_browser import LONG_RUN, ROOT, browser, keep_screenshot, server, settled  # noqa: F401
from test_browser_lecture import open_link, press, title, unfocus
from test_lecture_file import IDLE, page_cells

pytestmark = pytest.mark.browser
SIZE = {"width": 1280, "height": 720}
SHIPPED = ROOT / "assets" / "models" / "taps-code-10m"

SHOWN = """() => ({
  round: Number(document.getElementById('round-number').textContent),
  title: (document.querySelector('#figure .gtitle') || {}).textContent || '',
  narration: document.getElementById('narration').textContent,
  state: window.tapsLecture.state,
  cells: Object.fromEntries([...document.querySelectorAll('[data-counter]')].map(
    m => [m.dataset.counter, [m.querySelector('.value').textContent, m.querySelector('.delta').textContent]])),
})"""

# what does not fit at this window size: the page scrolling sideways, a figure, button or counter
# beyond the window's edges, a counter's label cut short, two controls of the top bar overlapping
CUT_OFF = """() => {
  const out = [], W = window.innerWidth, H = window.innerHeight;
  if (document.documentElement.scrollWidth > W) out.push('page scrolls sideways');
  const svg = document.querySelector('#figure .main-svg').getBoundingClientRect();
  if (svg.left < 0 || svg.right > W || svg.bottom > H) out.push('figure ' + JSON.stringify(svg));
  const controls = [...document.querySelectorAll('#about-line button, #bar > *, #bar .tabs button, ' +
                                                 '#stagebar button, [data-counter]')]
    .filter(el => el.getClientRects().length);
  controls.forEach(el => {
    const r = el.getBoundingClientRect();
    if (r.left < 0 || r.right > W || r.top < 0 || r.bottom > H) out.push('outside: ' + el.textContent.trim());
    if (el.scrollWidth > el.clientWidth + 1 && el.tagName === 'BUTTON') out.push('cut: ' + el.textContent.trim());
  });
  document.querySelectorAll('[data-counter] .label, [data-counter] .value').forEach(el => {
    if (el.scrollWidth > el.clientWidth + 1) out.push('cut: ' + el.textContent);
  });
  const bar = [...document.querySelectorAll('#bar > *')].map(el => el.getBoundingClientRect());
  bar.forEach((a, i) => { if (i && a.left < bar[i - 1].right - 0.5) out.push('overlap in the top bar at ' + i); });
  return out;
}"""


def offline_page(browser, path: Path, fragment: str = ""):  # noqa: F811
    """The file opened from file:// (at `fragment`, "#round=3") in a fresh context with the network
    off; returns (page, the addresses of every non-file request attempted, each aborted)."""
    context = browser.new_context(viewport=SIZE)
    context.set_offline(True)
    attempted: list[str] = []

    def only_files(route) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            attempted.append(route.request.url)
            route.abort()

    context.route("**/*", only_files)
    page = context.new_page()
    page.set_default_timeout(60_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("request", lambda request: None if request.url.startswith(("file://", "data:", "blob:"))
            else attempted.append(request.url))
    page.goto(path.resolve().as_uri() + fragment)
    page.wait_for_function("() => window.tapsLecture && window.tapsLecture.state.round >= 1")
    page.wait_for_function("() => !!document.querySelector('#figure .gtitle')")
    assert errors == []
    return page, attempted


def shown(page, number: int, stage: str | None = None) -> dict:
    """What the file shows once its figure has drawn round `number` (at `stage`, when given)."""
    from taps.record import STAGES
    from taps.studio.lesson import STAGE_TITLES

    heading = f"Round {number} · " + (f"{STAGES.index(stage) + 1} of 6: {STAGE_TITLES[stage]}" if stage else "")
    page.wait_for_function("text => (document.querySelector('#figure .gtitle') || {}).textContent.startsWith(text)",
                           arg=heading)
    seen = page.evaluate(SHOWN)
    seen["cells"] = {key: tuple(value) for key, value in seen["cells"].items()}
    return seen


@pytest.fixture(scope="module")
def shipped_lecture(tmp_path_factory):
    """The fib example on the shipped pair at the page's settings (32 new tokens), decoded by the
    page's controller and exported; with the counters the page shows at each round."""
    from taps.config import DecodeConfig
    from taps.eval.prompts import example_by_id
    from taps.profiles import shipped_reference
    from taps.studio.app_state import load_pair_from_source
    from taps.studio.lecture_file import controller_lecture
    from taps.studio.stepper import StepController

    pair = load_pair_from_source("", "cpu")
    _, profile, why = shipped_reference(pair)
    assert profile is not None, why
    ctrl = StepController()
    ctrl.advance(pair, example_by_id("fib")["prompt"], DecodeConfig(max_new_tokens=32), profile, None)
    ctrl.show(1)
    page = controller_lecture(ctrl, pair.name, profile, "reference CPU", load=IDLE,
                              exported_at=datetime(2026, 12, 5, 9, 30, tzinfo=timezone.utc))
    path = tmp_path_factory.mktemp("lecture") / "fib.html"
    path.write_text(page, encoding="utf-8")
    rounds = ctrl.visible
    expected = {}
    for n in range(1, len(rounds) + 1):
        ctrl.show(n)
        expected[n] = page_cells(ctrl.numbers(profile), rounds[n - 1], sum(r.verified_nodes for r in rounds[:n]))
    print(f"lecture file of {len(rounds)} rounds: {path.stat().st_size / 1e6:.2f} MB")
    return path, expected, rounds, ctrl.config


@pytest.mark.skipif(not (SHIPPED / "pair.json").exists(), reason="the shipped pair is not in assets/models")
def test_the_file_plays_offline_with_the_pages_keys_and_numbers(browser, shipped_lecture, tmp_path):  # noqa: F811
    from taps.studio.figures import stage_narration

    path, expected, rounds, config = shipped_lecture
    last = len(rounds)
    assert last >= 6
    page, attempted = offline_page(browser, path)

    def check(number: int, stage: str | None = None) -> dict:
        seen = shown(page, number, stage)
        assert seen["round"] == number and seen["state"]["round"] == number
        assert seen["cells"] == expected[number], (number, seen["cells"], expected[number])
        if stage:
            assert seen["state"] == dict(seen["state"], view="stage", stage=stage)
            assert seen["narration"].endswith(stage_narration(rounds[number - 1], stage, config))
        else:
            assert seen["state"]["view"] == "tree"
        return seen

    check(1)
    for number in (2, 3, 4):
        press_key(page, "ArrowRight")
        check(number)
    press_key(page, "ArrowLeft")
    check(3)
    press_key(page, "ArrowDown")                     # opens Stage by stage at Draft
    check(3, "draft")
    press_key(page, "ArrowDown")
    check(3, "pool")
    page.screenshot(path=tmp_path / "lecture-file-stage.png")
    keep_screenshot(tmp_path / "lecture-file-stage.png")
    assert page.evaluate(CUT_OFF) == []
    press_key(page, "End")                           # a round not walked yet opens at Draft
    check(last, "draft")
    press_key(page, "ArrowUp")                       # before Draft: the previous round's Commit
    check(last - 1, "commit")
    press_key(page, "Home")
    check(1, "draft")

    page.get_by_role("tab", name="Draft tree").click()
    check(1)
    page.screenshot(path=tmp_path / "lecture-file-tree.png")
    keep_screenshot(tmp_path / "lecture-file-tree.png")
    assert page.evaluate(CUT_OFF) == []
    press_key(page, " ")                             # autoplay: the rounds move by themselves
    page.wait_for_function("() => window.tapsLecture.state.playing && window.tapsLecture.state.round >= 3",
                           timeout=10_000)
    press_key(page, " ")                             # and stop
    stopped = page.evaluate("() => window.tapsLecture.state")
    assert not stopped["playing"]
    check(stopped["round"])
    page.wait_for_timeout(2500)
    assert page.evaluate("() => window.tapsLecture.state")["round"] == stopped["round"]

    press_key(page, "?")
    assert page.locator("#keys-overlay").is_visible()
    assert "Home / End" in page.locator("#keys-overlay").inner_text()
    press_key(page, "Escape")
    assert not page.locator("#keys-overlay").is_visible()
    text = page.locator("body").inner_text()
    for words in ("taps-code-10m", "exported 2026-12-05 09:30 UTC", "measured in the original run"):
        assert words in text, words
    assert attempted == []
    page.context.close()


@pytest.mark.skipif(not (SHIPPED / "pair.json").exists(), reason="the shipped pair is not in assets/models")
def test_the_address_opens_a_round_and_follows_when_edited(browser, shipped_lecture):  # noqa: F811
    path, expected, rounds, _ = shipped_lecture
    last = len(rounds)
    page, attempted = offline_page(browser, path, "#round=3&view=pool")
    seen = shown(page, 3, "pool")
    assert seen["cells"] == expected[3] and seen["state"]["notice"] == ""

    def go(fragment: str, number: int, note: str = "") -> None:
        page.evaluate("hash => { location.hash = hash; }", fragment)
        seen = shown(page, number)
        assert seen["round"] == number and seen["state"] == dict(seen["state"], view="tree", playing=False)
        assert seen["cells"] == expected[number]
        assert seen["state"]["notice"] == note and page.locator("#notice").inner_text() == note
        assert page.evaluate("() => location.hash") == f"#round={number}&view=tree"

    go("#round=2&view=tree", 2)
    press_key(page, " ")                             # autoplay, then the address edited: it moves there and stops
    go(f"#round={last + 40}&view=tree", last,
       f"The address asks for round {last + 40}, but this file holds rounds 1 to {last}: showing round {last}.")
    go("#round=0&view=tree", 1, f"The address asks for round 0, but this file holds rounds 1 to {last}: showing "
                                "round 1.")
    go("#round=4&view=tree", 4)
    assert attempted == []
    page.context.close()


def press_key(page, key: str) -> None:
    page.keyboard.press(key)
    page.wait_for_timeout(50)


LIVE_COUNTERS = """() => Object.fromEntries([...document.querySelectorAll('[data-testid="stMetric"]')].map(m => [
  m.querySelector('[data-testid="stMetricLabel"]').innerText.trim(),
  [m.querySelector('[data-testid="stMetricValue"]').innerText.trim(),
   (m.querySelector('[data-testid="stMetricDelta"]') || {innerText: ''}).innerText.trim()]]))"""


def live_cells(page) -> dict:
    """The live page's counters by the file's keys (the measured speed-up left out: each process
    measures its own clock)."""
    metrics = page.evaluate(LIVE_COUNTERS)
    by_key = {"tokens": "Tokens", "tau": "τ this round", "tau_mean": "τ mean", "verified": "Verified this round",
              "waste": "Waste this round"}
    cells = {key: tuple(metrics[label]) for key, label in by_key.items()}
    modelled = next(value for label, value in metrics.items() if label.startswith("Modelled"))
    cells["modelled"] = (modelled[0], "")
    return cells


def test_the_pages_button_exports_the_pages_numbers(server, browser, tmp_path):  # noqa: F811
    from playwright.sync_api import expect

    page = open_link(browser, server, urlencode({"prompt": LONG_RUN, "max_new_tokens": "24", "round": "4"}),
                     accept_downloads=True)
    expect(title(page)).to_contain_text("Round 4 ·")
    settled(page)
    at_four = live_cells(page)
    page.get_by_role("tab", name="Export").click()
    with page.expect_download(timeout=180_000) as download:
        page.get_by_role("button", name="Lecture as offline HTML").click()
    saved = tmp_path / "lecture.html"
    download.value.save_as(saved)
    assert download.value.suggested_filename.startswith("taps-lecture-taps-budget32-")
    unfocus(page)
    page.get_by_role("tab", name="Draft tree").click()
    settled(page)
    unfocus(page)
    press(page, "Home")
    expect(title(page)).to_contain_text("Round 1 ·")
    settled(page)
    at_one = live_cells(page)
    page.close()

    lecture, attempted = offline_page(browser, saved)
    for number, live in ((4, at_four), (1, at_one)):
        if number == 1:
            press_key(lecture, "Home")
        cells = shown(lecture, number)["cells"]
        assert {key: cells[key] for key in live} == live, (number, cells, live)
    assert attempted == []
    lecture.context.close()
