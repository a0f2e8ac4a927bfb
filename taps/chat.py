"""Chat prompts: a user's text as the tokenizer's chat template formats it, thinking disabled.

Public DFlash drafters are trained on chat-formatted prompts with thinking disabled, so their
acceptance (and the speed-ups published for them) is only reached on prompts formatted the same
way. A chat prompt here is one user message, rendered by the tokenizer's own chat template with
the generation prompt added (the assistant's turn opens) and `enable_thinking` passed to the
template: Qwen3's template then emits an empty `<think></think>` block; a template without that
switch ignores the variable.

- `has_chat_template(tokenizer)`: whether it has a template at all.
- `chat_prompt_ids(tokenizer, text, thinking=False)`: the token ids the target reads.
- `chat_prompt_text(tokenizer, text, thinking=False)`: the rendered text, for places that carry a
  prompt as text (the app): its plain encoding is checked to give exactly `chat_prompt_ids`.
- `has_thinking_switch(tokenizer)`: whether the template reads `enable_thinking`.

Every failure (no template, an empty prompt, a template that fails to render) is a ValueError
with a one-line message.
"""

from __future__ import annotations

THINKING_VARIABLE = "enable_thinking"


def no_template_message(name: str | None = None) -> str:
    """One line: this pair's tokenizer has no chat template, and what to do."""
    who = f"the pair {name}'s tokenizer" if name else "the pair's tokenizer"
    return (f"{who} has no chat template, so prompts cannot be chat-formatted: leave chat formatting off "
            "(--chat on the command line, Chat prompt in the app), or load a pair whose tokenizer has one "
            "(a chat model such as Qwen3)")


def _templates(tokenizer) -> list[str]:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):            # named templates ("default", "tool_use", ...)
        return [t for t in template.values() if isinstance(t, str) and t.strip()]
    return [template] if isinstance(template, str) and template.strip() else []


def has_chat_template(tokenizer) -> bool:
    """Whether the tokenizer carries a chat template."""
    return bool(_templates(tokenizer))


def has_thinking_switch(tokenizer) -> bool:
    """Whether the chat template reads `enable_thinking` (Qwen3's does)."""
    return any(THINKING_VARIABLE in t for t in _templates(tokenizer))


def _render(tokenizer, text: str, thinking: bool, tokenize: bool, name: str | None):
    if not has_chat_template(tokenizer):
        raise ValueError(no_template_message(name))
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the prompt is empty: type some text to continue")
    messages = [{"role": "user", "content": text}]
    try:
        out = tokenizer.apply_chat_template(messages, tokenize=tokenize, add_generation_prompt=True,
                                            return_dict=False, **{THINKING_VARIABLE: bool(thinking)})
    except Exception as exc:  # noqa: BLE001 - a template is user data: any failure is a message
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"the tokenizer's chat template failed to format the prompt: {first}") from None
    if tokenize:
        ids = out.tolist() if hasattr(out, "tolist") else out
        if ids and isinstance(ids[0], list):       # a batch of one
            ids = ids[0]
        return [int(t) for t in ids]
    return str(out)


def chat_prompt_ids(tokenizer, text: str, thinking: bool = False, name: str | None = None) -> list[int]:
    """The ids of `text` as one user message under the tokenizer's chat template, the assistant's turn
    opened, thinking disabled unless `thinking`. ValueError (one line) when the tokenizer has no
    template (`name`: the pair's, for the message), the text is empty or the template fails."""
    return _render(tokenizer, text, thinking, True, name)


def chat_prompt_text(tokenizer, text: str, thinking: bool = False, name: str | None = None) -> str:
    """The rendered chat prompt as text, whose plain encoding (no added special tokens) is exactly
    `chat_prompt_ids`; a ValueError when it would not be (the text holds the template's control
    tokens in a way the template's own tokenization treats differently)."""
    rendered = _render(tokenizer, text, thinking, False, name)
    ids = _render(tokenizer, text, thinking, True, name)
    if tokenizer.encode(rendered, add_special_tokens=False) != ids:
        raise ValueError("the chat-formatted prompt does not read back as the same tokens (does the prompt hold "
                         "the template's control tokens?); remove them or run without chat formatting")
    return rendered
