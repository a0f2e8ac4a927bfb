"""Screenshots of every page of the app at 1280x720 (a projector), for the README.

    python scripts/app_screenshots.py [--out assets/screenshots] [--pair PATH]

Starts `streamlit run app.py` on a free loopback port (the shipped pair unless --pair), drives it
with Playwright through Debian's Chromium (else $BROWSER_PATH, or a Chromium or Chrome on PATH
or where macOS and Windows install them: `taps.studio.export.chromium_path`), and writes one PNG
per view. It measures nothing: the runs use the shipped reference profile when this machine has
none of its own.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SIZE = {"width": 1280, "height": 720}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(pair: str | None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")
    if pair:
        env["TAPS_PAIR"] = pair
    process = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.headless",
                                "true", "--server.port", str(port), "--server.address", "127.0.0.1",
                                "--server.fileWatcherType", "none"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(180):
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                return process, url
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit("streamlit did not start")


def scroll_to(page, locator) -> None:
    locator.first.scroll_into_view_if_needed()
    locator.first.evaluate("el => el.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(800)


def settled(page) -> None:
    """Wait until no script run is in progress (Streamlit's own state on its app element, as the
    browser tests read it: the header's running indicator is hidden in presenter mode)."""
    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for()


def shoot(url: str, out: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    from taps import load_pair
    from taps.studio.challenges import card, check
    from taps.studio.export import chromium_path

    chromium = chromium_path()
    if chromium is None:
        raise SystemExit("no Chromium or Chrome found: install one (Debian: apt-get install chromium) or set "
                         "BROWSER_PATH to it")
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=SIZE)
        page.set_default_timeout(240_000)
        expect.set_options(timeout=240_000)

        page.goto(url)
        page.get_by_text("The loaded model pair").wait_for()
        page.wait_for_timeout(1500)
        page.screenshot(path=str(out / "home.png"))

        # Step through through its replay link: the run, round and view come from the address
        page.goto(f"{url}/Step_through?example=fib&round=4&view=tree")
        page.get_by_role("button", name="Step", exact=True).wait_for()
        settled(page)
        page.wait_for_timeout(2000)
        scroll_to(page, page.locator('[data-testid="stPlotlyChart"]'))
        page.screenshot(path=str(out / "step-through.png"))
        page.goto(f"{url}/Step_through?example=fib&round=4&view=tree&presenter=1")
        page.locator('[data-testid="stPlotlyChart"]').first.wait_for()
        settled(page)
        page.wait_for_timeout(2500)
        page.screenshot(path=str(out / "step-through-presenter.png"))
        page.goto(f"{url}/Step_through?example=fib&round=4&view=select&presenter=1")
        page.locator('[data-testid="stPlotlyChart"]').first.wait_for()
        settled(page)
        page.wait_for_timeout(2500)
        page.screenshot(path=str(out / "stage-by-stage.png"))
        page.goto(f"{url}/Step_through?example=fib&round=4&view=compare&presenter=1")
        page.locator('[data-testid="stPlotlyChart"]').first.wait_for()
        settled(page)
        page.wait_for_timeout(2500)
        page.screenshot(path=str(out / "marginal-vs-path.png"))
        page.goto(f"{url}/Step_through?example=fib&round=20&view=tree&presenter=1")     # the run's last round
        page.locator('[data-testid="stPlotlyChart"]').first.wait_for()
        settled(page)
        page.wait_for_timeout(2500)
        page.screenshot(path=str(out / "last-round-presenter.png"))
        item = card("taps-below-ddtree")                 # a challenge card's link lands on its answer
        params = check(item, load_pair(None)).params      # where its claim holds on this machine
        page.goto(f"{url}/{item.page}?{urlencode(params)}")
        page.locator('[data-testid="stPlotlyChart"]').first.wait_for()
        settled(page)
        page.wait_for_timeout(2500)
        page.screenshot(path=str(out / "card-landing.png"))
        # the candidates, with TAPS over DFlash2's candidates (the selector card's round)
        page.goto(f"{url}/Step_through?example=search&round=5&view=candidates&presenter=1&selector=taps"
                  "&estimator=selector&taps_mode=reach&budget=16")
        page.locator('[data-testid="stPlotlyChart"]').first.wait_for()
        settled(page)
        page.wait_for_timeout(2500)
        page.screenshot(path=str(out / "candidates.png"))

        # what-if hardware: the sidebar's roofline estimate (H200, a Qwen3-8B-shaped target)
        page.goto(f"{url}/Step_through?example=fib&round=4&view=tree")
        page.get_by_role("button", name="Step", exact=True).wait_for()
        settled(page)
        page.get_by_text("roofline estimate (what-if hardware)").click()
        page.get_by_text("Roofline estimate", exact=False).first.wait_for()
        settled(page)
        page.wait_for_timeout(2000)
        page.get_by_text("Roofline estimate", exact=False).first.scroll_into_view_if_needed()
        page.screenshot(path=str(out / "roofline-what-if.png"))

        # the race: four lanes on the modelled clock, played to the end
        page.goto(f"{url}/Race_and_sweep?example=fib&budget=32&presenter=1")
        race = page.get_by_role("button", name="Race", exact=True)
        race.wait_for()
        settled(page)
        race.click()
        page.get_by_text(re.compile(r"clock [0-9.]+ ms of")).wait_for(timeout=180_000)   # the lanes are decoded
        settled(page)
        page.get_by_role("button", name="End").click()
        page.wait_for_timeout(3000)
        settled(page)
        page.screenshot(path=str(out / "race-and-sweep.png"))

        page.goto(f"{url}/Failure_cases")
        limit = page.locator('input[aria-label="Prompts at most"]')
        limit.fill("3")
        limit.press("Enter")
        page.wait_for_timeout(1500)
        settled(page)
        page.get_by_role("button", name="Find failures").click()
        page.get_by_text("Checked").first.wait_for()
        page.wait_for_timeout(2500)
        scroll_to(page, page.get_by_text("Checked"))
        page.screenshot(path=str(out / "failure-cases.png"))

        page.goto(f"{url}/Learn")
        page.get_by_text("Expected tokens/round, TAPS").wait_for()
        page.wait_for_timeout(2000)
        page.screenshot(path=str(out / "learn.png"))
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "assets" / "screenshots")
    parser.add_argument("--pair", default=None, help="a pair folder (default: the shipped pair)")
    args = parser.parse_args()
    process, url = start(args.pair)
    try:
        shoot(url, args.out)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
    print(f"screenshots in {args.out}")


if __name__ == "__main__":
    main()
