"""Chat prompts (`taps.chat`, `--chat`): a pair whose tokenizer has a chat template (the tiny pair with
a small Qwen3-like template written here, thinking switch included) decodes the template's ids with
thinking disabled, in generate, compare and the bench; the shipped pair, whose tokenizer has no
template, gets one line and a non-zero exit."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

import taps.session
from taps import bench, load_pair
from taps.chat import chat_prompt_ids, chat_prompt_text, has_chat_template, has_thinking_switch
from taps.eval import cli
from taps.eval.bench_rows import fit_prompts
from taps.eval.prompts import chat_format
from taps.reference import greedy_continuation

ROOT = Path(__file__).resolve().parent.parent

# A Qwen3-like template (ours): <|im_start|>role ... <|im_end|> turns; with enable_thinking false the
# assistant's turn opens with an empty think block. The tiny tokenizer reads the markers as text.
QWEN_LIKE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
             "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
             "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
             "{% endif %}")
NO_SWITCH = ("{% for message in messages %}[{{ message['role'] }}] {{ message['content'] }}\n{% endfor %}"
             "{% if add_generation_prompt %}[assistant] {% endif %}")


def with_template(source: Path, folder: Path, template: str | None, name: str = "tiny-chat") -> Path:
    """A copy of the pair folder `source`, named `name`, whose tokenizer_config.json sets `template` as the
    chat template."""
    shutil.copytree(source, folder)
    pair_json = folder / "pair.json"
    pair_json.write_text(json.dumps({**json.loads(pair_json.read_text()), "name": name}))
    config_path = folder / "target" / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = template
    config_path.write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def chat_pair_dir(tiny_pair_dir, tmp_path_factory) -> Path:
    return with_template(tiny_pair_dir, tmp_path_factory.mktemp("chat") / "tiny-chat", QWEN_LIKE)


@pytest.fixture(scope="module")
def chat_tokenizer(chat_pair_dir):
    return AutoTokenizer.from_pretrained(chat_pair_dir / "target")


def template_ids(tokenizer, text: str, **kwargs) -> list[int]:
    """apply_chat_template's own ids for one user message, the assistant's turn opened."""
    return list(tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=True,
                                              add_generation_prompt=True, return_dict=False, **kwargs))


# ---------------------------------------------------------------------------- taps.chat
def test_chat_ids_are_the_templates_with_thinking_disabled(chat_tokenizer):
    assert has_chat_template(chat_tokenizer) and has_thinking_switch(chat_tokenizer)
    ids = chat_prompt_ids(chat_tokenizer, "hi")
    assert ids == template_ids(chat_tokenizer, "hi", enable_thinking=False)
    thinking = chat_prompt_ids(chat_tokenizer, "hi", thinking=True)
    assert thinking == template_ids(chat_tokenizer, "hi", enable_thinking=True) and thinking != ids
    text = chat_prompt_text(chat_tokenizer, "hi")
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert chat_tokenizer.encode(text, add_special_tokens=False) == ids
    assert chat_prompt_text(chat_tokenizer, "hi", thinking=True).endswith("<|im_start|>assistant\n")


def test_a_template_without_the_switch_ignores_it(chat_tokenizer):
    chat_tokenizer = AutoTokenizer.from_pretrained(chat_tokenizer.name_or_path)
    chat_tokenizer.chat_template = NO_SWITCH
    assert has_chat_template(chat_tokenizer) and not has_thinking_switch(chat_tokenizer)
    assert chat_prompt_text(chat_tokenizer, "hi") == "[user] hi\n[assistant] "
    assert chat_prompt_ids(chat_tokenizer, "hi") == chat_prompt_ids(chat_tokenizer, "hi", thinking=True)


def test_chat_failures_are_one_line_messages(chat_tokenizer, tiny_pair):
    assert not has_chat_template(tiny_pair.tokenizer)
    with pytest.raises(ValueError, match="the pair tiny-random's tokenizer has no chat template") as info:
        chat_prompt_ids(tiny_pair.tokenizer, "hi", name="tiny-random")
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="the prompt is empty"):
        chat_prompt_ids(chat_tokenizer, "  ")
    broken = AutoTokenizer.from_pretrained(chat_tokenizer.name_or_path)
    broken.chat_template = "{% for m in messages %}{{ m['content'] | nosuchfilter }}{% endfor %}"
    with pytest.raises(ValueError, match="chat template failed") as info:
        chat_prompt_ids(broken, "hi")
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="no chat template"):
        chat_format([{"id": "a", "prompt": "hi"}], tiny_pair.tokenizer)


# ---------------------------------------------------------------------------- the command line
def test_generate_chat_decodes_the_templated_ids(chat_pair_dir, chat_tokenizer, monkeypatch, capsys):
    sessions = []

    class Recorded(taps.session.DecodeSession):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            sessions.append(self)

    monkeypatch.setattr(taps.session, "DecodeSession", Recorded)
    code = cli.main(["generate", "--pair", str(chat_pair_dir), "--chat", "--prompt", "hi", "--max-new-tokens", "4",
                     "--selector", "ddtree", "--budget", "4", "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0
    expected = template_ids(chat_tokenizer, "hi", enable_thinking=False)
    (session,) = sessions
    assert session.prompt_ids == expected
    assert f"chat prompt ({len(expected)} tokens, thinking disabled)" in out
    pair = load_pair(chat_pair_dir, device="cpu")
    assert session.generated == greedy_continuation(pair, expected, 4)      # lossless on the chat prompt
    assert out.rstrip("\n").endswith(chat_tokenizer.decode(expected + session.generated))


def test_generate_chat_on_the_shipped_pair_is_one_line():
    done = subprocess.run([sys.executable, "-m", "taps", "generate", "--chat", "--prompt", "def f(x):"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "tokenizer has no chat template" in errors[0], done.stderr
    assert "taps-code-10m" in errors[0] and "--chat" in errors[0]


def test_compare_chat_rows_say_so(chat_pair_dir, chat_tokenizer, tmp_path, capsys):
    out = tmp_path / "rows"
    assert cli.main(["compare", "--pair", str(chat_pair_dir), "--chat", "--prompt", "hi", "--max-new-tokens", "3",
                     "--selectors", "ddtree", "--budgets", "4", "--device", "cpu", "--out", str(out)]) == 0
    assert "1 chat prompt(s)" in capsys.readouterr().out
    rows = json.loads((out / "compare.json").read_text())
    assert [r["selector"] for r in rows] == ["ar", "ddtree"] and all(r["chat"] for r in rows)
    assert all(r["lossless"] for r in rows)


# ---------------------------------------------------------------------------- the bench
def test_bench_chat_records_chat_and_refuses_a_plain_resume(chat_pair_dir, chat_tokenizer, tmp_path, capsys):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"id": "a", "prompt": "hi there"}) + "\n")
    out = tmp_path / "out"
    args = ["--pair", str(chat_pair_dir), "--prompts", str(prompts), "--selectors", "ddtree", "--budgets", "4",
            "--max-new-tokens", "3", "--device", "cpu", "--no-plots", "--out", str(out)]
    assert bench.main([*args, "--chat"]) == 0
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    ids = template_ids(chat_tokenizer, "hi there", enable_thinking=False)
    assert len(rows) == 2 and all(r["chat"] is True for r in rows)
    assert all(r["prompt_sha"] == hashlib.sha1(json.dumps(ids).encode()).hexdigest()[:12] for r in rows)
    assert json.loads((out / "bench.json").read_text())["chat"] is True
    assert "chat-formatted (the tokenizer's chat template, thinking disabled)" in (out / "summary.md").read_text()
    capsys.readouterr()
    assert bench.main(args) == 2                                    # the same folder without --chat
    assert "chat True there, False now" in capsys.readouterr().err
    assert bench.main([*args, "--chat"]) == 0                       # resumed: nothing left to run
    assert len((out / "rows.jsonl").read_text().splitlines()) == 2


def test_fit_prompts_with_chat_uses_the_template_ids(chat_pair_dir, chat_tokenizer, tiny_pair):
    pair = load_pair(chat_pair_dir, device="cpu")
    kept, skipped = fit_prompts(pair, [{"id": "a", "prompt": "hi"}, {"id": "b", "prompt": "x" * 300}], 4,
                                chat=True)
    assert [p["id"] for p in kept] == ["a"] and [s["id"] for s in skipped] == ["b"]
    assert kept[0]["prompt"] == template_ids(chat_tokenizer, "hi", enable_thinking=False)
    assert kept[0]["text"] == "hi" and kept[0]["chat"] is True
    plain, _ = fit_prompts(pair, [{"id": "a", "prompt": "hi"}], 4)
    assert plain[0]["prompt"] == "hi" and plain[0]["sha"] != kept[0]["sha"]
    with pytest.raises(ValueError, match="no chat template"):
        fit_prompts(tiny_pair, [{"id": "a", "prompt": "hi"}], 4, chat=True)


def test_a_step_link_carries_chat(chat_pair_dir, tiny_pair):
    from taps.studio.link import StepLink, page_defaults, parse_step_link, step_link_params

    defaults = page_defaults()
    chat_pair = load_pair(chat_pair_dir, device="cpu")
    link, messages = parse_step_link({"prompt": "hi", "chat": "1"}, [], defaults, chat_pair)
    assert link.chat and "chat" in link.given and not messages
    assert step_link_params(link, defaults)["chat"] == "1"
    assert "chat" not in step_link_params(StepLink(dict(defaults), "hi"), defaults)
    link, messages = parse_step_link({"prompt": "hi", "chat": "0"}, [], defaults, chat_pair)
    assert not link.chat and not messages
    link, messages = parse_step_link({"prompt": "hi", "chat": "1"}, [], defaults, tiny_pair)
    assert not link.chat and len(messages) == 1 and "no chat template" in messages[0]
    long = "x" * (chat_pair.max_context - 10)                # fits as typed, not once the template wraps it
    link, messages = parse_step_link({"prompt": long, "chat": "1"}, [], defaults, chat_pair)
    assert link.prompt == long and not link.chat and "longer than the model's context" in messages[0]


# ---------------------------------------------------------------------------- the app (Step through)
def open_step(monkeypatch, pair_dir: Path, **params):
    """The Step page on the pair in `pair_dir`, opened through a link with these parameters."""
    pytest.importorskip("streamlit", reason="the app's packages are not installed (a bare GPU server)")
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("TAPS_PAIR", str(pair_dir))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    for key, value in params.items():
        at.query_params[key] = value
    at.switch_page("app_pages/1_Step_through.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_app_chat_box_is_disabled_with_a_caption_without_a_template(monkeypatch, tiny_pair_dir):
    at = open_step(monkeypatch, tiny_pair_dir, chat="1", selector="ddtree", budget="4")
    box = at.checkbox(key="step_chat")
    assert box.label == "Chat prompt" and box.disabled and box.value is False
    assert any("no chat template" in c.value and "tiny-random" in c.value for c in at.caption)
    assert any("Link parameter chat:" in w.value and "no chat template" in w.value for w in at.warning)
    assert "chat" not in at.query_params


def test_app_chat_prompt_runs_the_templated_ids_and_links_them(monkeypatch, chat_pair_dir, chat_tokenizer):
    at = open_step(monkeypatch, chat_pair_dir, prompt="hi", chat="1", selector="ddtree", budget="4",
                   max_new_tokens="4")
    box = at.checkbox(key="step_chat")
    assert box.value is True and not box.disabled
    at.button(key="step_btn_step").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    session = at.session_state["step_controller"].session
    assert session.prompt_ids == template_ids(chat_tokenizer, "hi", enable_thinking=False)
    assert at.query_params["chat"] == "1" and at.query_params["prompt"] == "hi"    # the link: as typed, chat on
    at.checkbox(key="step_chat").uncheck().run()
    at.button(key="step_btn_step").click().run()
    session = at.session_state["step_controller"].session
    assert session.prompt_ids == chat_tokenizer.encode("hi", add_special_tokens=False)
    assert "chat" not in at.query_params and at.query_params["prompt"] == "hi"
