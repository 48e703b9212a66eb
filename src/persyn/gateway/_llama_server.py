# pyright: basic
# (a shim over llama-cpp-python's untyped dictionaries, run in a child process)
"""Child-process entry point for the `local:` provider: llama.cpp's OpenAI-compatible
server with Persyn's chat formats registered first.

- `persyn-gemma3`: Gemma 3's turn markup, for instruction-tuned Gemma weights (llama-cpp-
  python's built-in "gemma" format does not produce it). Gemma has no system role, so the
  instruction opens the first user turn.
- `persyn-transcript`: for the packaged default, which is the *pretrained* Gemma 3 270M (its
  GGUF names no fine-tune and carries no chat template). A base model does not follow
  instructions or turn markup — given them it echoes its prompt — but it continues a
  document well, so a persona request is rendered as a chat log to be continued: a short
  preface (who the agent is, its disposition, the date), the dialog as "Name: text" lines,
  and the agent's name; generation stops at the end of its line. Requests that are not a
  persona's turn (summaries, extraction) keep the turn markup.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, cast

from llama_cpp.llama_chat_format import ChatFormatterResponse, register_chat_format  # type: ignore[import-untyped]

GEMMA3_FORMAT = "persyn-gemma3"
TRANSCRIPT_FORMAT = "persyn-transcript"
_PERSONA = re.compile(r"^You are (?P<name>[^.\n]{1,64})\.", re.MULTILINE)
_DISPOSITION = re.compile(r"^Your disposition: (?P<text>.+)$", re.MULTILINE)
_NOW = re.compile(r"^It is now (?P<text>.+)$", re.MULTILINE)
_SPEAKER = re.compile(r"^\[(?P<name>[^\]\n]{1,64})\] ?")


def _content(message: dict[str, Any]) -> str:
    content: Any = message.get("content") or ""
    if isinstance(content, list):  # multi-part content: keep the text parts
        parts = cast(list[Any], content)
        content = "".join(str(cast(dict[str, Any], p).get("text", "")) for p in parts if isinstance(p, dict))
    if message.get("role") == "tool":
        content = f"(tool result) {content}"
    return str(content).strip()


def render_gemma3(messages: list[dict[str, Any]]) -> str:
    system = "\n\n".join(_content(m) for m in messages if m.get("role") == "system")
    turns = [m for m in messages if m.get("role") != "system"]
    if not turns:
        turns = [{"role": "user", "content": ""}]
    parts: list[str] = []
    pending_system = system
    for message in turns:
        role = "model" if message.get("role") == "assistant" else "user"
        text = _content(message)
        if role == "user" and pending_system:
            text = f"{pending_system}\n\n{text}".strip()
            pending_system = ""
        parts.append(f"<start_of_turn>{role}\n{text}<end_of_turn>\n")
    return "".join(parts) + "<start_of_turn>model\n"


def render_transcript(messages: list[dict[str, Any]]) -> tuple[str, str | None]:
    """The prompt for a base model, and the agent's name when it is a persona's turn
    (None: not a persona's turn, rendered with `render_gemma3` instead)."""
    system = "\n\n".join(_content(m) for m in messages if m.get("role") == "system")
    persona = _PERSONA.search(system)
    if persona is None:
        return render_gemma3(messages), None
    name = persona.group("name").strip()
    disposition = _DISPOSITION.search(system)
    now = _NOW.search(system)
    lines: list[str] = []
    others: dict[str, None] = {}
    for message in messages:
        role = message.get("role")
        if role == "system":
            continue
        text = " ".join(_content(message).split())
        if not text:
            continue
        if role == "assistant":
            lines.append(f"{name}: {text}")
            continue
        speaker = _SPEAKER.match(text)
        who = speaker.group("name") if speaker else "Someone"
        others.setdefault(who, None)
        lines.append(f"{who}: {text[speaker.end() :] if speaker else text}")
    # "A text conversation" rather than "a chat log": sampled from the packaged model, the
    # latter sometimes drew transcript-style "[inaudible]" lines.
    preface = [f"A text conversation between {name} and {', '.join(others) or 'a friend'}."]
    preface.append(f"{name} writes back in a sentence or two, in the first person.")
    if disposition:
        preface.append(f"{name} is {disposition.group('text').strip().rstrip('.')[:300].lower()}.")
    if now:
        preface.append(f"It is {now.group('text').strip()}")
    return " ".join(preface) + "\n\n" + "\n".join(lines) + f"\n{name}:", name


# Gemma 3's turn markers are special tokens: detokenized for streaming they are empty text,
# so the stop *strings* below never match and the model talks on into the next turn. Stop on
# their token ids too (the same in every Gemma 3 vocabulary; checked against the packaged
# GGUF: <start_of_turn> = 105, <end_of_turn> = 106).
GEMMA3_TURN_TOKENS = frozenset({105, 106})


def _stop_at_turn_marker(tokens: Any, logits: Any) -> bool:
    return len(tokens) > 0 and int(tokens[-1]) in GEMMA3_TURN_TOKENS


@register_chat_format(GEMMA3_FORMAT)  # type: ignore[misc]
def format_gemma3(messages: list[dict[str, Any]], **_: Any) -> Any:
    from llama_cpp import StoppingCriteriaList  # type: ignore[import-untyped]

    return ChatFormatterResponse(
        prompt=render_gemma3(messages),
        stop=["<end_of_turn>", "<start_of_turn>"],
        stopping_criteria=StoppingCriteriaList([_stop_at_turn_marker]),
    )


# Gemma 3's newline tokens ("\n" ... runs of 31 "\n", and "\r\n"), checked against the
# packaged GGUF's vocabulary.
GEMMA3_NEWLINE_TOKENS = frozenset({*range(107, 138), 248})


def _end_of_line() -> Any:
    """Stops at the first newline after some text: the agent's line of the log is done.
    (A stop *string* "\n" would also end a reply that merely starts with a newline, as
    the base model's often do, leaving it empty.)"""
    state: dict[str, int] = {}

    def stop(tokens: Any, logits: Any) -> bool:
        if len(tokens) == 0:
            return False
        state.setdefault("start", len(tokens) - 1)  # first call: the prompt plus one token
        last = int(tokens[-1])
        if last in GEMMA3_TURN_TOKENS:
            return True
        if last not in GEMMA3_NEWLINE_TOKENS:
            return False
        generated = [int(t) for t in tokens[state["start"] : -1]]
        return any(t not in GEMMA3_NEWLINE_TOKENS for t in generated)

    return stop


@register_chat_format(TRANSCRIPT_FORMAT)  # type: ignore[misc]
def format_transcript(messages: list[dict[str, Any]], **_: Any) -> Any:
    from llama_cpp import StoppingCriteriaList  # type: ignore[import-untyped]

    prompt, name = render_transcript(messages)
    if name is None:  # not a persona's turn: Gemma's turn markup and markers
        return ChatFormatterResponse(
            prompt=prompt,
            stop=["<end_of_turn>", "<start_of_turn>"],
            stopping_criteria=StoppingCriteriaList([_stop_at_turn_marker]),
        )
    # One line of the log; a runaway that starts the next speaker's line is cut too.
    return ChatFormatterResponse(
        prompt=prompt,
        stop=["<end_of_turn>", f"\n{name}:"],
        stopping_criteria=StoppingCriteriaList([_end_of_line()]),
    )


def rendered_prompt(chat_format: str | None, messages: list[dict[str, Any]]) -> str:
    if chat_format == TRANSCRIPT_FORMAT:
        return render_transcript(messages)[0]
    return render_gemma3(messages)


def _stream_with_usage(
    llama: Any, chunks: Iterator[dict[str, Any]], messages: list[dict[str, Any]], chat_format: str | None
) -> Iterator[dict[str, Any]]:
    """Pass chunks through, then report usage in a final chunk, as OpenAI does with
    `stream_options.include_usage` (llama-cpp-python's server reports none on streams, so
    metering would see zero tokens).

    Prompt tokens are counted exactly as the chat handler tokenizes the rendered prompt;
    completion tokens by tokenizing the generated text.
    """
    text: list[str] = []
    last: dict[str, Any] | None = None
    for chunk in chunks:
        last = chunk
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                text.append(str(delta["content"]))
        yield chunk
    if last is None:
        return
    prompt = rendered_prompt(chat_format, messages).encode("utf-8")
    prompt_tokens = len(llama.tokenize(prompt, add_bos=True, special=True))
    generated = "".join(text).encode("utf-8")
    completion_tokens = len(llama.tokenize(generated, add_bos=False, special=False)) if generated else 0
    yield {
        "id": last.get("id"),
        "object": "chat.completion.chunk",
        "created": last.get("created"),
        "model": last.get("model"),
        "choices": [],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _install_stream_usage() -> None:
    import llama_cpp  # type: ignore[import-untyped]

    original = llama_cpp.Llama.create_chat_completion

    def create_chat_completion(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        chat_format = getattr(self, "chat_format", None)
        if not kwargs.get("stream") or chat_format not in (GEMMA3_FORMAT, TRANSCRIPT_FORMAT):
            return result
        messages = kwargs.get("messages") or (args[0] if args else [])
        return _stream_with_usage(self, cast(Iterator[dict[str, Any]], result), list(messages), chat_format)

    llama_cpp.Llama.create_chat_completion = create_chat_completion


if __name__ == "__main__":
    from llama_cpp.server.__main__ import main  # type: ignore[import-untyped]

    _install_stream_usage()
    main()
