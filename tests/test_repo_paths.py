"""Nothing names a path that does not exist.

The docs, scripts, code and tests name repository files by path (`results/round-cost/README.md`,
`scripts/bench_shipped.sh`, `taps/eval/bench.py`). This test reads them all and checks that every
such path exists in the working tree, so a move or a deletion that leaves a stale mention fails
here with the list of what is missing, file and line. Markdown links are checked too, relative to
the file they are in.

Not checked: glob patterns (`*`), placeholders (`<pair>`, `{name}`, `$OUT`, `...`), paths that a
command creates when it runs (RUNTIME, each with its reason) and paths on a line that says they are
in git history: a `git archive` / `git show` command, the words "git history" or "at <commit>" on
the line, a path written as git writes a path at a commit (`f419de9:assets/wip/README.md`), or a
path that a `git archive <commit> <paths> | tar -x` line earlier in the same code block restores.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# the tracked text that names paths
SCANNED = ("README.md", "docs/**/*.md", "assets/**/*.md", "results/**/*.md", "scripts/*", "docs/lab/*",
           "taps/**/*.py", "app.py", "app_pages/*.py", "tests/*.py", ".ci/run", "pyproject.toml")

TOP_DIRS = ("taps", "app_pages", "assets", "results", "scripts", "tests", "docs", ".ci", ".streamlit")
TOP_FILES = ("app.py", "README.md", "requirements.txt", "pyproject.toml", "pytest.ini")

# Paths that exist only once a command has run (the folder is its output), with the reason.
RUNTIME = {
    "results/qwen3-4b/": "the GPU sweep's --out in docs/benchmarks.md: written by that command",
    "results/profile": "python -m taps.profile's default --out (taps/eval/profile.py)",
    "results/profile/": "the same, as the profile command's usage line writes it",
    "results/round-profile": "scripts/profile_round.py's default --out",
    ".streamlit/secrets.toml": "a class server's lecturer password, written by whoever serves a class (git ignores it)",
}

_PATH_CHARS = r"[A-Za-z0-9_./*<>{}$+-]"
MENTION = re.compile(
    r"(?<![\w./~$-])("
    + r"(?:" + "|".join(re.escape(d) for d in TOP_DIRS) + r")/" + _PATH_CHARS + r"*"
    + r"|(?:" + "|".join(re.escape(f) for f in TOP_FILES) + r")(?![\w.-])"
    + r")"
)
# TAPS's run labels (selector/estimator), a batch plan's lane after a + (taps/online+taps-batch)
NOT_PATHS = re.compile(r"taps/(?:marginal|online|learned|selector)(?:\+(?:taps|chain)-batch)?$")
LINK = re.compile(r"\]\(([^)\s]+)\)")
IN_HISTORY = re.compile(r"git archive|git show|git history|\b(?:at|commit) [0-9a-f]{7,40}\b", re.IGNORECASE)
AT_COMMIT = re.compile(r"\b[0-9a-f]{7,40}:$")          # `f419de9:` just before the path
RESTORE = re.compile(r"git archive\s+[0-9a-f]{7,40}\s+([^|]+)\|\s*tar -x\s*(?:$|[;&#)])")
PLACEHOLDER = re.compile(r"[*<>{}$]|\.\.\.|(?:^|/)[A-Z][A-Z0-9_]+(?:/|$)")   # glob, <x>, {x}, $X, ..., NAME
# A benchmark's summary.md records the command that made it: a record of a past run, whose pair may
# since have left the tree (docs/benchmarks.md says how to restore one from git history).
RECORD_LINE = re.compile(r"^- Command: ")
SELF = Path(__file__).resolve()   # its examples name missing paths on purpose


def scanned_files() -> list[Path]:
    files: set[Path] = set()
    for pattern in SCANNED:
        for path in ROOT.glob(pattern):
            if path.is_file() and "__pycache__" not in path.parts and path.resolve() != SELF:
                files.add(path)
    return sorted(files)


def _missing_in(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []
    rel = path.relative_to(ROOT).as_posix()
    missing = []
    restored: list[str] = []          # paths a `git archive ... | tar -x` in this code block restored
    summary, markdown = path.name == "summary.md", path.suffix == ".md"
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            restored = []
        if "git archive" in line:
            restored += [p.rstrip("/") for m in RESTORE.finditer(line) for p in m.group(1).split()]
        mentions = list(MENTION.finditer(line))
        links = list(LINK.finditer(line)) if markdown and "](" in line else []
        if not (mentions or links) or IN_HISTORY.search(line) or (summary and RECORD_LINE.match(line)):
            continue
        for match in mentions:
            token = match.group(1).split("#")[0].rstrip(".-")
            if (token in RUNTIME or PLACEHOLDER.search(token) or NOT_PATHS.match(token)
                    or AT_COMMIT.search(line[:match.start()])
                    or any(token == r or token.startswith(r + "/") for r in restored)):
                continue
            if not (ROOT / token).exists():
                missing.append(f"{rel}:{number}: {token}")
        for match in links:
            target = match.group(1).split("#")[0]
            if (not target or re.match(r"[a-z]+:", target) or target.startswith("/") or PLACEHOLDER.search(target)
                    or MENTION.fullmatch(target)):             # a repository path: checked above
                continue
            resolved = (path.parent / target).resolve()
            if ROOT in resolved.parents and not resolved.exists():
                missing.append(f"{rel}:{number}: link {target}")
    return missing


def test_scanned_files_are_found():
    files = {p.relative_to(ROOT).as_posix() for p in scanned_files()}
    assert {"README.md", "app.py", "tests/conftest.py", ".ci/run"} <= files
    assert any(f.startswith("docs/") for f in files) and any(f.startswith("scripts/") for f in files)


def test_every_named_path_exists():
    missing = [m for path in scanned_files() for m in _missing_in(path)]
    assert not missing, f"{len(missing)} path(s) named but not in the working tree:\n" + "\n".join(missing)


SCRIPT_INDEXES = {"scripts": "docs/scripts.md", "docs/lab": "docs/lab/README.md"}


def test_every_script_has_its_line():
    """Every script in scripts/ has its line in docs/scripts.md, every lab script in docs/lab/README.md
    (the first column of their tables), and those tables name no script that is not there."""
    for folder, index in SCRIPT_INDEXES.items():
        here = {p.name for p in (ROOT / folder).iterdir() if p.suffix in (".py", ".sh")}
        rows = [line.split("|")[1] for line in (ROOT / index).read_text().splitlines() if line.startswith("| `")]
        listed = {name for cell in rows for name in re.findall(r"`([^`]+)`", cell)}
        assert here == listed, f"{index}: not listed {sorted(here - listed)}, listed but not in {folder}/ " \
                               f"{sorted(listed - here)}"


def test_the_checker_sees_a_missing_path(tmp_path, monkeypatch):
    """The checker itself: a stale path is caught, a glob, placeholder or history mention is not."""
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    (tmp_path / "scripts").mkdir()
    doc = tmp_path / "README.md"
    doc.write_text("see `scripts/gone.sh` and [x](scripts/) and [y](docs/none.md) and [z](../up.md)\n"
                   "rows in results/*/rows.jsonl, assets/models/<pair>, assets/models/NAME, README.md\n"
                   "TAPS/online, taps/online, runs/x, /tmp/results/x\n"
                   "`git archive f419de9 assets/wip/x | tar -x` restores assets/wip/x\n"
                   "f419de9:assets/wip/y is in history\n"
                   "```\ngit archive f419de9 assets/wip/z | tar -x\ncp -r assets/wip/z/a runs/\n```\n"
                   "cp -r assets/wip/z runs/\n")
    assert _missing_in(doc) == ["README.md:1: scripts/gone.sh", "README.md:1: docs/none.md",
                                "README.md:10: assets/wip/z"]
