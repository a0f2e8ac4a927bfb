"""Figures drawn for a round, built once and reused read-only by every page that shows them.

A class on one link shows the same rounds (the link's shared run, `taps.studio.serve`) on every
page, each page at the same view: building the tree figure again for each page was most of a served
page-Step's CPU (75 ms of 0.15 s on the shipped pair; issue 49). A figure here is keyed by the round
object itself (a shared run's rounds are the same objects on every page) and by everything the figure
depends on (view, colour mode, pool nodes drawn, plot size and label scale, prompt, settings, theme),
built by the first page that asks while any other page asking for the same key waits for it, and
never changed after: pages hand it to Streamlit, which only reads it to serialise it. The cache is
bounded (least recently used out first) and drops a round's figures when the round itself is gone.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import astuple, is_dataclass

DRAWN_LIMIT = 48          # figures kept (a tree figure is a few hundred kB of plotly objects)


def figure_key(*parts) -> tuple:
    """A hashable key from a figure's inputs: dataclasses as tuples, mappings as sorted JSON."""
    out = []
    for part in parts:
        if is_dataclass(part) and not isinstance(part, type):
            out.append(astuple(part))
        elif isinstance(part, dict):
            out.append(json.dumps(part, sort_keys=True, default=str))
        else:
            out.append(part)
    return tuple(out)


class DrawnFigures:
    """Figures built once per (round, key); `built` counts builds (the tests read it)."""

    def __init__(self, limit: int = DRAWN_LIMIT):
        self.limit = limit
        self.built = 0
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple, tuple[weakref.ref, object]] = OrderedDict()
        self._building: dict[tuple, threading.Lock] = {}

    def get(self, record, key: Hashable, build: Callable[[], object]):
        """The figure for `record` under `key`, built with `build()` the first time."""
        slot = (id(record), key)
        with self._lock:
            found = self._take(slot, record)
            if found is not None:
                return found
            building = self._building.setdefault(slot, threading.Lock())
        with building:                        # one page builds; the others wait for it, then read
            with self._lock:
                found = self._take(slot, record)
                if found is not None:
                    return found
            figure = build()
            with self._lock:
                self._items[slot] = (weakref.ref(record), figure)
                self._items.move_to_end(slot)
                self.built += 1
                while len(self._items) > self.limit:
                    self._items.popitem(last=False)
                self._building.pop(slot, None)
            return figure

    def _take(self, slot: tuple, record):
        item = self._items.get(slot)
        if item is None:
            return None
        if item[0]() is not record:           # another round now has that id: the old one is gone
            del self._items[slot]
            return None
        self._items.move_to_end(slot)
        return item[1]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.built = 0


_DRAWN = DrawnFigures()


def drawn_figures() -> DrawnFigures:
    """This process's figures drawn for rounds (one for every browser session)."""
    return _DRAWN
