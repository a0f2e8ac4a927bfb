"""Figure images (PNG, SVG) that never hang the app: kaleido renders them with a headless Chromium
in a child process of its own session, and a render that overruns its time limit is stopped, the
whole process group with it (no browser is left behind), with a message saying what to do.

    python -m taps.studio.export png WIDTH HEIGHT SCALE < figure.json > figure.png   (what the child runs)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from ..paths import ROOT

FORMATS = ("png", "svg")


class ExportError(RuntimeError):
    """An export that failed or ran out of time; the message says which and what to do."""


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    if not env.get("BROWSER_PATH") and Path("/usr/bin/chromium").exists():
        env["BROWSER_PATH"] = "/usr/bin/chromium"         # Debian's Chromium, for kaleido
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _stop(process: subprocess.Popen) -> None:
    """Stop the child's whole process group (the child and the browser it started)."""
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            if sig == signal.SIGKILL:
                return
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(process.pid, signal.SIGKILL)     # anything of the group still alive
    except ProcessLookupError:
        pass


def render_image(fig, fmt: str, width: int, height: int, scale: float = 1.0, timeout_s: float = 60.0) -> bytes:
    """The figure as PNG or SVG bytes, or ExportError within about `timeout_s` seconds."""
    if fmt not in FORMATS:
        raise ValueError(f"export format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    spec = fig.to_json() if hasattr(fig, "to_json") else str(fig)
    process = subprocess.Popen([sys.executable, "-m", "taps.studio.export", fmt, str(int(width)), str(int(height)),
                                str(float(scale))], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=_environment(), cwd=ROOT, start_new_session=True)
    try:
        image, errors = process.communicate(spec.encode("utf-8"), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop(process)
        process.communicate()
        raise ExportError(f"the {fmt.upper()} export did not finish within {timeout_s:.0f} s and was stopped (its "
                          "browser too). The machine may be busy: try again, or export HTML, which needs no "
                          "browser.") from None
    finally:
        if process.poll() is None:
            _stop(process)
        else:
            try:                                     # the browser may outlive a child that exited
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    if process.returncode != 0 or not image:
        reason = errors.decode("utf-8", "replace").strip().splitlines()
        raise ExportError(f"the {fmt.upper()} export failed: {reason[-1] if reason else 'no image came back'}")
    return image


def main(argv: list[str] | None = None) -> int:
    fmt, width, height, scale = (argv or sys.argv[1:])[:4]
    import plotly.io as pio

    fig = pio.from_json(sys.stdin.read(), skip_invalid=True)
    sys.stdout.buffer.write(fig.to_image(format=fmt, width=int(width), height=int(height), scale=float(scale)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
