# pyright: basic
# (a shim over llama-cpp-python's untyped dictionaries, run in a child process)
"""Child-process entry point for the `local:` provider: llama.cpp's OpenAI-compatible
server with a correct Gemma 3 chat format registered first.

The packaged GGUF carries no chat template and llama-cpp-python's built-in "gemma" format
does not produce Gemma 3's turn markup (the model then echoes its prompt), so the turns
are rendered here: Gemma has no system role, so the instruction opens the first user turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from llama_cpp.llama_chat_format import ChatFormatterResponse, register_chat_format  # type: ignore[import-untyped]

GEMMA3_FORMAT = "persyn-gemma3"


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


def _stream_with_usage(
    llama: Any, chunks: Iterator[dict[str, Any]], messages: list[dict[str, Any]]
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
    prompt = render_gemma3(messages).encode("utf-8")
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
        if not kwargs.get("stream") or getattr(self, "chat_format", None) != GEMMA3_FORMAT:
            return result
        messages = kwargs.get("messages") or (args[0] if args else [])
        return _stream_with_usage(self, cast(Iterator[dict[str, Any]], result), list(messages))

    llama_cpp.Llama.create_chat_completion = create_chat_completion


if __name__ == "__main__":
    from llama_cpp.server.__main__ import main  # type: ignore[import-untyped]

    _install_stream_usage()
    main()
