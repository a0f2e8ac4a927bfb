"""The lecturer and the room a class follows: whether the app is served to a class, the lecturer's
sign-in in the sidebar (`taps.studio.lecturer`), and a student's page following the lecturer's
Step-through view (`taps.studio.room`)."""

from __future__ import annotations

import streamlit as st

from app_pages import address
from taps.studio import lecturer
from taps.studio.sign_in import MAX_TRIES, sign_in_guard, standing_text

LECTURER = "_lecturer"                  # this browser session gave the lecturer's password
FORWARDED = "X-Real-IP"                 # the browser's address, as the class server's nginx passes it on


def class_settings() -> lecturer.ClassSettings:
    """Whether the app is served to a class (a lecturer password in the server's secrets) and the
    folders pairs may be read from (`taps.studio.lecturer`)."""
    return lecturer.class_settings(st.secrets)


def is_lecturer() -> bool:
    """Whether this browser session may change what every session sees (the pair, this machine's
    latency profile): always on a lone user's machine, else once it gave the lecturer's password."""
    return not class_settings().served or bool(st.session_state.get(LECTURER))


def client_address() -> str:
    """The address this browser connects from, which sign-in tries are counted by. Streamlit gives
    none for a connection from this machine itself: then the one the class server's nginx passed
    on (which only a process on this machine can set), else "this machine"."""
    try:
        found = [st.context.ip_address, st.context.headers.get(FORWARDED)]
    except (AttributeError, RuntimeError):       # no browser connection (a script)
        found = []
    # only text is an address (a test's app, with no server, answers with stand-in objects)
    return next((a.strip() for a in found if isinstance(a, str) and a.strip()), "this machine")


def _sign_in() -> None:
    state = st.session_state
    given, state["lecturer_password_input"] = state.get("lecturer_password_input", ""), ""
    verdict = sign_in_guard().attempt(client_address(), lambda: class_settings().check(given))
    if verdict.signed_in:
        state[LECTURER] = True
        state["lecturer_notice"] = "Signed in as the lecturer (in this browser session)."
    elif not verdict.checked:
        state["lecturer_notice"] = (f"Too many wrong passwords from this address: nothing was checked; "
                                    f"{standing_text(verdict.standing)}.")
    else:
        state["lecturer_notice"] = (f"That is not the lecturer's password: nothing changed; "
                                    f"{standing_text(verdict.standing)}.")


def _sign_out() -> None:
    st.session_state[LECTURER] = False


FOLLOW = "follow_lecturer"               # a student's page follows the lecturer's Step-through view
ROOM_SEEN = "_room_seen"                 # the lecturer's last view this page followed (its number)


def following() -> bool:
    """Whether this page follows the lecturer's screen (a student on a class server who asked to)."""
    return class_settings().served and not is_lecturer() and bool(st.session_state.get(FOLLOW))


def publish_view(params: dict[str, str]) -> None:
    """The signed-in lecturer's Step-through link, for the students who follow it (`taps.studio.room`)."""
    if class_settings().served and is_lecturer():
        from taps.studio.room import class_room

        class_room().publish(params)


def follow_lecturer() -> None:
    """On Step through, before the page reads its link: when this page follows the lecturer and the
    lecturer's view moved on since this page last took it, open the lecturer's link; and every 2 s
    a cheap look at the room (a full rerun only when it moved on)."""
    if not following():
        return
    from taps.studio.room import class_room

    state, shown = st.session_state, class_room().current()
    if shown is not None and shown.seq != state.get(ROOM_SEEN):
        state[ROOM_SEEN] = shown.seq
        address.follow(shown.params)             # read as a link by the page, on this very run
    _room_poll()


@st.fragment(run_every=2.0)
def _room_poll() -> None:
    from taps.studio.room import class_room

    shown = class_room().current() if following() else None
    if shown is not None and shown.seq != st.session_state.get(ROOM_SEEN):
        st.rerun()


def lecturer_sidebar() -> None:
    """On a class server, the lecturer's sign-in (or, signed in, what the lecturer may do); for a
    student, the toggle that makes Step through follow the lecturer's screen."""
    if not class_settings().served:
        return
    state = st.session_state
    if state.get(LECTURER):
        st.caption("**Lecturer**: you load pairs and measure this machine's latency profile for the whole class. "
                   "Students who follow you see your Step-through view.")
        st.button("Sign out", key="lecturer_sign_out", on_click=_sign_out)
    else:
        st.toggle("Follow the lecturer", key=FOLLOW,
                  help="Step through shows the lecturer's prompt, settings, round and view as the lecturer moves "
                       "on (within 2 s); your own Step still works, until the lecturer's next move.")
        with st.expander("Lecturer", icon=":material/key:"):
            st.text_input("Lecturer password", type="password", key="lecturer_password_input",
                          help="Set in the server's .streamlit/secrets.toml (docs/serving.md). Students need none.")
            st.button("Sign in", key="lecturer_sign_in", on_click=_sign_in)
            standing = sign_in_guard().standing(client_address())
            if standing.wait_s > 0 or standing.left < MAX_TRIES:
                st.caption(standing_text(standing)[0].upper() + standing_text(standing)[1:] + ".")
    notice = state.pop("lecturer_notice", None)
    if notice:
        (st.success if notice.startswith("Signed in") else st.warning)(notice)


def lecturer_only(what: str) -> None:
    """The one line a student sees under a control only the lecturer has."""
    st.caption(f":material/lock: {lecturer.LECTURER_ONLY}: {what}.")

