"""The parameter tables of docs/reference/parameters.md, made from the signatures and docstrings.

``python tests/reference_tables.py`` writes the page; ``tests/test_docs.py`` checks that it is current.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

PAGE = Path(__file__).parents[1] / "docs" / "reference" / "parameters.md"

HEADER = """# Parameters

Every parameter of each entry point: its default and what it means, from the signature and the
docstring (the [API reference](../api.md) has the whole text). This page is made by
`python tests/reference_tables.py`; a test fails when it is not current.
"""


def entry_points() -> list[tuple[str, Callable[..., Any]]]:
    import daskshuffle as ds

    points: list[tuple[str, Callable[..., Any]]] = [
        (name, getattr(ds, name))
        for name in [
            "shuffle_zarr",
            "shuffle_xarray",
            "shuffle_parquet",
            "shuffle_dataframe",
            "shuffle_lines",
            "append",
            "evict",
            "compact",
            "verify",
            "explain",
            "PileLoader",
            "Stream",
            "Cache",
            "EpochShuffler",
        ]
    ]
    points += [(f"orders.{name}", getattr(ds.orders, name)) for name in sorted(ds.orders.__all__)]
    try:
        from daskshuffle.torch import PileDataset
    except ImportError:  # pragma: no cover - the page is made where torch is installed
        raise SystemExit("make the page where torch is installed (make test installs it)") from None
    points.append(("torch.PileDataset", PileDataset))
    return [(name, point) for name, point in points if inspect.isclass(point) or callable(point)]


def parameter_docs(doc: str) -> dict[str, str]:
    """Each parameter's first sentence, from a numpydoc ``Parameters`` section."""
    lines = inspect.cleandoc(doc).splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Parameters") + 2
    except StopIteration:
        return {}
    entries: dict[str, str] = {}
    names: list[str] = []
    for line in lines[start:]:
        if line and not line.startswith(" ") and set(line.strip()) <= {"-"} and line.strip():
            break  # the next section's underline
        if line and not line.startswith(" "):
            if re.fullmatch(r"[A-Z][a-z]+( [A-Z][a-z]+)?", line.strip()):
                break  # the next section's title
            names = [name.strip().lstrip("*") for name in line.split(" : ")[0].split(",")]
            for name in names:
                entries[name] = ""
        elif line.strip() and names:
            for name in names:
                entries[name] = (entries[name] + " " + line.strip()).strip()
    return {name: first_sentence(text) for name, text in entries.items()}


def first_sentence(text: str) -> str:
    match = re.match(r"(.+?\.)(\s|$)", text)
    sentence = match.group(1) if match else text
    return sentence.replace("|", "\\|")


def rows(point: Callable[..., Any]) -> Iterator[str]:
    signature = inspect.signature(point)
    doc = parameter_docs(point.__doc__ or "")
    if inspect.isclass(point) and not doc:
        doc = parameter_docs(point.__init__.__doc__ or "")
    for parameter in signature.parameters.values():
        if parameter.name == "self" or parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            continue
        default = "required" if parameter.default is inspect.Parameter.empty else f"`{parameter.default!r}`"
        yield f"| `{parameter.name}` | {default} | {doc.get(parameter.name, '')} |"


def page() -> str:
    parts = [HEADER]
    for name, point in entry_points():
        parts.append(f"\n## `{name}`\n\n| parameter | default | meaning |\n|---|---|---|")
        parts.extend(rows(point))
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    PAGE.write_text(page())
    sys.stdout.write(f"wrote {PAGE}\n")
