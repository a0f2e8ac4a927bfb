"""What a class server's replicas share through files in the cache folder (`$TAPS_CACHE`): the room a
class follows (`room`), the lecturer's sign-in counts (`sign_in`) and the news of a profile being
measured (`profile_news`). Each is one object per file per process (`one_per_file`), written whole
and atomically (`write_json`), so a reader on another replica sees the old file or the new, never half.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Callable, TypeVar

from ..paths import cache_root

T = TypeVar("T")
_ONE: dict[tuple[Callable, Path], object] = {}
_LOCK = threading.Lock()


def one_per_file(make: Callable[[Path], T], name: str, folder: Path | None = None) -> T:
    """The process's one `make(path)` for the file `name` in `folder` (default: the cache folder)."""
    key = (make, Path(folder or cache_root()) / name)
    with _LOCK:
        if key not in _ONE:
            _ONE[key] = make(key[1])
        return _ONE[key]


def write_json(path: Path, value, prefix: str) -> None:
    """`value` as JSON at `path`, through a temporary file in the same folder and one rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix, dir=path.parent)
    with os.fdopen(fd, "w") as out:
        json.dump(value, out)
    os.replace(tmp, path)
