"""prep: move data preparation offline, leave the trainer almost nothing to do.

The names a user needs, each imported on first use, so ``import prep`` stays light (no torch,
Ray or Lance until a name is touched) and the reader's names never import Ray:

- prepare: :func:`pretokenize`, :func:`decode_images` (``prep pretokenize`` / ``prep decode-images``,
  each flag a keyword argument);
- materialize: :func:`materialize_shuffle`, :func:`materialize_mixture` (``prep materialize-shuffle``);
- read: :class:`ReaderDataset` and :class:`Loader`;
- :class:`PrepError`: what every one of them raises for unusable input.

>>> import prep
>>> sorted(prep.__all__)[:4]
['Loader', 'PrepError', 'ReaderDataset', '__version__']
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it (imported when the name is first used)
_LAZY = {
    "pretokenize": "prep.prepare.api",
    "decode_images": "prep.prepare.api",
    "materialize_shuffle": "prep.materialize.table",
    "materialize_mixture": "prep.materialize.mixture.run",
    "ReaderDataset": "prep.reader.dataset",
    "Loader": "prep.reader.loader",
    "PrepError": "prep.errors",
}

__all__ = ["__version__", *_LAZY]

if TYPE_CHECKING:  # what type checkers and IDEs see (prep ships py.typed)
    from prep.errors import PrepError
    from prep.materialize.mixture.run import materialize_mixture
    from prep.materialize.table import materialize_shuffle
    from prep.prepare.api import decode_images, pretokenize
    from prep.reader.dataset import ReaderDataset
    from prep.reader.loader import Loader


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'prep' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
