"""Figure files that never hang the app or a bench: kaleido renders PNG and SVG with a headless
Chromium in a child process of its own session, and a render that overruns its time limit is
stopped, the whole process group with it (no browser is left behind), with a message saying what
to do. Every image the app offers and every plot `python -m taps.bench` / `taps.profile` writes
goes through here; standalone HTML needs no browser.

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


def figure_png(fig, width: int = 1600, scale: float = 1.0, timeout_s: float = 60.0) -> bytes:
    """A PNG of the figure, as wide as `width` and as tall as its layout says: ExportError with the
    reason when kaleido fails or overruns `timeout_s`."""
    return render_image(fig, "png", width=width, height=int(fig.layout.height or 700), scale=scale,
                        timeout_s=timeout_s)


def figure_svg(fig, width: int = 1600, timeout_s: float = 60.0) -> bytes:
    return render_image(fig, "svg", width=width, height=int(fig.layout.height or 700), timeout_s=timeout_s)


def figure_html(fig) -> str:
    """A standalone HTML page holding the interactive figure (plotly.js inlined: works offline)."""
    return fig.to_html(include_plotlyjs=True, full_html=True)


def export_title(fig, prompt: str, record=None, what: str = ""):
    """A copy of `fig` whose title names what a file needs to stand alone: the prompt, and the
    round's selector, estimator, budget and number (or `what` for figures of many runs)."""
    import plotly.graph_objects as go

    from .figures.style import escape
    from .lesson import prompt_excerpt

    copy = go.Figure(fig)
    if record is not None:
        what = (f"Round {record.number} · selector {record.selector} · estimator {record.estimator} · "
                f"budget {record.budget}")
    copy.update_layout(title_text=f"<b>{escape(what)}</b> · prompt “{escape(prompt_excerpt(prompt, 60))}”")
    return copy


def save_image(fig, path: Path, width: int = 900, height: int = 520, scale: float = 2.0,
               timeout_s: float = 120.0) -> Path:
    """Write the figure to `path` (.png or .svg) within `timeout_s`; when it cannot be rendered (no
    kaleido or Chromium, a render that overran), say why on stderr and write the figure as HTML
    beside it instead (plotly.js from its CDN): a plot never fails a bench. Returns the path written."""
    path = Path(path)
    try:
        path.write_bytes(render_image(fig, path.suffix.lstrip(".").lower(), width=width, height=height, scale=scale,
                                      timeout_s=timeout_s))
        return path
    except ExportError as exc:
        html_path = path.with_suffix(".html")
        print(f"warning: {path.name} not written ({exc}); writing {html_path.name} instead", file=sys.stderr)
        fig.write_html(html_path, include_plotlyjs="cdn")
        return html_path


def main(argv: list[str] | None = None) -> int:
    fmt, width, height, scale = (argv or sys.argv[1:])[:4]
    import plotly.io as pio

    fig = pio.from_json(sys.stdin.read(), skip_invalid=True)
    sys.stdout.buffer.write(fig.to_image(format=fmt, width=int(width), height=int(height), scale=float(scale)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
