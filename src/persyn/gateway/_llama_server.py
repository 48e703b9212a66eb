"""Child-process entry point for the `local:` provider: llama.cpp's OpenAI-compatible
server with a correct Gemma 3 chat format registered first.

The packaged GGUF carries no chat template and llama-cpp-python's built-in "gemma" format
does not produce Gemma 3's turn markup (the model then echoes its prompt), so the turns
are rendered here: Gemma has no system role, so the instruction opens the first user turn.
"""

from __future__ import annotations

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


@register_chat_format(GEMMA3_FORMAT)  # type: ignore[misc]
def format_gemma3(messages: list[dict[str, Any]], **_: Any) -> Any:
    return ChatFormatterResponse(prompt=render_gemma3(messages), stop=["<end_of_turn>", "<start_of_turn>"])


if __name__ == "__main__":
    from llama_cpp.server.__main__ import main  # type: ignore[import-untyped]

    main()
