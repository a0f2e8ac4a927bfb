"""The class server (scripts/serve_class.py): two app processes behind nginx with sticky sessions
start, answer pages through the proxy (the websocket too: a Step decodes and shows its round), keep
each browser on one process, read the lecturer password it was given, and stop cleanly. A class
server makes a lecturer password when none is configured and keeps one that is."""

from __future__ import annotations

import shutil
import socket
import sys
import urllib.request
from pathlib import Path

import pytest
import test_browser
from test_browser import prepare_cache, settled, shown_once

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import serve_class  # noqa: E402

browser = test_browser.browser          # the shared Chromium fixture
pytestmark = pytest.mark.browser


def free_port_pair() -> int:
    """A port whose next two are free too (the class's and its two processes')."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port + 2 < 65535 and all(serve_class.port_free(port + n) for n in (1, 2)):
            return port
    pytest.fail("no three free ports in a row")


def test_a_password_is_made_once_and_kept(tmp_path):
    path = tmp_path / "secrets.toml"
    made, new = serve_class.lecturer_password(path)
    assert new and len(made) >= 12 and oct(path.stat().st_mode)[-3:] == "600"
    again, new = serve_class.lecturer_password(path)
    assert again == made and not new
    path.write_text('pair_roots = ["/srv"]\nlecturer_password = "given"\n')
    assert serve_class.lecturer_password(path) == ("given", False)


def test_the_class_server_serves_pages_through_the_proxy_and_stops(tiny_pair_dir, tmp_path, browser):
    from playwright.sync_api import expect

    if not (shutil.which("nginx") or Path("/usr/sbin/nginx").exists()):
        pytest.skip("no nginx here (apt-get install nginx-light; CI installs it)")
    cache = prepare_cache(tiny_pair_dir, tmp_path)
    secrets = tmp_path / "secrets.toml"
    secrets.write_text('lecturer_password = "class-test-password"\n')
    port = free_port_pair()
    server = serve_class.ClassServer(2, port, "127.0.0.1", str(tiny_pair_dir), str(cache), tmp_path, secrets)
    try:
        url = server.start()
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=10) as reply:
            assert reply.read().strip() == b"ok" and "nginx" in reply.headers.get("Server", "")
        routes = set()
        for _ in range(2):
            context = browser.new_context(viewport={"width": 1280, "height": 720})
            page = context.new_page()
            page.set_default_timeout(90_000)
            page.add_init_script(test_browser.COUNT_STEP_CLICKS)
            page.goto(f"{url}/Step_through?prompt=def%20add(a%2C%20b)%3A&budget=8")
            shown_once(page, page.get_by_role("button", name="Step", exact=True))
            settled(page)              # the size report's rerun: a click during it is dropped by the browser
            expect(page.locator('[data-testid="stSidebar"]')).to_contain_text("Lecturer")   # the secret reached it
            test_browser.click_step(page)
            expect(page.locator(".gtitle", has_text="Round 1 ·").first).to_be_visible()
            # a class's tree is drawn light: SVG with a tooltip per node, no chart library on the page
            tree = page.locator('[data-testid="taps-light-tree"] svg')
            expect(tree).to_be_visible()
            assert tree.locator("title").count() >= 2 and "depth" in tree.locator("title").first.text_content()
            assert page.locator('[data-testid="stPlotlyChart"]').count() == 0
            assert page.evaluate("[...document.querySelectorAll('style')].some(s => "
                                 "s.textContent.includes('animation: none !important'))")      # and holds still
            cookies = [c["value"] for c in context.cookies() if c["name"] == "taps_replica"]
            assert len(cookies) == 1
            routes.add(cookies[0])
            page.reload()                                    # the same browser comes back to its process
            page.get_by_role("button", name="Step", exact=True).wait_for()
            assert [c["value"] for c in context.cookies() if c["name"] == "taps_replica"] == cookies
            context.close()
        assert len(routes) == 2
        logs = "".join((tmp_path / f"app-{port + n}.log").read_text() for n in (1, 2))
        assert logs.count("decoded round 1") >= 1 and "Traceback" not in logs
    finally:
        server.stop()
    assert all(process.poll() is not None for process in server.apps + [server.nginx])
    with pytest.raises(OSError):                             # nothing answers on the class's port
        urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5)
