"""Every page's address (plain Python, no streamlit): the one parser core and the one writer of the
app's links, so that a copied link opens the same page, settings, round and view in any browser.

One set of conventions on every page:
- a parameter given several times counts by its last value; a name no page knows is named in a
  message;
- a decode setting is read as its `DecodeConfig` field says (`field_spec`: whole numbers as digits
  only, numbers, choices) and checked by the engine's own `check_value`; settings that pass one by
  one but cannot run together (or on this pair) get `DecodeConfig.validate`'s message;
- an example's id or a prompt's text names the prompt; when a link gives both and they differ, the
  prompt wins; a prompt longer than MAX_PROMPT_CHARS is neither read from a link nor written into
  one (the run's JSON export carries it: `fits`, `too_long`);
- a bad or stale parameter never raises: it gets the page's default and one message, "Link
  parameter NAME: what is wrong; using what instead." (`LinkReader.refuse`).

Pages: Step through (`parse_step_link`, `step_link_params`), Race and sweep (`parse_race_link`,
`race_link_params`), Learn (`parse_learn_link`, `learn_link_params`); `presenter_of` reads the one
parameter every page's link may carry (`presenter=1`); `link_url` writes a challenge card's address.

Step through's parameters: `example` (an example's id) or `prompt` (text), every decode setting by
its `DecodeConfig` name (`selector`, `estimator`, `budget`, `taps_mode`, `temperature`, `seed`, ...),
`round` (1-based; 0 or absent: nothing decoded yet), `view`, `compare` (the budget Marginal vs path
ranks at), `presenter` (1), `profile` and `chat` (1: the prompt is formatted by the pair's chat
template, thinking disabled; `taps.chat`). Race and sweep's: the prompt, `budget`, `estimator`,
`temperature`, `clock`, `batch` (requests decoded together) and `profile`. Learn's: `preset`,
`factor`, `budget` and `reject`.
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass, field, fields
from typing import Iterable, Mapping
from urllib.parse import quote, urlencode

from ..chat import chat_prompt_ids
from ..config import FIELDS, MAX_BUDGET, DecodeConfig, check_value, field_spec
from ..record import STAGES
from . import toy

# the tabs of the Step page a link can open; a stage name opens Stage by stage at that stage
TABS = ("tree", "compare", "candidates", "rounds", "export")
VIEWS = TABS + tuple(STAGES)
DEFAULT_VIEW = "tree"
MAX_PROMPT_CHARS = 8000          # a link's prompt, before the pair's own context check
MAX_ROUND = 10_000
PROFILE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,119}$")
WHOLE = re.compile(r"[+-]?\d{1,12}")
YES = ("1", "true", "yes", "on")
# the settings a link can carry: every DecodeConfig field with a command-line flag
SETTINGS = tuple(f.name for f in fields(DecodeConfig) if f.metadata["flag"])
STEP_PARAMS = ("example", "prompt", "round", "view", "compare", "presenter", "profile", "chat")
CLOCKS = ("modelled", "measured")           # the race's clocks (`taps.studio.race` prices rounds on them)
RACE_SETTINGS = ("budget", "estimator", "temperature")
RACE_BATCHES = (1, 2, 4, 8)                 # requests in a race's batch (the others: example prompts)
RACE_PARAMS = ("example", "prompt", *RACE_SETTINGS, "clock", "batch", "profile", "presenter")
LEARN_PARAMS = ("preset", "factor", "budget", "reject")


# ---------------------------------------------------------------------------- the parser core
def last(value) -> str:
    """A query parameter's value: the last one when it was given several times."""
    if isinstance(value, (list, tuple)):
        value = value[-1] if value else ""
    return str(value)


def setting_value(name: str, text: str):
    """A decode setting's text as the setting's type; a ValueError in the engine's words when it is not."""
    spec = field_spec(name)
    text = text.strip()
    if spec["choices"] is not None:
        return text
    kind = type(spec["default"]) if spec["default"] is not None else int
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{name} must be a number, got {text!r}") from None
    if not WHOLE.fullmatch(text):
        raise ValueError(f"{name} must be a whole number, got {text!r}")
    return int(text)


def fits(prompt: str) -> bool:
    """Whether a link can carry this prompt."""
    return len(prompt) <= MAX_PROMPT_CHARS


def too_long(prompt: str) -> str:
    """Why a link cannot carry this prompt."""
    return f"the prompt is {len(prompt)} characters, longer than a link carries ({MAX_PROMPT_CHARS})"


def presenter_of(params: Mapping) -> bool | None:
    """Presenter mode as a link asks for it (`presenter=1`), None when the link does not say."""
    return last(params["presenter"]).strip().lower() in YES if "presenter" in params else None


