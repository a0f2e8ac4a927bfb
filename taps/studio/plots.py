"""The bench's and the latency profile's plots as files (`python -m taps.bench`, `python -m
taps.profile`): drawn in the app's style (`taps.studio.figures.charts`: a policy has the same colour,
symbol and pattern in a bench PNG as in the app) and written through the time-limited export
(`taps.studio.export.save_images`): HTML instead of a PNG when kaleido or its browser is missing. A
plot never fails a sweep. The numbers come from `taps.eval` (its rows, summary and profiles); the
commands (`taps/bench.py`, `taps/profile.py`) hand them here.
"""

from __future__ import annotations

from pathlib import Path

from ..eval.bench_report import is_baseline, plot_series, reliability_series
from .export import save_image, save_images
from .figures.charts import batch_figure, budget_figure, reliability_figure, verify_latency_figure


def write_bench_plots(summary: list[dict], out: Path, title: str) -> list[Path]:
    """tau and tokens/s against budget (log scale), AR as a dashed line, and the reliability diagram
    when the runs recorded it, into `out` (both in one render). Returns the files written."""
    series = plot_series(summary)
    ar = next((r for r in summary if is_baseline(r["selector"])), None)
    plots = (("tau", "tau (tokens per round)", "tau_vs_budget"), ("tokens_per_s", "tokens/s", "tokens_per_s_vs_budget"))
    figs = [budget_figure(series, metric, label, title, baseline=None if ar is None else ar[metric])
            for metric, label, _ in plots]
    names = [name for _, _, name in plots]
    reliability = reliability_series(summary)
    if reliability:
        figs.append(reliability_figure(reliability, title))
        names.append("reliability")
    return save_images(figs, [out / f"{name}.png" for name in names], width=900, height=520, scale=2)


def write_profile_plot(profile, path: Path) -> Path:
    """verify ms against tree size (`verify_latency_figure`) at `path` (or HTML beside it)."""
    return save_image(verify_latency_figure(profile), path, width=900, height=520, scale=2)


def write_batch_plots(figures: dict[str, dict], out: Path) -> list[Path]:
    """`python -m taps.bench --batch ... --plot`: per file stem, `batch_figure`'s arguments (series, policies,
    title, dashed) drawn into `out` (one render). Returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    figs = [batch_figure(**spec) for spec in figures.values()]
    return save_images(figs, [out / f"{stem}.png" for stem in figures], width=900, height=520, scale=2)
