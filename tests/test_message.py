"""Message-level helpers: the Java string hash, scalar and vectorised, and the property codec."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mqlite.message import decode_properties, encode_properties, java_string_hash, java_string_hashes


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(min_size=0, max_size=60),
                          st.text(alphabet="0123456789ABCDEF", min_size=32, max_size=32),
                          st.from_regex(r"[a-z]{3,8}#[0-9A-F]{32}", fullmatch=True)), max_size=60))
def test_vectorised_hash_equals_the_scalar_one(texts: list[str]) -> None:
    assert java_string_hashes(texts) == [java_string_hash(t) for t in texts]


def test_hash_vectors_from_the_reference() -> None:
    texts = ["TAG1", "TagA", "tagA", "abc", "*", "schedule_tag", "TopicTest#KEY1"] * 3
    assert java_string_hashes(texts)[:7] == [2567159, 2598919, 3552231, 96354, 42, 1162501618, -1656969516]


@given(st.dictionaries(st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                               min_size=1, max_size=10),
                       st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                               min_size=1, max_size=10), max_size=8))
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert decode_properties(encode_properties(props)) == props
