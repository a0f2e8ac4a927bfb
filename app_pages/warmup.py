"""The first visitors of a freshly started server: what they wait for, said at once.

Before the first page can draw, the process imports the engine (PyTorch, transformers, plotly: a
few seconds of CPU) and compiles or loads the selection kernels. Done inside the first page's run,
a class opening one link saw Streamlit's grey placeholder boxes and nothing else for half a minute.
Here a background thread does that work once per process while every page that arrives meanwhile
says what is being loaded and how long it has taken, then goes on. Light imports only: this module
must draw before the heavy ones are done.
"""

from __future__ import annotations

import importlib
import threading
import time

import streamlit as st

ENGINE_MODULES = ("torch", "transformers", "plotly.graph_objects", "taps.pair", "taps.session", "taps.studio.serve",
                  "taps.studio.figures")
POLL_S = 0.25
# A class's pages hold still: Streamlit animates its placeholders, its running indicator and stale
# elements for as long as a page waits, and a class opening one link waits together. With the
# students' browsers on the server's own cores, eight pages opening at once spent 44 s of CPU with
# the animations and 31 s without, and drew their trees 7 s sooner (docs/serving.md).
STILL_CSS = "<style>*, *::before, *::after { animation: none !important; transition: none !important; }</style>"


class _Warmup:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.stage = "starting"
        self.started = 0.0
        self.done = False
        self.error = ""

    def start(self) -> None:
        with self.lock:
            if self.thread is None:
                self.started = time.monotonic()
                self.thread = threading.Thread(target=self._work, name="taps-warmup", daemon=True)
                self.thread.start()

    def _work(self) -> None:
        try:
            self.stage = "the decoding engine (PyTorch, transformers, plotly)"
            for name in ENGINE_MODULES:
                importlib.import_module(name)
            self.stage = "the selection kernels (compiled once, then read from the cache)"
            from taps import kernels

            kernels.warm_up()
        except Exception as exc:  # noqa: BLE001 - the page imports again and shows the real error
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.done = True


_WARMUP = _Warmup()


def ready() -> bool:
    """Whether the engine is loaded in this process (no page has to wait for it)."""
    return _WARMUP.done


def hold_still() -> None:
    """On a server serving a class, no animations on the page (STILL_CSS); first thing on every run."""
    from taps.studio.lecturer import class_settings  # light: no engine

    if class_settings(st.secrets).served:
        st.html(STILL_CSS)


def wait_for_engine() -> None:
    """Start loading the engine once per process (if no page has) and, on this page, say what it
    waits for until it is loaded. Returns at once when it is."""
    if _WARMUP.done:
        return
    _WARMUP.start()
    box = st.empty()
    while not _WARMUP.done:
        waited = time.monotonic() - _WARMUP.started
        box.info(f"**Starting TAPS Studio** (once after the server starts): loading {_WARMUP.stage}… "
                 f"{waited:.0f} s so far. The page draws as soon as it is loaded.", icon=":material/hourglass_top:")
        time.sleep(POLL_S)
    box.empty()
