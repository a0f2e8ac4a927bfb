"""The Step-through page's Export tab: the round's tree as PNG, SVG or HTML, the run as JSON and its
metrics as CSV, the lecture as one offline HTML file, and slides (a 1920×1080 PNG, GIFs and an
MP4 of the round's stages or the run's first rounds), all rendered through the time-limited export."""

from __future__ import annotations

import streamlit as st

from app_pages import profiles
from taps.studio import export, figures
from taps.studio.export import ExportError
from taps.studio.lesson import prompt_excerpt
from taps.studio.speed import machine_load


def exports(screen, record, shown_prompt: str, run_config: dict) -> None:
    """The Export tab: the tree as PNG, SVG or HTML, the run as JSON, its metrics as CSV, the lecture
    as an offline HTML file, and files for slides."""
    state, ctrl, pair, model = st.session_state, screen.ctrl, screen.pair, screen.model
    stem = f"taps-round{record.number}-{record.selector}-budget{record.budget}"
    tree = figures.round_tree_figure(record, st.session_state["step_color_by"],
                                            int(st.session_state["step_pool_shown"]),
                                     figures.DEFAULT_PLOT, shown_prompt, run_config)
    figure = figures.export_title(tree, shown_prompt, record)
    st.caption(f"Files are named after the round; each figure's title carries the prompt "
               f"(“{prompt_excerpt(shown_prompt)}”), selector, estimator, budget and round.")
    cols = st.columns(5)
    for col, fmt in zip(cols[:2], ("png", "svg")):
        if col.button(f"Make {'a PNG' if fmt == 'png' else 'an SVG'}", key=f"step_make_{fmt}",
                      help=f"Render the tree as {fmt.upper()} (at most a minute)"):
            with st.spinner(f"Rendering the {fmt.upper()} (at most a minute)…"):
                try:
                    render = figures.figure_png if fmt == "png" else figures.figure_svg
                    state[f"step_{fmt}_file"] = (stem, render(figure))
                except ExportError as exc:
                    state.pop(f"step_{fmt}_file", None)
                    st.error(f"No {fmt.upper()}: {exc}")
        made = state.get(f"step_{fmt}_file")
        if made is not None and made[0] == stem:
            col.download_button(f"Download {fmt.upper()}", data=made[1], file_name=f"{stem}.{fmt}",
                                mime="image/png" if fmt == "png" else "image/svg+xml", key=f"step_dl_{fmt}",
                                on_click="ignore")
    cols[2].download_button("Tree as HTML", data=lambda: figures.figure_html(figure), file_name=f"{stem}.html",
                            mime="text/html", key="step_dl_html", on_click="ignore")
    cols[3].download_button("Run as JSON", data=ctrl.run_file(pair.name), file_name="taps-run.json",
                            mime="application/json", key="step_dl_json", on_click="ignore")
    cols[4].download_button("Metrics as CSV", data=ctrl.metrics_file(), file_name="taps-rounds.csv",
                            mime="text/csv", key="step_dl_csv", on_click="ignore")
    from taps.studio.lecture_file import controller_lecture

    short = profiles.short_profile_name()                 # read here: the file is made on another thread, on click
    load = machine_load() if ctrl.live else None    # the load the counters above judge "measured" by
    row = st.container(horizontal=True, vertical_alignment="center", gap="small")
    row.download_button("Lecture as offline HTML",
                        data=lambda: controller_lecture(ctrl, pair.name, model, short, load=load),
                        file_name=f"taps-lecture-{record.selector}-budget{record.budget}-{len(ctrl.visible)}rounds"
                                  ".html", mime="text/html", key="step_dl_lecture", on_click="ignore",
                        help="Every round shown so far, each with its six stages, the counters, the narration and "
                             "the keys and autoplay of this page, in one HTML file that opens in any browser with no "
                             "server and no network (a few MB: plotly.js is inside)")
    row.caption("For a lecture without a server: students open the file from a folder or a course page.")
    slides(ctrl, record, tree, shown_prompt, run_config, stem)


SLIDES = {  # key: (button, file suffix, mime, what it renders)
    "slide": ("Slide PNG 1920×1080", "slide.png", "image/png",
              lambda ctrl, record, tree, prompt, config: export.slide_png(figures.export_title(
                  figures.round_tree_figure(record, st.session_state["step_color_by"],
                                            int(st.session_state["step_pool_shown"]),
                                            export.slide_plot(), prompt, config), prompt, record))),
    "stages_gif": ("Stages as GIF", "stages.gif", "image/gif",
                   lambda ctrl, record, tree, prompt, config: export.stages_gif(record, prompt, config)),
    "rounds_gif": ("First rounds as GIF", "rounds.gif", "image/gif",
                   lambda ctrl, record, tree, prompt, config: export.rounds_gif(ctrl.rounds, min(len(ctrl.rounds), 10),
                                                                          prompt, config)),
    "stages_mp4": ("Stages as MP4", "stages.mp4", "video/mp4",
                   lambda ctrl, record, tree, prompt, config: export.stages_mp4(record, prompt, config)),
}


def slides(ctrl, record, tree, shown_prompt: str, run_config: dict, stem: str) -> None:
    """For slides: the tree at 1920x1080, and animations of this round's six stages and of the run's
    first rounds (one frame each), all through the time-limited export."""
    state = st.session_state
    st.caption("For slides: type sized for 1920×1080; a GIF or MP4 holds one frame per stage (or per round, the "
               "first ten).")
    kinds = [k for k in SLIDES if k != "stages_mp4" or export.mp4_encoder() is not None]
    cols = st.columns(len(kinds))
    for col, kind in zip(cols, kinds):
        label, suffix, mime, make = SLIDES[kind]
        if col.button(label, key=f"step_make_{kind}"):
            with st.spinner(f"Rendering {label.lower()} (at most a few minutes)…"):
                try:
                    state[f"step_{kind}_file"] = (stem, make(ctrl, record, tree, shown_prompt, run_config))
                except (ExportError, ValueError) as exc:
                    state.pop(f"step_{kind}_file", None)
                    st.error(f"No {label.lower()}: {exc}")
        made = state.get(f"step_{kind}_file")
        if made is not None and made[0] == stem:
            col.download_button(f"Download {suffix.split('.')[-1].upper()}", data=made[1],
                                file_name=f"{stem}-{suffix}", mime=mime, key=f"step_dl_{kind}", on_click="ignore")

