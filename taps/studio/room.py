"""The lecturer's screen, for the students of a served class who follow it (issue 49).

On a class server (a lecturer password set: `taps.studio.lecturer`), every change of the signed-in
lecturer's Step-through view (the prompt, the settings, the round, the view: its link, as the address
bar holds it) is written to one small file in the cache folder. A student page that follows the
lecturer reads that file every couple of seconds and, when it moved on, opens the lecturer's link
(the same link: the same shared run, decoded once). One file, so every replica of a class server on
the machine (`scripts/serve_class.py`) sees the same lecturer; written atomically (a reader sees the
old view or the new one, never half of one); read only when its modification time changed.

No streamlit: `app_pages.classroom` draws the toggle and the poller.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .shared_file import one_per_file, write_json

ROOM_FILE = "class-room.json"
PRIVATE = ("presenter",)          # the lecturer's own page settings a follower does not take


@dataclass(frozen=True)
class Shown:
    """The lecturer's view: its link's parameters, a number that grows with every change, and when."""

    params: dict[str, str]
    seq: int
    time: float


class Room:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._read: tuple[int, Shown | None] = (-1, None)

    def publish(self, params: dict[str, str]) -> bool:
        """The lecturer's view is now `params` (a link's parameters; the lecturer's own page settings
        are left out): written when it changed. Returns whether it was."""
        shown = {name: str(value) for name, value in params.items() if name not in PRIVATE}
        with self._lock:
            last = self.current()
            if last is not None and last.params == shown:
                return False
            record = {"params": shown, "seq": (last.seq if last else 0) + 1, "time": time.time()}
            write_json(self.path, record, ".room-")
            return True

    def current(self) -> Shown | None:
        """The lecturer's latest view, or None before the lecturer showed one (or when the file is
        unreadable: a follower then stays where it is)."""
        try:
            stamp = self.path.stat().st_mtime_ns
        except OSError:
            return None
        if stamp == self._read[0]:
            return self._read[1]
        try:
            raw = json.loads(self.path.read_text())
            shown = Shown({str(k): str(v) for k, v in raw["params"].items()}, int(raw["seq"]), float(raw["time"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        self._read = (stamp, shown)
        return shown


def class_room(folder: Path | None = None) -> Room:
    """The room of this machine's class server: one per cache folder (`$TAPS_CACHE`)."""
    return one_per_file(Room, ROOM_FILE, folder)
