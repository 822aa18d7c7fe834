"""What a killed run leaves beside its destination, or under its ``tmp``: found, and removed by name."""

from __future__ import annotations

from pathlib import Path

from daskshuffle.storage import Location, _leftovers


def test_scratch_directories_under_tmp_are_found_and_removed(tmp_path: Path) -> None:
    """A text shuffle given ``tmp`` keeps its pieces and its spool there: both are what a killed run left."""
    dst, tmp = Location.of(str(tmp_path / "out.txt")), Location.of(str(tmp_path / "scratch"))
    for suffix in (_leftovers.TMP_SUFFIX, _leftovers.SPOOL_SUFFIX):
        left = Path(dst.scratch(suffix, tmp).path)
        left.mkdir(parents=True)
        (left / "part").write_bytes(b"x" * 10)
    mine = tmp_path / "scratch" / "mine.txt"  # the user's own file in tmp: never a leftover
    mine.write_bytes(b"keep")

    found = _leftovers.find(dst, tmp)
    assert sorted(leftover.path for leftover in found) == sorted(
        dst.scratch(suffix, tmp).path for suffix in (_leftovers.TMP_SUFFIX, _leftovers.SPOOL_SUFFIX)
    )
    assert all(leftover.nbytes == 10 for leftover in found)

    removed = _leftovers.remove(dst, tmp)
    assert len(removed) == 2
    assert _leftovers.find(dst, tmp) == []
    assert sorted(path.name for path in (tmp_path / "scratch").iterdir()) == ["mine.txt"]
