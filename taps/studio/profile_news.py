"""What a class is told about the lecturer's measuring (issue 61; no Streamlit here:
`app_pages.profile_box` says it in the sidebar).

Measuring this machine's latency profile takes about a minute in a background thread of the process
whose page asked (`taps.studio.speed.start_measuring`), and when it is saved every page sizes its
trees from it. A student's page, maybe on another replica of the class server, is told both: one
line while it runs ("The lecturer is measuring..."), and one, once, when it changed what the page
shows (trees sized from this machine's own timings from now on). So a measurement's start and end
are written to one small file in the cache folder (atomically, like the room: `taps.studio.room`),
which every replica reads; `class_notice` decides what a page says from it.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .shared_file import one_per_file, write_json

NEWS_FILE = "profile-news.json"
STALE_AFTER_S = 900.0          # a measurement that never said it ended (its process stopped) is over after this


@dataclass(frozen=True)
class Measuring:
    """One measurement of a profile (its file's path: one per pair, device and threads): when it
    started, when it ended (None while it runs) and why it failed ("" when it did not)."""

    profile: str
    started: float
    ended: float | None = None
    error: str = ""


@dataclass(frozen=True)
class Notice:
    """What a page says about the measuring: kind "running", "switched", "failed" or "" (nothing),
    the line, and what the page remembers it watched (the start it told as running, and what the
    trees were sized from then), None once told how it ended."""

    kind: str
    text: str
    watched: tuple[float, str] | None


class ProfileNews:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def started(self, profile: str, now: float | None = None) -> None:
        self._put(Measuring(str(profile), time.time() if now is None else now))

    def ended(self, profile: str, error: str = "", now: float | None = None) -> None:
        with self._lock:
            found = self._all().get(str(profile))
            started = found.started if found is not None else (time.time() if now is None else now)
        self._put(Measuring(str(profile), started, time.time() if now is None else now, error))

    def current(self, profile: str) -> Measuring | None:
        """The latest measurement of `profile`, or None (none yet, or the file is unreadable)."""
        with self._lock:
            return self._all().get(str(profile))

    def _all(self) -> dict[str, Measuring]:
        try:
            raw = json.loads(self.path.read_text())
            return {str(k): Measuring(str(k), float(v["started"]), None if v["ended"] is None else float(v["ended"]),
                                      str(v["error"])) for k, v in raw.items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def _put(self, measuring: Measuring) -> None:
        with self._lock:
            known = self._all()
            known[measuring.profile] = measuring
            write_json(self.path, {k: {"started": m.started, "ended": m.ended, "error": m.error}
                                   for k, m in known.items()}, ".news-")


def profile_news(folder: Path | None = None) -> ProfileNews:
    """This machine's news of measurements: one per cache folder (`$TAPS_CACHE`)."""
    return one_per_file(ProfileNews, NEWS_FILE, folder)


def class_notice(measuring: Measuring | None, watched: tuple[float, str] | None, sized_from: str,
                 now: float | None = None) -> Notice:
    """What a page that did not ask for the measurement says about it: while it runs, that the
    lecturer is measuring and what trees stay sized from (`sized_from`, in words: "the reference
    CPU's timings"); once it ended, if this page saw it running (`watched`), that the profile
    switched (or why it did not), said once. A page opened after it ended is told nothing: its
    profile box already names the profile in use."""
    now = time.time() if now is None else now
    if measuring is None:
        return Notice("", "", watched)
    if measuring.ended is None and now - measuring.started < STALE_AFTER_S:
        seen = watched if watched is not None and watched[0] == measuring.started else (measuring.started, sized_from)
        return Notice("running", "The lecturer is measuring this machine's latency profile (about a minute): trees "
                                 f"stay sized from {seen[1]} until it is saved.", seen)
    if watched is None or watched[0] != measuring.started:
        return Notice("", "", watched)
    if measuring.ended is None or measuring.error:
        return Notice("failed", "The lecturer's measurement of this machine's latency profile did not finish: trees "
                                f"stay sized from {watched[1]}.", None)
    return Notice("switched", "The lecturer measured this machine's latency profile: the profile switched, and trees "
                              f"are sized from this machine's own timings from now on (until now: {watched[1]}).", None)
