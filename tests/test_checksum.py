"""The hash of variable-size values (strings, binary, text lines) that ``verify`` sums: what it depends on, and what not."""

from __future__ import annotations

import tracemalloc
from itertools import pairwise

import numpy as np
import pyarrow as pa
from hypothesis import assume, given, strategies as st

import daskshuffle as ds
from daskshuffle.shuffle import _checksum

_M = 2**64 - 1

values = st.lists(st.binary(max_size=70), max_size=40)
#: Values of any of the hash's regimes: a few words, tens of words, and past ``piece`` (2 KiB at small windows).
lengths = st.lists(st.sampled_from([0, 1, 7, 8, 9, 20, 64, 300, 2_100, 40_000]) | st.integers(0, 600), max_size=25)


def mix(x: int) -> int:
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M
    return x ^ (x >> 31)


def reference_hash(value: bytes) -> int:
    """The module docstring's definition, a word at a time in Python."""
    total = mix((len(value) + 0x9E3779B97F4A7C15) & _M)
    for k in range(-(-len(value) // 8)):
        word = int.from_bytes(value[8 * k : 8 * k + 8].ljust(8, b"\0"), "little")
        key = mix((k % 4096 + 1) * 0x9E3779B97F4A7C15 & _M) ^ mix((k // 4096) * 0xD1B54A32D192ED03 & _M)
        total += mix(word ^ key)
    return mix(total & _M)


def hashes(items: list[bytes], *, at_once: int = 2**18, before: bytes = b"", after: bytes = b"") -> list[int]:
    """``_bytes_hashes`` of ``items`` laid end to end after ``before`` and followed by ``after`` in one buffer."""
    offsets = np.cumsum([len(before), *map(len, items)], dtype=np.int64)
    data = np.frombuffer(before + b"".join(items) + after, dtype=np.uint8)
    with ds.config.set({"verify.hash-nbytes": at_once}):
        return [int(value) for value in _checksum._bytes_hashes(offsets, data)]


def column_sum(items: list[bytes]) -> int:
    return int(_checksum.checksum(pa.table({"v": pa.array(items, type=pa.binary())}), ["v"])["sums"]["v"])


def random_values(seed: int, sizes: list[int]) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for size in sizes]


@given(lengths, st.integers(0, 2**32), st.sampled_from([1, 100, 4096, 2**18]))
def test_hashes_follow_the_documented_definition(sizes: list[int], seed: int, at_once: int) -> None:
    items = random_values(seed, sizes)
    assert hashes(items, at_once=at_once) == [reference_hash(item) for item in items]


@given(lengths, st.integers(0, 2**32), st.binary(max_size=20), st.binary(max_size=20))
def test_hashes_depend_on_the_value_alone(sizes: list[int], seed: int, before: bytes, after: bytes) -> None:
    """Not on the window, the neighbours, nor where the value lies in memory (alignment, bytes past it)."""
    items = random_values(seed, sizes)
    alone = [hashes([item], at_once=2**18)[0] for item in items]
    for at_once in (1, 13, 2048, 2**18, 2**24):
        assert hashes(items, at_once=at_once, before=before, after=after) == alone


@given(st.binary(min_size=2, max_size=3_000), st.data())
def test_swapping_two_bytes_of_a_value_changes_its_hash(value: bytes, data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(value) - 2))
    j = data.draw(st.integers(i + 1, len(value) - 1))
    swapped = bytearray(value)
    swapped[i], swapped[j] = value[j], value[i]
    assert (hashes([bytes(swapped)])[0] == hashes([value])[0]) == (value[i] == value[j])


@given(st.binary(min_size=1, max_size=100), st.binary(max_size=100))
def test_moving_a_byte_to_the_next_value_changes_the_sum(first: bytes, second: bytes) -> None:
    moved = [first[:-1], first[-1:] + second]
    assume(sorted(moved) != sorted([first, second]))  # b"x", b"" is b"", b"x"
    assert column_sum([first, second]) != column_sum(moved)


@given(st.binary(max_size=100), st.integers(1, 16))
def test_trailing_zero_bytes_change_the_hash(value: bytes, zeros: int) -> None:
    assert hashes([value])[0] != hashes([value + b"\0" * zeros])[0]


def test_where_values_are_cut_and_which_variable_holds_them_count() -> None:
    assert column_sum([b"ab", b""]) != column_sum([b"a", b"b"])
    assert column_sum([b"", b"a"]) == column_sum([b"a", b""])  # the same values, in another order
    rows = [
        _checksum.checksum(pa.table({"u": pa.array(u, pa.binary()), "v": pa.array(v, pa.binary())}), ["u", "v"])
        for u, v in (([b"a"], [b""]), ([b""], [b"a"]))
    ]
    assert rows[0]["rows"] != rows[1]["rows"]


@given(values, st.randoms(use_true_random=False))
def test_equal_multisets_give_equal_sums(items: list[bytes], random: object) -> None:
    shuffled = list(items)
    random.shuffle(shuffled)  # type: ignore[attr-defined]
    assert column_sum(shuffled) == column_sum(items)
    if items:
        assert column_sum([*items, items[0]]) != column_sum(items)  # a value twice counts twice


def test_hash_bits_are_balanced_and_avalanche() -> None:
    """Seeded, and each bound over 6 standard deviations, so that a sound hash fails less than once in a million
    seeds: every one of 64 output bits is set in about half of the hashes of 100,000 short and JSON-like text
    values, and flips in about half of 20,000 pairs of values one input bit apart."""
    rng = np.random.default_rng(20261207)
    sizes = rng.integers(0, 600, 100_000)
    sizes[::2] = rng.integers(0, 24, 50_000)
    data = rng.integers(32, 127, int(sizes.sum()), dtype=np.uint8)  # printable text: few bits vary
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    found = _checksum._bytes_hashes(offsets, data)
    distinct = np.unique(found)
    assert len(distinct) == len({data[a:b].tobytes() for a, b in pairwise(offsets)})
    set_bits = ((distinct[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).sum(axis=0)
    assert np.abs(set_bits - len(distinct) / 2).max() < 6.5 * np.sqrt(len(distinct)) / 2

    flipped = data.copy()
    values = np.flatnonzero(sizes > 0)[:20_000]
    at = offsets[values] + rng.integers(0, 2**31, len(values)) % sizes[values]
    flipped[at] ^= np.left_shift(1, rng.integers(0, 8, len(values))).astype(np.uint8)
    changed = (_checksum._bytes_hashes(offsets, flipped) ^ found)[values]
    flips = ((changed[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).sum(axis=0)
    assert np.abs(flips - len(values) / 2).max() < 6.5 * np.sqrt(len(values)) / 2


def test_a_long_value_is_hashed_within_the_window() -> None:
    """An 8 MiB value takes memory of the ``verify.hash-nbytes`` window (256 KiB here), not of the value."""
    data = np.random.default_rng(0).integers(0, 256, 8 * 2**20, dtype=np.uint8)
    with ds.config.set({"verify.hash-nbytes": 2**18}):
        tracemalloc.start()
        try:
            _checksum._bytes_hashes(np.array([0, 3, len(data)], dtype=np.int64), data)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 2 * 2**20