class LinkReader:
    """One link's parameters, read one by one: each read takes the last value of a repeated
    parameter and checks it; a bad value adds one message and gives the caller's default.
    `given` names the parameters that were read and kept."""

    def __init__(self, params: Mapping):
        self.params = params
        self.messages: list[str] = []
        self.given: set[str] = set()

    def text(self, name: str) -> str | None:
        return last(self.params[name]) if name in self.params else None

    def refuse(self, name: str, problem: str, instead: str) -> None:
        self.messages.append(f"Link parameter {name}: {problem}; {instead}.")

    def keep(self, name: str, value):
        self.given.add(name)
        return value

    def setting(self, name: str, default):
        """The decode setting `name` (DecodeConfig's field), or `default` with the engine's message."""
        text = self.text(name)
        if text is None:
            return default
        try:
            value = setting_value(name, text)
            check_value(name, value)
        except ValueError as exc:
            self.refuse(name, str(exc), f"using the default ({default})")
            return default
        return self.keep(name, value)

    def whole(self, name: str, lo: int, hi: int, default: int, what: str, instead: str) -> int:
        """A whole number from `lo` to `hi`; `what` names it in the message."""
        text = self.text(name)
        if text is None:
            return default
        text = text.strip()
        if not WHOLE.fullmatch(text) or not lo <= int(text) <= hi:
            self.refuse(name, f"{what} must be a whole number from {lo} to {hi}, got {text!r}", instead)
            return default
        return self.keep(name, int(text))

    def choice(self, name: str, choices: Iterable[str], default: str, what: str, instead: str) -> str:
        text = self.text(name)
        if text is None:
            return default
        text, choices = text.strip(), list(choices)
        if text not in choices:
            self.refuse(name, f"unknown {what} '{text}': choose one of {', '.join(choices)}", instead)
            return default
        return self.keep(name, text)

    def flag(self, name: str) -> bool:
        text = self.text(name)
        return bool(text is not None and self.keep(name, text.strip().lower() in YES))

    def profile(self) -> str | None:
        """A latency profile's id (`taps.studio.page_profile` says whether it applies to the pair)."""
        text = self.text("profile")
        if text is None:
            return None
        text = text.strip()
        if not PROFILE_ID.match(text):
            self.refuse("profile", f"{text[:60]!r} is not a profile id (letters, digits, . _ @ + -)",
                        "using this browser's profile")
            return None
        return self.keep("profile", text)

    def prompt(self, examples: list[dict], pair=None) -> tuple[str, str | None]:
        """(prompt, example id or None): the example a link names, or its prompt (which wins when
        both are given and differ), else the first example."""
        by_id = {e["id"]: e for e in examples}
        prompt, example = (examples[0]["prompt"], examples[0]["id"]) if examples else ("", None)
        wanted = self.text("example")
        if wanted is not None:
            wanted = wanted.strip()
            if wanted in by_id:
                prompt, example = self.keep("example", (by_id[wanted]["prompt"], wanted))
            else:
                self.refuse("example", f"unknown example '{wanted}': choose one of "
                            f"{', '.join(by_id) or 'none (no examples are installed)'}", "using the first example")
        text = self.text("prompt")
        if text is None:
            return prompt, example
        try:
            if not fits(text):
                raise ValueError(f"{too_long(text)}; shorten it")
            if pair is not None:
                pair.encode_prompt(text)
            elif not text.strip():
                raise ValueError("the prompt is empty: type some text to continue")
        except ValueError as exc:
            fallback = "the example" if "example" in self.given else "the first example"
            self.refuse("prompt", str(exc), f"using {fallback}")
            return prompt, example
        if "example" in self.given and text != prompt:
            self.refuse("prompt", "the link names both an example and a prompt", "using the prompt")
            self.given.discard("example")
        self.keep("prompt", text)
        return text, next((e["id"] for e in examples if e["prompt"] == text), None)

    def unknown(self, known: Iterable[str]) -> None:
        names = sorted(set(self.params) - set(known))
        if names:
            self.messages.append(f"Link parameters not understood (ignored): {', '.join(names)}.")


# ---------------------------------------------------------------------------- the writer
def param_text(value) -> str:
    """A value as every link writes it: whole numbers as digits, other numbers in the shortest form
    that reads back as the same float ("0.7", "0" for 0.0), flags as 1 or 0, text as it is."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        text = repr(float(value))
        return text[:-2] if text.endswith(".0") else text
    return str(value)


def prompt_params(prompt: str, example: str | None = None) -> dict[str, str]:
    """The parameter that names a prompt: its example's id, else its text when a link can carry it,
    else none (`fits`)."""
    if example is not None:
        return {"example": example}
    return {"prompt": prompt} if fits(prompt) else {}


def example_of(prompt: str, examples: Iterable[dict]) -> str | None:
    """The id of the example whose prompt this is, or None."""
    return next((e["id"] for e in examples if e["prompt"] == prompt), None)


def link_url(page: str, params: Mapping[str, str]) -> str:
    """A page's address with its parameters: `/Step_through?example=merge&selector=ddtree&...`."""
    return f"/{page}?{urlencode(dict(params), quote_via=quote)}"


