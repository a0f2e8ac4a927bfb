"""Who may change what every session of a served class sees (no Streamlit here; the frame asks; no
engine either: the frame reads it before the engine is imported).

A lone user on their own machine (no lecturer secret configured) keeps every control. When the app
is served to a class, the server's `.streamlit/secrets.toml` holds a lecturer password:

    lecturer_password = "a long random phrase"
    pair_roots = ["/srv/taps/pairs"]        # optional: more folders pairs may be loaded from

and then what changes the server for everyone (loading a pair, which fills the process's shared
cache of pairs and can download a hub model; measuring or re-measuring this machine's latency
profile, which every page then sizes its trees from) needs the lecturer: a session that gave the
password once (compared with `hmac.compare_digest`) keeps the right for its lifetime. A pair folder
is read only from the allowed roots (the shipped models, the folder `TAPS_PAIR` names, the
configured ones), and the messages about a pair never show a server path or say whether a path
exists beyond what the person typed.
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..paths import MODELS_DIR

if TYPE_CHECKING:
    from ..pair import PairError

PASSWORD_KEY = "lecturer_password"
ROOTS_KEY = "pair_roots"
ROOTS_ENV = "TAPS_PAIR_ROOTS"          # more allowed roots, os.pathsep-separated (the class server's command)

LECTURER_ONLY = "Only the lecturer changes this for the class"


@dataclass(frozen=True)
class ClassSettings:
    """What the server's secrets say about serving a class: the lecturer's password ("" when none is
    configured: a lone user's machine, every control open) and the folders pairs may be read from."""

    password: str = ""
    roots: tuple[Path, ...] = ()

    @property
    def served(self) -> bool:
        """Whether the app is served to a class (a lecturer password is configured)."""
        return bool(self.password)

    def check(self, given: str | None) -> bool:
        """Whether `given` is the lecturer's password (constant-time; never true without one)."""
        if not self.password or not given:
            return False
        return hmac.compare_digest(given.encode("utf-8"), self.password.encode("utf-8"))


def class_settings(secrets) -> ClassSettings:
    """The class settings from a mapping of secrets (Streamlit's `st.secrets`, or a dict); a missing
    or unreadable secrets file is a lone user's machine."""
    try:
        password = secrets.get(PASSWORD_KEY) if secrets is not None else None
        extra = secrets.get(ROOTS_KEY) if secrets is not None else None
    except Exception:  # noqa: BLE001 - no secrets file, or one that does not parse: no class configured
        password, extra = None, None
    password = str(password or "").strip()
    roots = [MODELS_DIR]
    pair_env = os.environ.get("TAPS_PAIR", "").strip()
    if pair_env:
        roots.append(Path(pair_env).expanduser().parent)
    if isinstance(extra, str):
        extra = [extra]
    roots += [Path(str(r)).expanduser() for r in (extra or []) if str(r).strip()]
    roots += [Path(r).expanduser() for r in os.environ.get(ROOTS_ENV, "").split(os.pathsep) if r.strip()]
    seen: list[Path] = []
    for root in roots:
        try:
            resolved = root.resolve()
        except OSError:
            continue
        if resolved not in seen:
            seen.append(resolved)
    return ClassSettings(password=password, roots=tuple(seen))


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def allowed_folder(text: str, roots: tuple[Path, ...]) -> Path | None:
    """The pair folder `text` names inside the allowed roots: an absolute path inside one (after
    resolving links and `..`), or a path relative to one of them (the first root that holds it).
    None when it names nothing there (whether or not it exists elsewhere)."""
    typed = Path(text)
    if text.startswith("~") or typed.is_absolute():
        try:
            candidate = typed.expanduser().resolve()
        except (OSError, RuntimeError):
            return None
        return candidate if candidate.is_dir() and any(_inside(candidate, root) for root in roots) else None
    for root in roots:
        try:
            candidate = (root / typed).resolve()
        except (OSError, RuntimeError):
            continue
        if _inside(candidate, root) and candidate.is_dir():
            return candidate
    return None


def not_allowed(text: str) -> PairError:
    """The one message for a pair folder outside the allowed roots, the same whether the path exists
    or not, naming only what was typed."""
    from ..pair import PairError  # the engine (torch): the app's frame reads the class settings before it

    return PairError(f"'{text}' is neither a pair folder this class server offers nor a hub model it can load: "
                     "it reads pairs only from its model folders (the shipped pair's, and the folders configured as "
                     "pair_roots in its secrets) and hub ids it can download (its log says why one failed)")


def clean_message(message: str, typed: str, folder: Path) -> str:
    """A pair error with the server's path of the folder (`allowed_folder`'s, resolved) replaced by
    what the person typed."""
    return message.replace(str(folder), typed)
