"""What opening a page costs when a class's browsers share the server's two cores: N pages opening
at once, on a bare Streamlit app (one title, one button: Streamlit's own floor) and on TAPS
Studio's Step page served to a class at round 1 of a link (its first tree), in one Chromium with N
contexts at 1280x720. Prints, per app, when each page showed its button (and, for TAPS Studio, its
first tree), and the browsers' and the server's CPU seconds over the opening. The first page of each
app is opened alone first (a warm server: the engine imported, the link's round decoded), then the
N together. Made the paragraph "Opening a link" in docs/serving.md.

    python docs/lab/open_floor.py --pages 8
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import classroom_load as cl  # noqa: E402  (the load script's server, browser and CPU readers)

BARE_APP = 'import streamlit as st\n\nst.title("Step through the rounds")\nst.button("Step")\n'
LINK = "Step_through?example=merge&estimator=learned&budget=16&round=1"


def open_together(browser, url: str, count: int, tree: bool, pids: list[int]) -> dict:
    """N pages opening `url` at once; when each showed its Step button (and its tree); CPU used."""
    server0, browsers0 = sum(cl.cpu_seconds(p) for p in pids), cl.browser_cpu_seconds()
    start, pages = time.time(), []
    for _ in range(count):
        page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
        page.set_default_timeout(300_000)
        page.goto(url, wait_until="commit")
        pages.append(page)
    buttons, trees = [], []
    for page in pages:
        page.get_by_role("button", name="Step", exact=True).wait_for()
        buttons.append(time.time() - start)
    for page in pages if tree else []:
        page.locator(".gtitle", has_text="Round 1 ·").first.wait_for()
        trees.append(time.time() - start)
    out = {"button_s": buttons, "tree_s": trees, "server_cpu_s": sum(cl.cpu_seconds(p) for p in pids) - server0,
           "browser_cpu_s": cl.browser_cpu_seconds() - browsers0}
    for page in pages:
        page.context.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=8)
    parser.add_argument("--extra", default="", help="more link parameters for the Step page (e.g. presenter=1)")
    parser.add_argument("--only-step", action="store_true", help="skip the bare app")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    folder = Path(tempfile.mkdtemp(prefix="taps-open-floor-"))
    secrets = folder / "secrets.toml"
    secrets.write_text('lecturer_password = "open-floor"\n')
    bare = folder / "bare_app.py"
    bare.write_text(BARE_APP)
    with sync_playwright() as play:
        browser = play.chromium.launch(executable_path=cl.CHROMIUM, args=cl.CHROMIUM_ARGS)
        apps = (("bare Streamlit app", bare, "", False),
                ("TAPS Studio, Step page at round 1", None, LINK + (f"&{args.extra}" if args.extra else ""), True))
        for name, script, path, tree in apps[args.only_step:]:
            server = cl.app_server("", folder / f"cache-{tree}", folder / f"server-{tree}.log", secrets, script)
            with server as (url, process):
                open_together(browser, f"{url}/{path}", 1, tree, [process.pid])        # warm the server
                found = open_together(browser, f"{url}/{path}", args.pages, tree, [process.pid])
            shown = ", ".join(f"{t:.1f}" for t in (found["tree_s"] or found["button_s"]))
            print(f"{name}: {args.pages} pages at once; {'first tree' if tree else 'button'} after {shown} s; "
                  f"browsers' CPU {found['browser_cpu_s']:.1f} s ({found['browser_cpu_s'] / args.pages:.2f} s a page), "
                  f"server's {found['server_cpu_s']:.1f} s")
        browser.close()


if __name__ == "__main__":
    main()
