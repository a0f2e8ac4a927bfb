"""End to end in a real browser: `streamlit run app.py` on a loopback port, driven by Playwright
through Debian's Chromium. Step a few rounds, check the tree renders and the counters move, export
the tree as a PNG, and take screenshots (also copied to $TAPS_SCREENSHOT_DIR when set)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def keep_screenshot(path: Path) -> None:
    folder = os.environ.get("TAPS_SCREENSHOT_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(folder) / path.name)


@pytest.fixture(scope="module")
def server(tiny_pair_dir, tmp_path_factory):
    port = free_port()
    folder = tmp_path_factory.mktemp("server")
    shutil.copytree(os.environ["TAPS_CACHE"], folder / "cache")     # the fixed latency profiles
    env = dict(os.environ, TAPS_PAIR=str(tiny_pair_dir), TAPS_CACHE=str(folder / "cache"), OMP_NUM_THREADS="1",
               OMP_WAIT_POLICY="PASSIVE", STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")
    log = (folder / "server.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1", "--server.fileWatcherType", "none",
         "--browser.gatherUsageStats", "false"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as reply:
                if reply.read().strip() == b"ok":
                    break
        except OSError:
            pass
        if process.poll() is not None or time.time() > deadline:
            process.kill()
            pytest.fail("streamlit did not start:\n" + (folder / "server.log").read_text()[-3000:])
        time.sleep(0.5)
    yield url
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    log.close()


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    sync_api.expect.set_options(timeout=90_000)        # a busy CI machine can take a while per rerun
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


def full_screenshot(page, path: Path, height: int) -> None:
    """A tall viewport scrolled to the top, so the whole page fits in one picture."""
    page.set_viewport_size({"width": 1600, "height": height})
    page.evaluate("for (const el of document.querySelectorAll('*')) { if (el.scrollTop) el.scrollTop = 0; }")
    page.wait_for_timeout(500)
    page.screenshot(path=str(path), full_page=True)
    keep_screenshot(path)


def test_step_through_in_a_real_browser(server, browser, tmp_path):
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1600, "height": 1000}, accept_downloads=True)
    page.set_default_timeout(90_000)
    page.goto(f"{server}/Step_through")
    step = page.get_by_role("button", name="Step", exact=True)
    step.wait_for()
    budget = page.get_by_label("Budget (nodes)")
    budget.fill("16")
    budget.press("Enter")
    expect(page.get_by_text("Press Step to run the first round.")).to_be_visible()

    step.click()
    tokens = page.locator('[data-testid="stMetric"]').filter(has_text="Tokens so far").locator(
        '[data-testid="stMetricValue"]')
    expect(tokens).to_be_visible()
    seen = [int(tokens.inner_text())]
    for _ in range(2):
        step.click()
        expect(tokens).not_to_have_text(str(seen[-1]))
        seen.append(int(tokens.inner_text()))
    assert seen[0] >= 1 and seen == sorted(seen) and len(set(seen)) == 3
    expect(page.get_by_text("Round", exact=True).first).to_be_visible()

    charts = page.locator('[data-testid="stPlotlyChart"]')
    expect(charts.first.locator("svg.main-svg").first).to_be_visible()
    tree = charts.filter(has_text="verified")
    expect(tree.locator("svg.main-svg").first).to_be_visible()
    assert tree.locator(".scatterlayer .trace").count() >= 5
    assert "accepted" in tree.first.inner_text()

    page.get_by_role("tab", name="Export").click()
    with page.expect_download(timeout=120_000) as download:
        page.get_by_role("button", name="Tree as PNG").click()
    saved = tmp_path / "tree.png"
    download.value.save_as(saved)
    assert saved.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and saved.stat().st_size > 10_000

    page.get_by_role("tab", name="Draft tree").click()
    expect(tree.locator("svg.main-svg").first).to_be_visible()
    shot = tmp_path / "step_through.png"
    full_screenshot(page, shot, 3000)
    assert shot.stat().st_size > 50_000
    page.close()


def test_learn_page_in_a_real_browser(server, browser, tmp_path):
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.set_default_timeout(90_000)
    page.goto(f"{server}/Learn")
    chart = page.locator('[data-testid="stPlotlyChart"]').first
    expect(chart.locator("svg.main-svg").first).to_be_visible()
    expect(page.get_by_text("Expected tokens/round, TAPS")).to_be_visible()
    full_screenshot(page, tmp_path / "learn.png", 2300)
    page.close()
