"""Which layout a reader path is: one class per mode, chosen here and nowhere else.

* a materialized output (``prep materialize-shuffle``): :class:`~prep.reader.manifest.Materialized`;
* a prepared table with ``plan=``: :class:`~prep.reader.planned.Planned`, read through the plan.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from prep.io import storage
from prep.plan.spec import PlanSpec
from prep.reader.manifest import Materialized
from prep.reader.stage import Layout

__all__ = ["open_layout"]


def open_layout(path: str, *, global_batch_size: int, plan: PlanSpec | Mapping[str, Any] | None,
                epochs: int | Sequence[int] | None, s3: storage.S3Options | None) -> tuple[Layout, tuple[int, ...]]:
    """The layout at ``path`` and the epochs to read from it.

    Args:
        path: a materialized output, or a prepared table when ``plan`` is given.
        global_batch_size: the reader's global batch (a mixture allows only multiples of its own).
        plan: an on-the-fly plan (a :class:`PlanSpec` or some of its keys), or None.
        epochs: all (None), the first ``n`` (int) or the listed ones (with a plan: None reads epoch 0).
        s3: where to reach ``s3://`` URIs.

    Raises:
        PrepError: no such output or table, epochs it does not have, a global batch it cannot serve.
    """
    if plan is not None:
        from prep.reader.planned import Planned

        planned = Planned(path, plan, 1 if epochs is None else epochs, s3=s3)
        return planned, planned.epochs
    materialized = Materialized.open(path, s3)
    materialized.check_global_batch(global_batch_size)
    return materialized, materialized.pick_epochs(epochs)
