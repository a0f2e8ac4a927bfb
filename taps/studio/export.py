"""Figure files that never hang the app or a bench: kaleido renders PNG and SVG with a headless
Chromium in a child process of its own session, and a render that overruns its time limit is
stopped, the whole process group with it (no browser is left behind), with a message saying what
to do. Every image the app offers and every plot `python -m taps.bench` / `taps.profile` writes
goes through here; standalone HTML needs no browser.

Slides go through the same render: `slide_png` (1920x1080, a 1280x720 layout drawn at 1.5x, so
type reads from the back of a room), and animated GIFs (Pillow) of a round's six stages
(`stages_gif`) or of a run's first rounds (`rounds_gif`), one frame per stage or round, and the
same as MP4 (`stages_mp4`, `mp4_from_figures`) through the ffmpeg the `imageio-ffmpeg` wheel ships.

The browser: $BROWSER_PATH, else Debian's /usr/bin/chromium, else whatever kaleido finds itself
(Chrome, Chromium or Edge where each OS installs them, or one `plotly_get_chrome` downloaded). With
none, PNG, SVG, GIF and MP4 exports fail with a message saying so; HTML, JSON and CSV need none.

    python -m taps.studio.export png WIDTH HEIGHT SCALE OUT.png ... < figures.json   (what the child runs)
"""

from __future__ import annotations

import html
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from ..paths import ROOT

FORMATS = ("png", "svg")
SLIDE_PX = (1920, 1080)          # a slide's pixels
SLIDE_SCALE = 1.5                # drawn as a 1280x720 layout at 1.5x: the app's type, half as big again
FRAME_S = (0.2, 10.0)            # seconds a GIF frame may show
MAX_FRAMES = 60                  # rounds a GIF of a run holds at most
DEBIAN_CHROMIUM = "/usr/bin/chromium"      # CI's and the browser tests' browser: the first choice wherever it exists
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
MAC_BROWSERS = ("/Applications/Chromium.app/Contents/MacOS/Chromium",
                "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome")
NO_BROWSER_EXIT = 3              # the child's exit status when kaleido finds no browser
NO_BROWSER = ("needs Chrome or Chromium (kaleido draws the image in one) and found none: install Google Chrome or "
              "Chromium (Debian: apt-get install chromium), or run `plotly_get_chrome`, or set BROWSER_PATH to "
              "one. HTML export needs no browser.")


class ExportError(RuntimeError):
    """An export that failed or ran out of time; the message says which and what to do."""


def chromium_path() -> str | None:
    """A Chromium or Chrome for Playwright (scripts/app_screenshots.py, scripts/classroom_load.py):
    $BROWSER_PATH, else Debian's /usr/bin/chromium, else one on PATH, else macOS's and Windows's
    usual installs; None when there is none."""
    if os.environ.get("BROWSER_PATH"):
        return os.environ["BROWSER_PATH"]
    if Path(DEBIAN_CHROMIUM).exists():
        return DEBIAN_CHROMIUM
    found = next((path for path in map(shutil.which, BROWSER_NAMES) if path), None)
    windows = [Path(os.environ[root]) / app / "Application" / "chrome.exe"
               for root in ("PROGRAMFILES", "PROGRAMFILES(X86)", "LOCALAPPDATA") if os.environ.get(root)
               for app in ("Google/Chrome", "Chromium")]
    return found or next((str(p) for p in [*map(Path, MAC_BROWSERS), *windows] if p.is_file()), None)


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    if not env.get("BROWSER_PATH") and Path(DEBIAN_CHROMIUM).exists():
        env["BROWSER_PATH"] = DEBIAN_CHROMIUM             # Debian's Chromium; elsewhere kaleido looks itself
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _stop(process: subprocess.Popen) -> None:
    """Stop the child's whole process group (the child and the browser it started); on Windows,
    which has neither process groups to signal nor SIGKILL, the child's process tree."""
    if os.name == "nt":
        subprocess.run(["taskkill", "/F", "/T", "/PID", str(process.pid)], capture_output=True)
        try:
            process.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            process.kill()
        return
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


