"""What a prepare step counted: one typed record, its count names spelled once, here.

A table's metadata carries the counts of all its rows (``counts``), and each source file
that had chunks of its own carries those of its rows (an entry's ``counts``,
:mod:`prep.contracts.source`). Workers count in a ``Counter`` under these names; the chunk
runner turns it into a :class:`Counts` (:meth:`Counts.from_json`), so a name no field has is
one error naming the chunk, not a count that silently never reaches the table. On disk the
object is flat: the formats an image worker saw are ``format:<NAME>`` keys beside the rest
(an image table moves them to its ``decoder``, :mod:`prep.contracts.images`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

from prep.errors import PrepError

__all__ = ["Counts", "REQUIRED_COUNTS", "FORMAT_PREFIX"]

FORMAT_PREFIX = "format:"


@dataclass(frozen=True, kw_only=True)
class Counts:
    """The counts of a step, a table or a source file's rows (0: nothing counted).

    Args:
        rows_read, rows_accepted, rows_rejected, rows_written, files_rejected: the rows and files
            the reconciliation checks (every table has these five).
        rejects_written, chunk_restarts: rejects rows written, chunks restarted after a crash.
        tokens, tokens_trained, pad_tokens: text tables: tokens written, those trained on, packing's pad.
        blank_lines, tokens_truncated: text inputs' blank lines; tokens ``overlong: truncate`` cut.
        rows_over_max_length_truncate, rows_over_max_length_reject, rows_over_max_length_split:
            rows longer than ``max_length``, under each ``overlong`` policy.
        pieces_untrained, pieces_untrained_tokens: ``overlong: split`` pieces left out (no trained token).
        bytes_read, decoded_with_pil, animated_first_frame_kept: image inputs: bytes read, images the
            Pillow fallback decoded, animations whose first frame was kept.
        formats: images decoded per format (``format:<NAME>`` keys on disk).
    """

    rows_read: int = 0
    rows_accepted: int = 0
    rows_rejected: int = 0
    rows_written: int = 0
    files_rejected: int = 0
    rejects_written: int = 0
    chunk_restarts: int = 0
    tokens: int = 0
    tokens_trained: int = 0
    pad_tokens: int = 0
    blank_lines: int = 0
    tokens_truncated: int = 0
    rows_over_max_length_truncate: int = 0
    rows_over_max_length_reject: int = 0
    rows_over_max_length_split: int = 0
    pieces_untrained: int = 0
    pieces_untrained_tokens: int = 0
    bytes_read: int = 0
    decoded_with_pil: int = 0
    animated_first_frame_kept: int = 0
    formats: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: Any, where: str) -> Counts:
        """The counts ``raw`` (a flat object of integers >= 0) gives; one error starting with ``where`` and naming the key otherwise.

        >>> Counts.from_json({"rows_read": 3, "format:JPEG": 2}, "t:").formats
        {'JPEG': 2}
        >>> Counts.from_json({"rows_read": "3"}, "t.lance: prep table metadata")
        Traceback (most recent call last):
        prep.errors.PrepError: t.lance: prep table metadata counts.rows_read='3' must be an integer >= 0
        """
        if not isinstance(raw, Mapping):
            raise PrepError(f"{where} counts={raw!r} must be an object of integers >= 0")
        given: dict[str, int] = {}
        formats: dict[str, int] = {}
        for key, value in raw.items():
            if not isinstance(key, str) or not (key in _NAMES or key.startswith(FORMAT_PREFIX)):
                raise PrepError(f"{where} counts.{key}={value!r} is not a count prep keeps "
                                f"(one of {', '.join(_NAMES)}, {FORMAT_PREFIX}<NAME>)")
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise PrepError(f"{where} counts.{key}={value!r} must be an integer >= 0")
            if key.startswith(FORMAT_PREFIX):
                formats[key[len(FORMAT_PREFIX):]] = value
            else:
                given[key] = value
        return cls(**given, formats=dict(sorted(formats.items())))

    def to_json(self) -> dict[str, int]:
        """The flat object :meth:`from_json` reads: the five every table has, and the other counts that are not 0."""
        out = {name: getattr(self, name) for name in _NAMES if name in REQUIRED_COUNTS or getattr(self, name)}
        out.update({FORMAT_PREFIX + k: v for k, v in sorted(self.formats.items())})
        return out

    def __add__(self, other: Counts) -> Counts:
        """Both counts summed (a table's from its chunks', or from its steps')."""
        return self._combine(other, 1)

    def minus(self, other: Counts) -> Counts:
        """These counts less ``other`` (a table's, less the rows of the files a step replaced).

        Raises:
            PrepError: a count would go below 0 (``other`` counted rows these do not hold).
        """
        return self._combine(other, -1)

    def _combine(self, other: Counts, sign: int) -> Counts:
        values = {name: getattr(self, name) + sign * getattr(other, name) for name in _NAMES}
        formats = {k: self.formats.get(k, 0) + sign * other.formats.get(k, 0) for k in sorted({*self.formats, *other.formats})}
        below = [(k, v) for k, v in [*values.items(), *formats.items()] if v < 0]
        if below:
            raise PrepError(f"counts.{below[0][0]} would be {below[0][1]}: the counts taken away hold more than these")
        return replace(self, **values, formats={k: v for k, v in formats.items() if v})

    def without_formats(self) -> Counts:
        """These counts, the formats left out (an image table keeps them in its decoder)."""
        return replace(self, formats={})


_NAMES: tuple[str, ...] = tuple(f.name for f in fields(Counts) if f.name != "formats")
REQUIRED_COUNTS: tuple[str, ...] = _NAMES[:5]  # what every table's counts hold, 0 or not
