"""Cost is derived from the operator's price table (per million tokens)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from persyn.core.config import Price
from persyn.usage.pricing import cost_usd, price_for


def test_cost_splits_cached_from_uncached_input() -> None:
    price = Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    cost = cost_usd(
        price, input_tokens=10_000, output_tokens=1_000, cache_read_tokens=6_000, cache_write_tokens=2_000
    )
    assert cost == pytest.approx((2_000 * 3.0 + 6_000 * 0.3 + 2_000 * 3.75 + 1_000 * 15.0) / 1e6)


def test_cache_tokens_fall_back_to_the_input_price() -> None:
    price = Price(input=2.0, output=4.0)
    assert cost_usd(
        price, input_tokens=1_000_000, output_tokens=0, cache_read_tokens=500_000
    ) == pytest.approx(2.0)


def test_unpriced_is_none() -> None:
    assert cost_usd(None, input_tokens=10, output_tokens=10) is None


def test_price_lookup_tries_each_model_string_in_order() -> None:
    prices = {"anthropic:claude-haiku-4-5": Price(input=1, output=5), "auto": Price(input=9, output=9)}
    assert price_for(prices, "anthropic:claude-haiku-4-5", "auto") == Price(input=1, output=5)
    assert price_for(prices, "openai:x", "auto") == Price(input=9, output=9)
    assert price_for(prices, "openai:x") is None


@given(
    input_tokens=st.integers(0, 10**7),
    output_tokens=st.integers(0, 10**6),
    cached_share=st.floats(0, 1),
)
def test_cache_reads_never_cost_more_than_uncached_input(
    input_tokens: int, output_tokens: int, cached_share: float
) -> None:
    price = Price(input=3.0, output=15.0, cache_read=0.3)
    cached = int(input_tokens * cached_share)
    with_cache = cost_usd(
        price, input_tokens=input_tokens, output_tokens=output_tokens, cache_read_tokens=cached
    )
    without = cost_usd(price, input_tokens=input_tokens, output_tokens=output_tokens)
    assert with_cache is not None
    assert without is not None
    assert 0 <= with_cache <= without + 1e-9