def render_images(figs: list, fmt: str, width: int, height: int, scale: float = 1.0,
                  timeout_s: float = 60.0) -> list[bytes]:
    """The figures as PNG or SVG bytes, all drawn by one child and its one browser (a bench's two
    plots start Chromium once), or ExportError within about `timeout_s` seconds."""
    if fmt not in FORMATS:
        raise ValueError(f"export format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    specs = json.dumps([fig.to_json() if hasattr(fig, "to_json") else str(fig) for fig in figs])
    with tempfile.TemporaryDirectory(prefix="taps-export-") as folder:
        files = [Path(folder) / f"{i}.{fmt}" for i in range(len(figs))]
        process = subprocess.Popen([sys.executable, "-m", "taps.studio.export", fmt, str(int(width)), str(int(height)),
                                    str(float(scale)), *map(str, files)], stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_environment(), cwd=ROOT,
                                   start_new_session=True)
        try:
            _, errors = process.communicate(specs.encode("utf-8"), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(process)
            process.communicate()
            raise ExportError(f"the {fmt.upper()} export did not finish within {timeout_s:.0f} s and was stopped "
                              "(its browser too). The machine may be busy: try again, or export HTML, which needs "
                              "no browser.") from None
        finally:
            if process.poll() is None:
                _stop(process)
            elif os.name != "nt":
                try:                                     # the browser may outlive a child that exited
                    os.killpg(process.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        images = [f.read_bytes() if f.exists() else b"" for f in files]
    if process.returncode == NO_BROWSER_EXIT:
        raise ExportError(f"the {fmt.upper()} export {NO_BROWSER}")
    if process.returncode != 0 or not all(images):
        reason = errors.decode("utf-8", "replace").strip().splitlines()
        raise ExportError(f"the {fmt.upper()} export failed: {reason[-1] if reason else 'no image came back'}")
    return images


def render_image(fig, fmt: str, width: int, height: int, scale: float = 1.0, timeout_s: float = 60.0) -> bytes:
    """The figure as PNG or SVG bytes, or ExportError within about `timeout_s` seconds."""
    return render_images([fig], fmt, width, height, scale, timeout_s)[0]


def figure_png(fig, width: int = 1600, scale: float = 1.0, timeout_s: float = 60.0) -> bytes:
    """A PNG of the figure, as wide as `width` and as tall as its layout says: ExportError with the
    reason when kaleido fails or overruns `timeout_s`."""
    return render_image(fig, "png", width=width, height=int(fig.layout.height or 700), scale=scale,
                        timeout_s=timeout_s)


def figure_svg(fig, width: int = 1600, timeout_s: float = 60.0) -> bytes:
    return render_image(fig, "svg", width=width, height=int(fig.layout.height or 700), timeout_s=timeout_s)


def title_text(fig) -> str:
    """The figure's title as plain text (markup and line breaks dropped), "" when it has none."""
    text = fig.layout.title.text or ""
    text = re.sub(r"<br\s*/?>", " · ", text, flags=re.IGNORECASE)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", text)).split())


def figure_html(fig, title: str | None = None) -> str:
    """A standalone HTML page holding the interactive figure (plotly.js inlined: works offline),
    whose <title> is `title`, else the figure's own title, else "TAPS Studio figure"."""
    page = fig.to_html(include_plotlyjs=True, full_html=True)
    name = html.escape(title or title_text(fig) or "TAPS Studio figure", quote=False)
    head = re.search(r"<head[^>]*>", page)
    if head is None:                                   # plotly always writes one; never leave the page untitled
        return f"<title>{name}</title>\n{page}"
    return f"{page[:head.end()]}<title>{name}</title>{page[head.end():]}"


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


def save_images(figs: list, paths: list[Path], width: int = 900, height: int = 520, scale: float = 2.0,
                timeout_s: float = 120.0) -> list[Path]:
    """Write each figure to its path (.png or .svg, one format for all) in one render within
    `timeout_s`; when they cannot be rendered (no kaleido or Chromium, a render that overran), say
    why on stderr and write each figure as HTML beside its path instead (plotly.js from its CDN): a
    plot never fails a bench. Returns the paths written."""
    paths = [Path(p) for p in paths]
    try:
        images = render_images(figs, paths[0].suffix.lstrip(".").lower(), width=width, height=height, scale=scale,
                               timeout_s=timeout_s)
    except ExportError as exc:
        written = []
        for fig, path in zip(figs, paths):
            html_path = path.with_suffix(".html")
            print(f"warning: {path.name} not written ({exc}); writing {html_path.name} instead", file=sys.stderr)
            fig.write_html(html_path, include_plotlyjs="cdn")
            written.append(html_path)
        return written
    for path, image in zip(paths, images):
        path.write_bytes(image)
    return paths


def save_image(fig, path: Path, width: int = 900, height: int = 520, scale: float = 2.0,
               timeout_s: float = 120.0) -> Path:
    """`save_images` for one figure."""
    return save_images([fig], [path], width, height, scale, timeout_s)[0]


# ---------------------------------------------------------------------------- slides
def slide_png(fig, timeout_s: float = 60.0) -> bytes:
    """A 1920x1080 PNG of the figure for a slide: laid out at 1280x720 and drawn at 1.5x, so its
    type is half as big again as on the page. ExportError as `render_image`."""
    width, height = (round(px / SLIDE_SCALE) for px in SLIDE_PX)
    return render_image(fig, "png", width, height, SLIDE_SCALE, timeout_s)


def slide_plot():
    """The plot size figures for slides and GIFs are laid out at (1280x720)."""
    from .layout import Plot

    width, height = (round(px / SLIDE_SCALE) for px in SLIDE_PX)
    return Plot(width=width, height=height)


def gif_from_figures(figs: list, width: int = 1280, height: int = 720, frame_s: float = 2.0, scale: float = 1.0,
                     timeout_s: float = 120.0) -> bytes:
    """An animated GIF, one frame per figure, each shown `frame_s` seconds, looping; the figures
    are drawn by one time-limited render (ExportError when it fails or overruns)."""
    from PIL import Image

    if not figs:
        raise ValueError("a GIF needs at least one figure")
    if not FRAME_S[0] <= frame_s <= FRAME_S[1]:
        raise ValueError(f"a frame shows from {FRAME_S[0]:g} to {FRAME_S[1]:g} seconds, got {frame_s!r}")
    images = render_images(figs, "png", width, height, scale, timeout_s)
    frames = [Image.open(io.BytesIO(image)).convert("RGB").quantize(colors=255, dither=Image.Dither.NONE)
              for image in images]
    out = io.BytesIO()
    # every frame kept whole (no merging of frames that look alike), so the count is the figures'
    frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:], duration=int(frame_s * 1000),
                   loop=0, disposal=1, optimize=False)
    return out.getvalue()


def mp4_encoder() -> str | None:
    """The ffmpeg that `imageio-ffmpeg` ships (a PyPI wheel, no system ffmpeg), or None without it."""
    try:
        import imageio_ffmpeg
    except ImportError:
        return None
    try:
        return imageio_ffmpeg.get_ffmpeg_exe()
    except RuntimeError:
        return None


def mp4_from_figures(figs: list, width: int = 1280, height: int = 720, frame_s: float = 2.0,
                     timeout_s: float = 120.0) -> bytes:
    """An H.264 MP4, one still per figure shown `frame_s` seconds, by the ffmpeg of `imageio-ffmpeg`;
    ExportError when that is not installed, or the render or the encoder fails or overruns."""
    if not figs:
        raise ValueError("a video needs at least one figure")
    if not FRAME_S[0] <= frame_s <= FRAME_S[1]:
        raise ValueError(f"a frame shows from {FRAME_S[0]:g} to {FRAME_S[1]:g} seconds, got {frame_s!r}")
    encoder = mp4_encoder()
    if encoder is None:
        raise ExportError("MP4 needs the imageio-ffmpeg package (pip install imageio-ffmpeg); the GIF needs "
                          "nothing more")
    images = render_images(figs, "png", width, height, 1.0, timeout_s)
    with tempfile.TemporaryDirectory(prefix="taps-mp4-") as folder:
        for n, image in enumerate(images):
            (Path(folder) / f"{n:04d}.png").write_bytes(image)
        out = Path(folder) / "slides.mp4"
        command = [encoder, "-loglevel", "error", "-y", "-framerate", f"1/{frame_s:g}", "-i",
                   str(Path(folder) / "%04d.png"), "-c:v", "libx264", "-r", "25", "-pix_fmt", "yuv420p",
                   "-movflags", "+faststart", str(out)]
        try:
            done = subprocess.run(command, capture_output=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise ExportError(f"the MP4 encoder did not finish within {timeout_s:.0f} s; export the GIF "
                              "instead") from None
        if done.returncode != 0 or not out.exists():
            reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise ExportError(f"the MP4 export failed: {reason[-1] if reason else 'no video came back'}")
        return out.read_bytes()


def stage_figures(record, prompt: str | None = None, config=None, color_by: str = "reach", plot=None) -> list:
    """The round's six stages (draft, pool, estimate, select, verify, commit), one figure each."""
    from ..record import STAGES
    from .figures.round import lesson_figure

    plot = plot or slide_plot()
    return [lesson_figure(record, stage, color_by, plot=plot, prompt=prompt, config=config) for stage in STAGES]


def stages_gif(record, prompt: str | None = None, config=None, color_by: str = "reach", frame_s: float = 2.0,
               timeout_s: float = 120.0) -> bytes:
    """An animated GIF of one round's six stages, one frame per stage, at 1280x720."""
    plot = slide_plot()
    return gif_from_figures(stage_figures(record, prompt, config, color_by, plot), plot.width, plot.height, frame_s,
                            timeout_s=timeout_s)


def stages_mp4(record, prompt: str | None = None, config=None, color_by: str = "reach", frame_s: float = 2.0,
               timeout_s: float = 120.0) -> bytes:
    """`stages_gif` as an MP4 (where `mp4_encoder()` finds an encoder)."""
    plot = slide_plot()
    return mp4_from_figures(stage_figures(record, prompt, config, color_by, plot), plot.width, plot.height, frame_s,
                            timeout_s)


def rounds_gif(rounds: list, count: int = 10, prompt: str | None = None, config=None, color_by: str = "reach",
               frame_s: float = 1.5, timeout_s: float = 180.0) -> bytes:
    """An animated GIF of a run's first `count` rounds (at most MAX_FRAMES), one frame per round's
    tree, at 1280x720."""
    from .figures.round import round_tree_figure

    if not rounds:
        raise ValueError("the run has no rounds yet: take a Step first")
    if not 1 <= count <= MAX_FRAMES:
        raise ValueError(f"a GIF of a run holds 1 to {MAX_FRAMES} rounds, got {count!r}")
    plot = slide_plot()
    figs = [round_tree_figure(record, color_by, plot=plot, prompt=prompt, config=config) for record in rounds[:count]]
    return gif_from_figures(figs, plot.width, plot.height, frame_s, timeout_s=timeout_s)


def main(argv: list[str] | None = None) -> int:
    """The child: figures (a JSON list of figure JSON) on stdin, written to the files named after
    format, width, height and scale, by one kaleido session."""
    fmt, width, height, scale, *files = argv or sys.argv[1:]
    import plotly.io as pio

    figs = [pio.from_json(spec, skip_invalid=True) for spec in json.loads(sys.stdin.read())]
    try:
        pio.write_images(figs, files, format=fmt, width=int(width), height=int(height), scale=float(scale))
    except Exception as exc:
        if not _no_browser(exc):
            raise
        print(f"the {fmt.upper()} export {NO_BROWSER}", file=sys.stderr)
        return NO_BROWSER_EXIT
    return 0


def _no_browser(exc: BaseException | None) -> bool:
    """Whether `exc` (or what it was raised from) is kaleido's "no Chrome found" (plotly re-raises it
    as a RuntimeError)."""
    while exc is not None:
        if type(exc).__name__ == "ChromeNotFoundError":
            return True
        exc = exc.__cause__ or exc.__context__
    return False


if __name__ == "__main__":
    sys.exit(main())