# ---------------------------------------------------------------------------- Step through
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
    compare: int = 0                    # the budget Marginal vs path ranks at (0: the round's verified nodes)

    @property
    def stage(self) -> str | None:
        """The stage a stage view opens at, else None."""
        return self.view if self.view in STAGES else None


def _read_settings(reader: LinkReader, defaults: dict, pair) -> dict:
    """Every setting, the link's where good; settings that pass one by one but do not run together
    (or on this pair) get the engine's message and the fewest of them back to their defaults."""
    settings = {name: reader.setting(name, defaults[name]) for name in SETTINGS}
    try:
        DecodeConfig(**settings).validate(pair)
        return settings
    except ValueError as exc:
        problem = str(exc)
    chosen = [name for name in SETTINGS if name in reader.given]
    for name in reversed(chosen):
        trial = dict(settings, **{name: defaults[name]})
        try:
            DecodeConfig(**trial).validate(pair)
        except ValueError:
            continue
        reader.messages.append(f"Link settings: {problem}; using the default {name} ({defaults[name]}).")
        reader.given.discard(name)
        return trial
    reader.messages.append(f"Link settings: {problem}; using the page's default settings.")
    reader.given.difference_update(SETTINGS)
    return dict(defaults)


def _read_chat(reader: LinkReader, prompt: str, pair) -> bool:
    """Whether the link asks for a chat prompt that this pair can run (its tokenizer has a chat template
    and the formatted prompt fits); else a message, and the prompt as typed."""
    if not reader.flag("chat"):
        return False
    if pair is not None:
        try:
            pair.encode_prompt(chat_prompt_ids(pair.tokenizer, prompt, name=pair.name))
        except ValueError as exc:
            reader.given.discard("chat")
            reader.refuse("chat", str(exc), "using the prompt as typed")
            return False
    return True


def parse_step_link(params: Mapping, examples: list[dict], defaults: dict | None = None,
                    pair=None) -> tuple[StepLink, list[str]]:
    """The StepLink that query parameters describe, and a message for each parameter that was
    bad or stale (it gets the page's default). Unknown parameter names are ignored, except that
    a misspelt one is named."""
    defaults = defaults if defaults is not None else page_defaults()
    reader = LinkReader(params)
    prompt, example = reader.prompt(examples, pair)
    settings = _read_settings(reader, defaults, pair)
    number = reader.whole("round", 1, MAX_ROUND, 0, "round", "opening the run before its first round")
    view = _read_view(reader)
    compare = reader.whole("compare", 1, MAX_BUDGET, 0, "compare", "comparing at the round's verified nodes")
    presenter = reader.flag("presenter")
    profile = reader.profile()
    chat = _read_chat(reader, prompt, pair)
    reader.unknown((*SETTINGS, *STEP_PARAMS))
    link = StepLink(settings, prompt, example, number, view, presenter, profile, reader.given, chat, compare)
    return link, reader.messages


def _read_view(reader: LinkReader) -> str:
    text = reader.text("view")
    if text is None:
        return DEFAULT_VIEW
    lowered = text.strip().lower()
    if lowered not in VIEWS:
        reader.refuse("view", f"unknown view '{lowered}': choose one of {', '.join(VIEWS)}",
                      f"showing the {DEFAULT_VIEW}")
        return DEFAULT_VIEW
    return reader.keep("view", lowered)


def step_link_params(link: StepLink, defaults: dict | None = None, named: Iterable[str] = ()) -> dict[str, str]:
    """Query parameters that replay `link`: the example (or the prompt), the settings that differ
    from `defaults` (and those in `named`, written even at their default), the round, the view,
    the compare budget, presenter mode when on, the profile, chat when on. A prompt longer than a
    link carries is left out, and the round with it (it would replay another run)."""
    defaults = defaults if defaults is not None else page_defaults()
    params = prompt_params(link.prompt, link.example)
    replays = bool(params)                          # the link names its prompt
    named = set(named)
    for name in SETTINGS:
        value = link.settings.get(name, defaults[name])
        if value is not None and (value != defaults[name] or name in named):
            params[name] = param_text(value)
    if link.round > 0 and replays:
        params["round"] = param_text(link.round)
    params["view"] = link.view
    if link.compare > 0:
        params["compare"] = param_text(link.compare)
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


