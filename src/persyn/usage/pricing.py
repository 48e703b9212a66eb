"""Cost of a model call from the operator's price table (SPEC App. C: cost is derived).

Token counts follow pydantic-ai's convention: `input_tokens` is the whole prompt and *includes*
the cache-read and cache-write tokens, which are reported again separately. So the uncached
part of the prompt is `input - cache_read - cache_write`, priced at the input price; cache
reads and writes use their own prices when the table gives them, else the input price.
"""

from __future__ import annotations

from collections.abc import Mapping

from persyn.core.config import Price

__all__ = ["audio_cost_usd", "cost_usd", "price_for"]

_PER = 1_000_000  # prices are US dollars per million tokens


def price_for(prices: Mapping[str, Price], *model_strings: str) -> Price | None:
    """The first price found under any of `model_strings` (e.g. resolved, then as configured)."""
    for model in model_strings:
        price = prices.get(model)
        if price is not None:
            return price
    return None


def cost_usd(
    price: Price | None,
    *,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    tool_requests: Mapping[str, int] | None = None,
) -> float | None:
    """Dollars for one call, or None when the model is unpriced (counted, not costed).
    Provider-tool requests add their `per_request` price; a tool without one adds nothing
    (its requests stay counted on the record)."""
    if price is None:
        return None
    uncached = max(0, input_tokens - cache_read_tokens - cache_write_tokens)
    read_price = price.input if price.cache_read is None else price.cache_read
    write_price = price.input if price.cache_write is None else price.cache_write
    dollars = (
        uncached * price.input
        + cache_read_tokens * read_price
        + cache_write_tokens * write_price
        + output_tokens * price.output
    ) / _PER
    for tool, count in (tool_requests or {}).items():
        dollars += count * price.per_request.get(tool, 0.0)
    # Float noise (0.30000000000000004) would otherwise leak into the ledger.
    return round(dollars, 10)


def audio_cost_usd(price: Price | None, seconds: float) -> float | None:
    """Dollars for transcribing `seconds` of audio, or None when the model has no
    `per_audio_minute` price (counted in seconds, not costed)."""
    if price is None or price.per_audio_minute is None:
        return None
    return round(seconds / 60 * price.per_audio_minute, 10)
