"""Each on-disk file's example is written once, in prep/contracts/README.md, and parses through its real parser.

A ``json`` block there is preceded by ``<!-- parsed as: NAME -->``, NAME one of :data:`PARSERS`;
an example prep would not read back (a shortened value, a key it does not know) fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

import pytest

from prep.contracts.cache_marker import CacheMarker
from prep.contracts.done import parse_done
from prep.contracts.manifest import Manifest
from prep.contracts.marker import JobMarker
from prep.contracts.ownership import Holder
from prep.contracts.source import SourceEntry
from prep.contracts.checksums import parse_checksums
from prep.contracts.table import TableMetadata

README = Path(__file__).resolve().parent.parent / "prep" / "contracts" / "README.md"
BLOCK = re.compile(r"^<!-- parsed as: (\w+) -->\n```json\n(.*?)^```$", re.M | re.S)


PARSERS: dict[str, Callable[[Any], object]] = {
    "table": lambda doc: TableMetadata.from_json(doc, "README"),
    "source": lambda doc: SourceEntry.from_json(doc, "README"),
    "manifest": lambda doc: Manifest.from_json(doc, "README"),
    "done": parse_done,
    "lease": lambda doc: Holder.from_json(doc, "README"),
    "job_marker": lambda doc: JobMarker.from_json(doc, "README"),
    "cache_marker": lambda doc: CacheMarker.from_json(doc, "README"),
    "checksums": lambda doc: parse_checksums(doc, "README"),
}


def _examples() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(README.read_text())]


def test_every_json_example_names_its_parser():
    assert README.read_text().count("```json") == len(_examples()), "a json block without <!-- parsed as: NAME -->"
    assert {name for name, _ in _examples()} == set(PARSERS), "every contract has an example"


@pytest.mark.parametrize("name, text", _examples(), ids=[f"{n}-{i}" for i, (n, _) in enumerate(_examples())])
def test_example_parses_through_the_real_parser(name, text):
    doc = json.loads(text)
    parsed = PARSERS[name](doc)
    if hasattr(parsed, "to_json"):  # and what prep writes back is the example, key for key
        assert parsed.to_json() == doc
