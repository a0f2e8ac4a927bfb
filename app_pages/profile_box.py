"""The sidebar's latency profile box: which profile the runs and the modelled figures use,
measuring this machine's own in the background (the lecturer's alone on a class server, and what a
student's page is told while the lecturer measures), and the what-if profiles below it
(`app_pages.what_if_box`)."""

from __future__ import annotations

import streamlit as st

from app_pages.classroom import class_settings, is_lecturer, lecturer_only
from app_pages.profiles import OVERRIDE, page_profile, profile_label, short_label, use_profile
from app_pages.what_if_box import model_the_speed, pair_references, references
from taps import ModelPair
from taps.studio import speed
from taps.studio.page_profile import PageProfile


def _finished(job) -> bool:
    """Whether `job` has ended; the first time a browser session sees it ended, the sidebar's notice
    says how (saved, or why not)."""
    if job is None or not job.done:
        return False
    if st.session_state.get("_measure_seen") != id(job) and job.owner == session_token():
        st.session_state["_measure_seen"] = id(job)         # said only to the browser session that measured
        st.session_state["profile_notice"] = (
            f"Could not measure a latency profile: {job.error}" if job.error else
            "Measured and saved: every run from now on sizes its trees from this machine's profile.")
    return True


@st.fragment(run_every=1.0)
def _measure_progress(pair: ModelPair) -> None:
    """The background measurement's progress bar, redrawn every second; when it ends, the whole
    page runs again so runs switch to the new profile."""
    job = speed.measure_job(pair)
    if _finished(job):
        st.rerun(scope="app")
    if job is not None:
        st.progress(job.share, text=f"Measuring this machine in the background: {job.text}")


def session_token() -> str:
    """A token of this browser session, to tell a notice meant for it from one meant for another."""
    state = st.session_state
    if "_session_token" not in state:
        import uuid

        state["_session_token"] = uuid.uuid4().hex
    return state["_session_token"]


WATCHED = "_measure_watched"     # the lecturer's measurement this page was told is running (`class_notice`)


def _told_the_class(pair: ModelPair, found: PageProfile) -> bool:
    """On a class server, a student's page is told what the lecturer's measuring does to it, on any
    replica (`taps.studio.profile_news`): one line while it runs, one once it switched the profile.
    Returns whether it runs (the page then says nothing more about measuring)."""
    if not class_settings().served or is_lecturer():
        return False
    from taps.profiles import profile_path
    from taps.studio.profile_news import class_notice, profile_news

    state, where = st.session_state, str(profile_path(pair))
    sized_from = ("this machine's previous timings" if found.sizing_id == speed.MACHINE else
                  f"the {short_label(found.sizing_id)}'s timings" if found.sizing_id else "no profile")
    notice = class_notice(profile_news().current(where), state.get(WATCHED), sized_from)
    state[WATCHED] = notice.watched
    if notice.kind == "running":
        st.info(notice.text, icon=":material/hourglass_top:")
        _news_poll(pair, where)
    elif notice.kind:
        (st.success if notice.kind == "switched" else st.warning)(notice.text)
    return notice.kind == "running"


@st.fragment(run_every=2.0)
def _news_poll(pair: ModelPair, where: str) -> None:
    """While the lecturer measures: its progress when it runs in this process, and, once it ended
    (on any replica), the whole page again, so runs switch and the page says so."""
    from taps.studio.profile_news import class_notice, profile_news

    if class_notice(profile_news().current(where), st.session_state.get(WATCHED), "").kind != "running":
        st.rerun(scope="app")
    job = speed.measure_job(pair)
    if job is not None and not job.done:
        st.progress(job.share, text=f"Measuring: {job.text}")


def _measure_controls(pair: ModelPair, found: PageProfile) -> None:
    if _told_the_class(pair, found):
        return
    job = speed.measure_job(pair)
    if job is not None and not job.done:
        _measure_progress(pair)
        return
    _finished(job)
    profile = found.sizing
    if found.sizing_id == speed.MACHINE:
        by = " by the lecturer" if class_settings().served else ""
        st.caption(f"This machine: measured{by} {profile.measured_at or 'at an unknown time'}, "
                   f"{profile.repeats} repeats, trees up to {max(profile.sizes)} nodes. Every run reads it, so a "
                   "demo replays.")
    elif profile is not None and not found.link_id:        # the shipped reference, until this machine's is measured
        st.caption(speed.MEASURE_REASON[0].upper() + speed.MEASURE_REASON[1:] + ".")
    label = "Re-measure latency profile" if found.default_id == speed.MACHINE else "Measure latency profile"
    allowed = is_lecturer()
    if st.button(label, key="profile_measure_button", width="stretch", disabled=not allowed,
                 help="Measures this machine's own profile in the background (about a minute): the lecture goes on, "
                      "and runs switch to it when it is saved. Timings taken while the app decodes are slower: "
                      "measure while it is idle.") and allowed:
        speed.start_measuring(pair, owner=session_token())
        st.rerun()
    if not allowed:
        lecturer_only("this machine's latency profile (every page sizes its trees from it)")


def _profile_notices() -> None:
    notice = st.session_state.pop("profile_notice", None)
    if notice:
        (st.warning if notice.startswith("Could not") else st.success)(notice)


def profile_sidebar(pair: ModelPair | None) -> None:
    """Which profile the runs' trees and the modelled figures use (named, always), measuring this
    machine's own in the background, and the what-if profiles."""
    st.subheader("Latency profile")
    found = page_profile(pair)
    if pair is not None:
        if found.sizing is None:
            st.info(f"No latency profile for {pair.name} on this device yet, and none is shipped for it: TAPS's "
                    "cost mode needs one (measuring takes about a minute), its reach mode does not.")
        else:
            st.caption(f"**In use:** {profile_label(found.sizing_id)}.", help=speed.profile_name(found.sizing))
        if st.session_state.get(OVERRIDE) and found.link_problem:
            st.caption(f"The link's profile {st.session_state[OVERRIDE]} does not apply here ({found.link_problem}).")
        if st.session_state.get(OVERRIDE) and st.button("Use this machine's default profile", key="profile_default"):
            use_profile(None)
            st.rerun()
        _measure_controls(pair, found)
        _profile_notices()
    model_the_speed(pair, found.sizing_id)
    others = {name: p.pair for name, p in references(None).items()
              if name not in pair_references(pair) and p.kind != speed.SHAPE_KIND}
    if pair is not None and others:
        st.caption("Not offered: " + "; ".join(f"{name} (measured for {owner or 'an unnamed pair'}, not {pair.name})"
                                              for name, owner in others.items())
                   + ". A measured profile prices the rounds of the pair it was timed with; for other hardware "
                     "with this pair, pick a roofline estimate.")
