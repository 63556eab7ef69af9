"""Class names <-> integer labels, the same on every run.

Discovered names are sorted (as torchvision's ``ImageFolder`` does), so the mapping
depends only on the set of names; ``labels:`` in the config pins it explicitly.
Integer labels pass through; their names come from the list when there is one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["LabelMap", "LabelError", "UNLABELED"]

UNLABELED = -1


class LabelError(ValueError):
    """A label that cannot be mapped; the message is the reject reason."""


@dataclass(frozen=True)
class LabelMap:
    """Resolves a raw label (a class name, an int, or None) to ``(label, label_name)``.

    Args:
        names: class names in label order, or None when labels are bare integers.
    """

    names: tuple[str, ...] | None = None
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {n: i for i, n in enumerate(self.names or ())})

    @classmethod
    def discovered(cls, names: Any) -> "LabelMap":
        """A map over the sorted set of ``names``."""
        return cls(tuple(sorted({str(n) for n in names})))

    def resolve(self, raw: Any) -> tuple[int, str]:
        """``(label, label_name)`` for ``raw``; ``(-1, "")`` for None.

        >>> LabelMap(("ants", "bees")).resolve("bees"), LabelMap().resolve(7)
        ((1, 'bees'), (7, '7'))
        """
        if raw is None:
            return UNLABELED, ""
        if isinstance(raw, bool) or isinstance(raw, float) and not raw.is_integer():
            raise LabelError(f"label {raw!r} is neither a class name nor an integer")
        if isinstance(raw, (int, float)):
            value = int(raw)
            if value < 0 or (self.names is not None and value >= len(self.names)):
                top = f" 0-{len(self.names) - 1}" if self.names is not None else " >= 0"
                raise LabelError(f"label {value} is outside{top}")
            return value, (self.names[value] if self.names is not None else str(value))
        name = str(raw).strip()
        if name.lstrip("-").isdigit() and name not in self._index:
            return self.resolve(int(name))
        if name not in self._index:
            if not self.names:
                raise LabelError(f"label {name!r} is a class name but no class names are known; list them under labels: in the config")
            raise LabelError(f"label {name!r} is not one of the {len(self.names)} class names (labels: {list(self.names)[:5]}...)")
        return self._index[name], name
