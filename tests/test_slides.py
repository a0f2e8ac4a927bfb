"""Slides: an animated GIF of a round's six stages (one frame per stage) and of a run's first rounds
(one frame per round), 1920x1080 PNGs, all through the time-limited export; HTML exports titled."""

from __future__ import annotations

import io
import time

import pytest
from conftest import needs_png_export

pytest.importorskip("PIL", reason="the app's packages are not installed (a bare GPU server)")
pytest.importorskip("plotly", reason="the app's packages are not installed (a bare GPU server)")

from PIL import Image  # noqa: E402

from taps import DecodeSession  # noqa: E402
from taps.config import DecodeConfig  # noqa: E402
from taps.eval.prompts import example_by_id  # noqa: E402
from taps.profiles import shipped_reference  # noqa: E402
from taps.record import STAGES  # noqa: E402
from taps.studio import export  # noqa: E402
from taps.studio.figures import round_tree_figure  # noqa: E402

LIMIT_S = 120.0


@pytest.fixture(scope="module")
def shipped_run(shipped_pair):
    """Three rounds of the `fib` example on the shipped pair at the default settings."""
    pair = shipped_pair
    _, profile, why = shipped_reference(pair)
    assert profile is not None, why
    prompt = example_by_id("fib")["prompt"]
    config = DecodeConfig()
    session = DecodeSession(pair, prompt, config, profile=profile)
    return prompt, config.as_dict(), [session.step() for _ in range(3)]


def frames(gif: bytes) -> list[Image.Image]:
    image = Image.open(io.BytesIO(gif))
    assert image.format == "GIF" and image.info.get("loop") == 0
    out = []
    for n in range(image.n_frames):
        image.seek(n)
        out.append(image.convert("RGB"))
    return out


@needs_png_export
def test_a_rounds_stages_make_a_gif_one_frame_per_stage(shipped_run):
    prompt, config, rounds = shipped_run
    started = time.monotonic()
    gif = export.stages_gif(rounds[0], prompt, config, frame_s=1.5, timeout_s=LIMIT_S)
    assert time.monotonic() - started < LIMIT_S + 10
    shown = frames(gif)
    assert len(shown) == len(STAGES) == 6
    assert all(frame.size == (1280, 720) for frame in shown)
    assert len({frame.tobytes() for frame in shown}) == 6           # six different pictures, none merged
    image = Image.open(io.BytesIO(gif))
    assert image.info["duration"] == 1500


@pytest.mark.slow          # a render of its own (the default suite keeps the stages GIF)
@needs_png_export
def test_a_runs_rounds_make_a_gif_and_a_slide_is_1920_by_1080(shipped_run):
    prompt, config, rounds = shipped_run
    assert len(frames(export.rounds_gif(rounds, count=2, prompt=prompt, config=config))) == 2
    slide = Image.open(io.BytesIO(export.slide_png(round_tree_figure(rounds[0], plot=export.slide_plot()))))
    assert slide.format == "PNG" and slide.size == export.SLIDE_PX == (1920, 1080)


def test_slide_inputs_are_checked(shipped_run):
    _, _, rounds = shipped_run
    with pytest.raises(ValueError, match="no rounds yet"):
        export.rounds_gif([])
    with pytest.raises(ValueError, match="1 to 60 rounds, got 0"):
        export.rounds_gif(rounds, count=0)
    with pytest.raises(ValueError, match="from 0.2 to 10 seconds"):
        export.gif_from_figures([round_tree_figure(rounds[0])], frame_s=0)
    with pytest.raises(ValueError, match="at least one figure"):
        export.gif_from_figures([])
    assert [fig.layout.title.text.split("</b>")[0] for fig in export.stage_figures(rounds[0])][::5] == [
        "<b>Round 1 · 1 of 6: Draft", "<b>Round 1 · 6 of 6: Commit"]


def test_html_export_has_a_real_title(shipped_run):
    prompt, _, rounds = shipped_run
    fig = export.export_title(round_tree_figure(rounds[0]), prompt, rounds[0])
    page = export.figure_html(fig)
    title = page[page.index("<title>") + 7: page.index("</title>")]
    assert title.startswith("Round 1 · selector taps · estimator online") and "<b>" not in title
    assert "prompt “def␣fibonacci(n):" in title
    assert "<title>A &lt;b&gt; slide</title>" in export.figure_html(fig, title="A <b> slide")
    import plotly.graph_objects as go

    assert "<title>TAPS Studio figure</title>" in export.figure_html(go.Figure())


@pytest.mark.slow          # a render of its own (the default suite keeps the stages GIF)
@needs_png_export
def test_a_rounds_stages_make_an_mp4_of_six_stills(shipped_run):
    import subprocess

    encoder = export.mp4_encoder()
    assert encoder, "imageio-ffmpeg is pinned in requirements.txt: its ffmpeg should be here"
    prompt, config, rounds = shipped_run
    video = export.stages_mp4(rounds[0], prompt, config, frame_s=1.0, timeout_s=LIMIT_S)
    assert video[4:8] == b"ftyp"
    probe = subprocess.run([encoder, "-i", "-", "-f", "null", "-"], input=video, capture_output=True)
    stats = probe.stderr.decode()
    assert "Video: h264" in stats and "1280x720" in stats
    duration = stats.split("Duration: ")[1].split(",")[0]               # six stills, one second each
    hours, minutes, seconds = duration.split(":")
    assert 5.5 <= float(seconds) + 60 * int(minutes) <= 6.5, duration


def test_mp4_without_the_encoder_says_what_to_install(shipped_run, monkeypatch):
    monkeypatch.setattr(export, "mp4_encoder", lambda: None)
    with pytest.raises(export.ExportError, match="pip install imageio-ffmpeg"):
        export.mp4_from_figures([round_tree_figure(shipped_run[2][0])])
