"""Markdown → the Bot API's HTML (`parse_mode: "HTML"`), for Telegram replies.

HTML, not MarkdownV2: MarkdownV2 rejects a message with any of eighteen characters left
unescaped outside an entity, while HTML needs only `<`, `>` and `&` escaped in text. The
model's Markdown is parsed by a real CommonMark parser (markdown-it-py), and only what it
recognises becomes a tag, from the short list Telegram supports (b, i, s, code, pre, a,
blockquote); everything else is text, escaped. So a stray `_`, `*` or `<` is shown as
written and never makes the API refuse the message. Lists and headings, which Telegram has
no tags for, become bullets and bold lines.
"""

from __future__ import annotations

from html import escape

from markdown_it import MarkdownIt
from markdown_it.token import Token

__all__ = ["telegram_html"]

_PARSER = MarkdownIt("commonmark", {"html": False}).enable("strikethrough")
_INLINE_TAGS = {"strong": "b", "em": "i", "s": "s"}
_LINK_SCHEMES = ("http://", "https://", "tg://", "mailto:")


def telegram_html(markdown: str) -> str:
    """`markdown` as Telegram HTML: the same visible text, formatted where it was Markdown."""
    out: list[str] = []
    lists: list[list[int]] = []  # per open list: [next number] (ordered) or [] (bullets)
    quote_depth = 0
    for token in _PARSER.parse(markdown):
        kind = token.type
        if kind == "inline":
            out.append(_inline(token.children or []))
        elif kind == "heading_open":
            out.append("<b>")
        elif kind == "heading_close":
            out.append("</b>\n\n")
        elif kind == "paragraph_close":
            # A list item's paragraph ends its line; a block's paragraph ends a block.
            out.append("\n" if lists and token.hidden else "\n\n")
        elif kind in ("bullet_list_open", "ordered_list_open"):
            start = token.attrGet("start")
            lists.append([int(start) if isinstance(start, int) else 1] if kind == "ordered_list_open" else [])
        elif kind in ("bullet_list_close", "ordered_list_close"):
            lists.pop()
            if not lists:
                out.append("\n")
        elif kind == "list_item_open":
            indent = "  " * (len(lists) - 1)
            current = lists[-1]
            if current:
                out.append(f"{indent}{current[0]}. ")
                current[0] += 1
            else:
                out.append(f"{indent}• ")
        elif kind in ("fence", "code_block"):
            language = token.info.strip().split(" ")[0] if token.info else ""
            attribute = f' class="language-{escape(language)}"' if language else ""
            out.append(
                f"<pre><code{attribute}>{escape(token.content.rstrip(), quote=False)}</code></pre>\n\n"
            )
        elif kind == "blockquote_open":
            if quote_depth == 0:  # Telegram's blockquotes do not nest
                out.append("<blockquote>")
            quote_depth += 1
        elif kind == "blockquote_close":
            quote_depth -= 1
            if quote_depth == 0:
                out[:] = ["".join(out).rstrip("\n"), "</blockquote>\n\n"]
        elif kind == "hr":
            out.append("———\n\n")
    return "".join(out).strip()


def _inline(children: list[Token]) -> str:
    out: list[str] = []
    links: list[bool] = []  # per open link: whether an <a> was opened (a usable href)
    for token in children:
        kind = token.type
        if kind == "text":
            out.append(escape(token.content, quote=False))
        elif kind in ("softbreak", "hardbreak"):
            out.append("\n")
        elif kind == "code_inline":
            out.append(f"<code>{escape(token.content, quote=False)}</code>")
        elif kind.endswith("_open") and kind[: -len("_open")] in _INLINE_TAGS:
            out.append(f"<{_INLINE_TAGS[kind[: -len('_open')]]}>")
        elif kind.endswith("_close") and kind[: -len("_close")] in _INLINE_TAGS:
            out.append(f"</{_INLINE_TAGS[kind[: -len('_close')]]}>")
        elif kind == "link_open":
            href = str(token.attrGet("href") or "")
            usable = href.lower().startswith(_LINK_SCHEMES)
            links.append(usable)
            if usable:
                out.append(f'<a href="{escape(href, quote=True)}">')
        elif kind == "link_close":
            if links.pop():
                out.append("</a>")
        elif kind == "image":
            alt = token.content or "image"
            source = str(token.attrGet("src") or "")
            out.append(escape(f"{alt} ({source})" if source else alt, quote=False))
        elif token.content:  # anything else the parser knows (raw HTML is off: it is text)
            out.append(escape(token.content, quote=False))
    return "".join(out)
