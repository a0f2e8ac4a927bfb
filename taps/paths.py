"""Where the project's shipped files are: the one place that knows the repository's layout.

`assets/` (the shipped pair, reference latency profiles, example prompts) sits beside the `taps`
package in a checkout or an editable install (`pip install -e .`). A non-editable install has no
`assets/`: set TAPS_ASSETS to a checkout's `assets` folder, or pass a pair folder explicitly.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSETS = Path(os.environ.get("TAPS_ASSETS", ROOT / "assets"))
MODELS_DIR = ASSETS / "models"
PROFILES_DIR = ASSETS / "profiles"
EXAMPLES_PATH = ASSETS / "examples" / "prompts.jsonl"


def cache_root() -> Path:
    """Where measured latency profiles and cached training data are kept ($TAPS_CACHE, default ~/.cache/taps)."""
    return Path(os.environ.get("TAPS_CACHE", Path.home() / ".cache/taps"))
