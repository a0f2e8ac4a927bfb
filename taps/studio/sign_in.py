"""How many lecturer passwords a client may try (issue 61; no Streamlit here: `app_pages.classroom`
draws the box and asks).

Counted per client address on the server, not per browser session: reloading the page starts a new
session but meets the same count. An address may give MAX_TRIES wrong passwords; after that it waits
before its next try, FIRST_WAIT_S after the last wrong one, twice as long after each further wrong
one (at most LONGEST_WAIT_S); while it waits no password is checked, the right one included. A right
password clears the address's count; an address quiet for FORGET_AFTER_S after its last wrong
password starts afresh. Every wrong and every refused try is logged (logger `taps.studio.sign_in`).

The counts live in one small file in the cache folder, so every replica of a class server on the
machine (`scripts/serve_class.py`) counts the same tries; a lock per process and, where the system
has one, a lock on the file make a try's read, check and write one step for every thread and process.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .shared_file import one_per_file, write_json

try:                                     # POSIX; elsewhere one process's threads are still serialised
    import fcntl
except ImportError:                      # pragma: no cover - Windows
    fcntl = None

TRIES_FILE = "sign-in-tries.json"
MAX_TRIES = 5                  # wrong passwords an address may give before it waits
FIRST_WAIT_S = 30.0            # the wait after the MAX_TRIES-th wrong one
LONGEST_WAIT_S = 3600.0        # the wait doubles with each further wrong one, up to this
FORGET_AFTER_S = 3600.0        # an address this long past its wait starts afresh

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Standing:
    """Where an address stands: wrong passwords it may still give before it waits, and the seconds
    before it may try at all (0: now)."""

    left: int
    wait_s: float


@dataclass(frozen=True)
class Verdict:
    """One try's outcome: whether the password was checked at all, whether it signed in, and where
    the address stands after it."""

    checked: bool
    signed_in: bool
    standing: Standing


def wait_after(wrong: int) -> float:
    """The wait after an address's `wrong`-th wrong password in a row."""
    if wrong < MAX_TRIES:
        return 0.0
    return min(FIRST_WAIT_S * 2 ** (wrong - MAX_TRIES), LONGEST_WAIT_S)


class SignInGuard:
    def __init__(self, path: Path, clock: Callable[[], float] = time.time):
        self.path = Path(path)
        self.clock = clock
        self._lock = threading.Lock()

    def standing(self, address: str) -> Standing:
        with self._locked() as counts:
            return self._standing(counts.get(address), self.clock())

    def attempt(self, address: str, check: Callable[[], bool]) -> Verdict:
        """A try from `address`: `check()` (whether the password is right) runs only when the address
        need not wait; a wrong one counts against it, a right one clears its count."""
        with self._locked() as counts:
            now = self.clock()
            entry = counts.get(address)
            before = self._standing(entry, now)
            if before.wait_s > 0:
                log.warning("refused a lecturer sign-in from %s: %d wrong passwords, the next try in %.0f s",
                            address, entry["wrong"], before.wait_s)
                return Verdict(False, False, before)
            if check():
                counts.pop(address, None)
                log.info("lecturer signed in from %s", address)
                return Verdict(True, True, Standing(MAX_TRIES, 0.0))
            wrong = (entry["wrong"] if self._remembered(entry, now) else 0) + 1
            counts[address] = {"wrong": wrong, "last": now}
            after = self._standing(counts[address], now)
            log.warning("wrong lecturer password from %s (%d in a row; %d left, the next try in %.0f s)",
                        address, wrong, after.left, after.wait_s)
            return Verdict(True, False, after)

    def forget(self) -> None:
        """Every address starts afresh (the server's owner clearing the counts; tests)."""
        with self._locked() as counts:
            counts.clear()

    # ------------------------------------------------------------------------ the counts
    def _remembered(self, entry: dict | None, now: float) -> bool:
        return entry is not None and now - entry["last"] < wait_after(entry["wrong"]) + FORGET_AFTER_S

    def _standing(self, entry: dict | None, now: float) -> Standing:
        if not self._remembered(entry, now):
            return Standing(MAX_TRIES, 0.0)
        wait = max(0.0, entry["last"] + wait_after(entry["wrong"]) - now)
        return Standing(max(0, MAX_TRIES - entry["wrong"]), wait)

    @contextmanager
    def _locked(self):
        """The counts, read and (when changed) written back under this process's lock and the file's."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, open(self.path.with_suffix(".lock"), "a") as lock:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)
            counts = self._read()
            before = json.dumps(counts, sort_keys=True)
            yield counts
            now = self.clock()
            kept = {a: e for a, e in counts.items() if self._remembered(e, now)}
            if json.dumps(kept, sort_keys=True) != before:
                self._write(kept)

    def _read(self) -> dict[str, dict]:
        try:
            raw = json.loads(self.path.read_text())
            return {str(a): {"wrong": int(e["wrong"]), "last": float(e["last"])} for a, e in raw.items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            log.warning("unreadable sign-in counts in %s: starting afresh", self.path)
            return {}

    def _write(self, counts: dict[str, dict]) -> None:
        write_json(self.path, counts, ".sign-in-")


def sign_in_guard(folder: Path | None = None) -> SignInGuard:
    """The guard of this machine's class server: one per cache folder (`$TAPS_CACHE`)."""
    return one_per_file(SignInGuard, TRIES_FILE, folder)


def wait_text(seconds: float) -> str:
    """A wait in words ("30 s", "2 min", "1 h")."""
    seconds = max(1, round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{round(seconds / 60)} min"
    return f"{round(seconds / 3600)} h"


def standing_text(standing: Standing) -> str:
    """Where an address stands, in words, for the sign-in box."""
    if standing.wait_s > 0:
        return f"the next try from this address in {wait_text(standing.wait_s)}"
    if standing.left == 0:
        return "each wrong password from this address now doubles its wait"
    return f"{standing.left} {'try' if standing.left == 1 else 'tries'} left from this address"