# ---------------------------------------------------------------------------- Race and sweep
@dataclass
class RaceLink:
    """What a race link describes: the prompt and the race's settings."""
    prompt: str
    example: str | None = None
    budget: int = field_spec("budget")["default"]
    estimator: str = field_spec("estimator")["default"]
    temperature: float = field_spec("temperature")["default"]
    clock: str = CLOCKS[0]
    profile: str | None = None
    presenter: bool = False
    batch: int = 1
    given: set = field(default_factory=set)


def parse_race_link(params: Mapping, examples: list[dict], pair=None) -> tuple[RaceLink, list[str]]:
    """The RaceLink that query parameters describe, and a message per bad or stale parameter (which
    gets the default)."""
    reader = LinkReader(params)
    prompt, example = reader.prompt(examples, pair)
    defaults = page_defaults()
    settings = {name: reader.setting(name, defaults[name]) for name in RACE_SETTINGS}
    clock = reader.choice("clock", CLOCKS, CLOCKS[0], "clock", f"using the {CLOCKS[0]} clock")
    batch = int(reader.choice("batch", [str(b) for b in RACE_BATCHES], "1", "number of requests in a batch",
                              "using 1 (one request)"))
    profile = reader.profile()
    presenter = reader.flag("presenter")
    reader.unknown(RACE_PARAMS)
    return RaceLink(prompt, example, clock=clock, profile=profile, presenter=presenter, batch=batch,
                    given=reader.given, **settings), reader.messages


def race_link_params(link: RaceLink) -> dict[str, str]:
    """The query parameters of a race link: the prompt (its example's id when it is one), budget,
    estimator, temperature, clock, the batch when above one, the profile when named and presenter
    mode when on."""
    params = prompt_params(link.prompt, link.example)
    params.update({name: param_text(getattr(link, name)) for name in RACE_SETTINGS}, clock=link.clock)
    if link.batch > 1:
        params["batch"] = str(link.batch)
    if link.profile:
        params["profile"] = link.profile
    if link.presenter:
        params["presenter"] = "1"
    return params


# ---------------------------------------------------------------------------- Learn
def _read_factor(reader: LinkReader, default: float) -> float:
    text = reader.text("factor")
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        reader.refuse("factor", f"{text!r} is not a number", f"using {default:g}")
        return default
    if not 0.0 <= value <= 1.0:                       # NaN fails this too
        reader.refuse("factor", f"the off-mode factor must be between 0 and 1, got {text}", f"using {default:g}")
        return default
    snapped = round(round(value / toy.FACTOR_STEP) * toy.FACTOR_STEP, 2)
    if abs(snapped - value) > 1e-9:
        reader.refuse("factor", f"the slider moves in steps of {toy.FACTOR_STEP:g} and {text} is none of them",
                      f"using {snapped:g}")
    return reader.keep("factor", snapped)


def is_learn_link(params: Mapping) -> bool:
    """Whether an address is a Learn link: one of its parameters, and no other page's unless it names
    a preset (a race link's budget left in the address is not a Learn budget)."""
    if not any(name in params for name in LEARN_PARAMS):
        return False
    return "preset" in params or not set(params) - set(LEARN_PARAMS) - {"presenter"}


def parse_learn_link(params: Mapping) -> tuple[toy.LearnState, list[str]]:
    """The LearnState query parameters describe, and a message for each bad one (which gets the
    page's default: the first preset, its own factor, budget 8, nothing rejected)."""
    reader = LinkReader(params)
    name = next(iter(toy.PRESETS))
    text = reader.text("preset")
    if text is not None:
        found = toy.find_preset(text)
        if found is None:
            reader.refuse("preset", f"unknown preset {text!r}: choose one of {', '.join(toy.PRESETS)}",
                          f"using {name!r}")
        else:
            name = reader.keep("preset", found)
    state = toy.LearnState(name, _read_factor(reader, toy.PRESETS[name].off_mode_factor), toy.DEFAULT_BUDGET)
    tree = state.tree()
    top = toy.budget_limit(tree)
    state.budget = reader.whole("budget", 1, top, min(toy.DEFAULT_BUDGET, top), "the budget",
                                f"using {min(toy.DEFAULT_BUDGET, top)}")
    text = reader.text("reject")
    if text and text.strip():
        if toy.node_by_path(tree, text) is None:
            reader.refuse("reject", f"{text!r} is not a node of depth 1 or 2 in {name!r}", "supposing nothing rejected")
        else:
            state.reject = reader.keep("reject", " ".join(text.split()))
    return state, reader.messages


def learn_link_params(state: toy.LearnState, presenter: bool = False) -> dict[str, str]:
    """The query parameters of a Learn link (the reverse of `parse_learn_link`)."""
    params = {"preset": state.preset, "factor": param_text(state.factor), "budget": param_text(state.budget)}
    if state.reject:
        params["reject"] = state.reject
    if presenter:
        params["presenter"] = "1"
    return params
