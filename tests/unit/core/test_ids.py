from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from persyn.core.errors import InputError
from persyn.core.ids import derived_id, id_time, is_id, new_id, parse_id


def test_new_ids_sort_by_creation_time() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    ids = [new_id(start + timedelta(milliseconds=i * 7)) for i in range(200)]
    assert ids == sorted(ids)
    assert id_time(ids[0]) == start


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "hello",
        "01J9Z3K4W5X6Y7Z8A9B0C1D2E",
        "01J9Z3K4W5X6Y7Z8A9B0C1D2E3X",
        "01J9Z3K4W5X6Y7Z8A9B0C1D2EU",
        "81J9Z3K4W5X6Y7Z8A9B0C1D2E3",
        "../../etc/passwd",
        None,
        42,
        "01J9Z3K4W5X6Y7Z8A9B0C1D2E3 ",
    ],
)
def test_parse_id_rejects_anything_but_a_ulid(bad: object) -> None:
    with pytest.raises(InputError, match="invalid conversation id"):
        parse_id(bad, what="conversation id")


def test_parse_id_canonicalises_case() -> None:
    value = new_id()
    assert parse_id(value.lower()) == value


@given(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)))
def test_generated_ids_are_valid_and_keep_their_time(at: datetime) -> None:
    value = new_id(at)
    assert is_id(value)
    # To the millisecond. python-ulid takes the milliseconds of a float product, which for a
    # time on an exact millisecond can come out one short (Hypothesis found one); its ids stay
    # monotonic within a millisecond, which the store's orderings rely on, so that is kept.
    assert abs((id_time(value) - at).total_seconds()) <= 0.001


@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20))
def test_derived_ids_are_stable_and_distinct(a: str, b: str) -> None:
    at = datetime(2026, 5, 1, tzinfo=UTC)
    assert derived_id(at, a, b) == derived_id(at, a, b)
    assert is_id(derived_id(at, a, b))
    if (a, b) != (b, a):
        assert derived_id(at, a, b) != derived_id(at, b, a) or a == b
