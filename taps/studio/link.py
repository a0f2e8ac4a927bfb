"""Step through's address: the page's state as URL query parameters and back, so a copied link
opens the same run at the same round and view in any browser. Plain Python (no streamlit).

- `parse_step_link(params, examples, defaults, pair)` reads a query-parameter dict into a
  `StepLink` and a list of messages: every setting is checked by the engine's own checks
  (`taps.config.check_value`, `DecodeConfig.validate`, the pair's prompt check); a bad or stale
  parameter gets the engine's message and the page's default for that field, never an exception.
- `step_link_params(link, defaults)` is the reverse: only settings that differ from the page's
  defaults, plus what replays the run (the example or the prompt, the round, the view, the
  profile, presenter mode when on).

Parameter names: `example` (an example's id) or `prompt` (text), every decode setting by its
`DecodeConfig` name (`selector`, `estimator`, `budget`, `taps_mode`, `temperature`, `seed`, ...),
`round` (1-based; 0 or absent: nothing decoded yet), `view`, `presenter` (1), `profile` and `chat`
(1: the prompt is formatted by the pair's chat template, thinking disabled; `taps.chat`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Mapping

from ..chat import chat_prompt_ids
from ..config import FIELDS, DecodeConfig, check_value, field_spec
from ..record import STAGES

# the tabs of the Step page a link can open; a stage name opens Stage by stage at that stage
TABS = ("tree", "compare", "rounds", "export")
VIEWS = TABS + tuple(STAGES)
DEFAULT_VIEW = "tree"
MAX_PROMPT_CHARS = 8000          # a link's prompt, before the pair's own context check
MAX_ROUND = 10_000
PROFILE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,119}$")
# the settings a link can carry: every DecodeConfig field with a command-line flag
SETTINGS = tuple(f.name for f in fields(DecodeConfig) if f.metadata["flag"])
OTHER_PARAMS = ("example", "prompt", "round", "view", "presenter", "profile", "chat")


def page_defaults(**changes) -> dict:
    """The engine's defaults of every link setting, with a page's own changes (the Step page
    decodes 64 new tokens by default, and its drafter's own block size)."""
    values = {name: field_spec(name)["default"] for name in SETTINGS}
    unknown = set(changes) - set(values)
    if unknown:
        raise ValueError(f"not a decode setting: {', '.join(sorted(unknown))}")
    values.update(changes)
    return values


@dataclass
class StepLink:
    """What a Step-through link describes."""
    settings: dict                      # every setting in SETTINGS
    prompt: str
    example: str | None = None          # the example's id when the prompt is that example's
    round: int = 0                      # 0: no round decoded
    view: str = DEFAULT_VIEW
    presenter: bool = False
    profile: str | None = None
    given: set = field(default_factory=set)   # the parameters the link carried (and kept)
    chat: bool = False                  # the prompt runs formatted by the pair's chat template

    @property
    def stage(self) -> str | None:
        """The stage a stage view opens at, else None."""
        return self.view if self.view in STAGES else None


def _last(value) -> str:
    """A query parameter's value: the last one when it was given several times."""
    if isinstance(value, (list, tuple)):
        value = value[-1] if value else ""
    return str(value)


def _convert(name: str, text: str):
    """A setting's text as the setting's type; a ValueError in the engine's words when it is not."""
    spec = field_spec(name)
    if spec["choices"] is not None:
        return text.strip()
    kind = type(spec["default"]) if spec["default"] is not None else int
    text = text.strip()
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{name} must be a number, got {text!r}") from None
    if not re.fullmatch(r"[+-]?\d{1,12}", text):
        raise ValueError(f"{name} must be a whole number, got {text!r}")
    return int(text)


def _read_settings(params: Mapping, defaults: dict, messages: list[str], given: set) -> dict:
    settings = dict(defaults)
    for name in SETTINGS:
        if name not in params:
            continue
        try:
            value = _convert(name, _last(params[name]))
            check_value(name, value)
        except ValueError as exc:
            messages.append(f"Link parameter {name}: {exc}; using the default ({defaults[name]}).")
            continue
        settings[name] = value
        given.add(name)
    return settings


def _validate_together(settings: dict, defaults: dict, pair, messages: list[str], given: set) -> dict:
    """Settings that pass one by one may still not run together (or on this pair): the engine's
    message, and the link's settings that cause it put back to their defaults."""
    try:
        DecodeConfig(**settings).validate(pair)
        return settings
    except ValueError as exc:
        problem = str(exc)
    chosen = [name for name in SETTINGS if name in given]
    for name in reversed(chosen):                  # the fewest fields back to their defaults
        trial = dict(settings, **{name: defaults[name]})
        try:
            DecodeConfig(**trial).validate(pair)
        except ValueError:
            continue
        messages.append(f"Link settings: {problem}; using the default {name} ({defaults[name]}).")
        given.discard(name)
        return trial
    messages.append(f"Link settings: {problem}; using the page's default settings.")
    given.difference_update(SETTINGS)
    return dict(defaults)


def _read_prompt(params: Mapping, examples: list[dict], pair, messages: list[str], given: set):
    """(prompt, example id or None)."""
    by_id = {e["id"]: e for e in examples}
    default = (examples[0]["prompt"], examples[0]["id"]) if examples else ("", None)
    prompt, example = default
    if "example" in params:
        wanted = _last(params["example"]).strip()
        if wanted in by_id:
            prompt, example = by_id[wanted]["prompt"], wanted
            given.add("example")
        else:
            messages.append(f"Link parameter example: unknown example '{wanted}': choose one of "
                            f"{', '.join(by_id) or 'none (no examples are installed)'}; using the first example.")
    if "prompt" in params:
        text = _last(params["prompt"])
        try:
            if len(text) > MAX_PROMPT_CHARS:
                raise ValueError(f"the prompt is {len(text)} characters, longer than a link carries "
                                 f"({MAX_PROMPT_CHARS}); shorten it")
            if pair is not None:
                pair.encode_prompt(text)
            elif not text.strip():
                raise ValueError("the prompt is empty: type some text to continue")
        except ValueError as exc:
            messages.append(f"Link parameter prompt: {exc}; using "
                            f"{'the example' if 'example' in given else 'the first example'}.")
        else:
            if "example" in given and text != prompt:
                messages.append("The link names both an example and a prompt: using the prompt.")
                given.discard("example")
            prompt = text
            example = next((e["id"] for e in examples if e["prompt"] == text), None)
            given.add("prompt")
    return prompt, example


def _read_others(params: Mapping, messages: list[str], given: set) -> tuple[int, str, bool, str | None]:
    number, view, presenter, profile = 0, DEFAULT_VIEW, False, None
    if "round" in params:
        text = _last(params["round"]).strip()
        if re.fullmatch(r"\d{1,6}", text) and 1 <= int(text) <= MAX_ROUND:
            number = int(text)
            given.add("round")
        else:
            messages.append(f"Link parameter round: round must be a whole number from 1 to {MAX_ROUND}, got "
                            f"{text!r}; opening the run before its first round.")
    if "view" in params:
        text = _last(params["view"]).strip().lower()
        if text in VIEWS:
            view = text
            given.add("view")
        else:
            messages.append(f"Link parameter view: unknown view '{text}': choose one of {', '.join(VIEWS)}; "
                            f"showing the {DEFAULT_VIEW}.")
    if "presenter" in params:
        presenter = _last(params["presenter"]).strip().lower() in ("1", "true", "yes", "on")
        given.add("presenter")
    if "profile" in params:
        text = _last(params["profile"]).strip()
        if PROFILE_ID.match(text):
            profile = text
            given.add("profile")
        else:
            messages.append(f"Link parameter profile: {text!r} is not a profile id; using this browser's profile.")
    return number, view, presenter, profile


def _read_chat(params: Mapping, prompt: str, pair, messages: list[str], given: set) -> bool:
    """Whether the link asks for a chat prompt that this pair can run (its tokenizer has a chat template
    and the formatted prompt fits); else a message, and the prompt as typed."""
    if "chat" not in params:
        return False
    if _last(params["chat"]).strip().lower() not in ("1", "true", "yes", "on"):
        given.add("chat")
        return False
    if pair is not None:
        try:
            pair.encode_prompt(chat_prompt_ids(pair.tokenizer, prompt, name=pair.name))
        except ValueError as exc:
            messages.append(f"Link parameter chat: {exc}; using the prompt as typed.")
            return False
    given.add("chat")
    return True


def parse_step_link(params: Mapping, examples: list[dict], defaults: dict | None = None,
                    pair=None) -> tuple[StepLink, list[str]]:
    """The StepLink that query parameters describe, and a message for each parameter that was
    bad or stale (it gets the page's default). Unknown parameter names are ignored, except that
    a misspelt one is named."""
    defaults = defaults if defaults is not None else page_defaults()
    messages: list[str] = []
    given: set = set()
    prompt, example = _read_prompt(params, examples, pair, messages, given)
    settings = _read_settings(params, defaults, messages, given)
    settings = _validate_together(settings, defaults, pair, messages, given)
    number, view, presenter, profile = _read_others(params, messages, given)
    chat = _read_chat(params, prompt, pair, messages, given)
    unknown = sorted(set(params) - set(SETTINGS) - set(OTHER_PARAMS))
    if unknown:
        messages.append(f"Link parameters not understood (ignored): {', '.join(unknown)}.")
    return StepLink(settings, prompt, example, number, view, presenter, profile, given, chat), messages


def _text(value) -> str:
    if isinstance(value, float):
        return repr(float(value))
    return str(value)


def step_link_params(link: StepLink, defaults: dict | None = None) -> dict[str, str]:
    """Query parameters that replay `link`: the example (or the prompt), the settings that differ
    from `defaults`, the round, the view, presenter mode when on, the profile, chat when on."""
    defaults = defaults if defaults is not None else page_defaults()
    params: dict[str, str] = {}
    if link.example is not None:
        params["example"] = link.example
    else:
        params["prompt"] = link.prompt
    for name in SETTINGS:
        value = link.settings.get(name, defaults[name])
        if value != defaults[name] and value is not None:
            params[name] = _text(value)
    if link.round > 0:
        params["round"] = str(link.round)
    params["view"] = link.view
    if link.presenter:
        params["presenter"] = "1"
    if link.profile:
        params["profile"] = link.profile
    if link.chat:
        params["chat"] = "1"
    return params


def settings_of(config: Mapping) -> dict:
    """The link settings of a run's config dict (a saved run's, or `asdict(DecodeConfig)`)."""
    return {name: config[name] for name in SETTINGS if name in config and name in FIELDS}
