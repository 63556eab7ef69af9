"""Which layout a reader path is: one class per mode, chosen here and nowhere else.

* a materialized output (``prep materialize-shuffle``): :class:`~prep.reader.layouts.materialized.Materialized`;
* a prepared table: :class:`~prep.reader.layouts.planned.Planned`, read through ``plan=`` or, without one,
  the default plan (:class:`~prep.plan.spec.PlanSpec`'s defaults: 48 splits, random, seed 0).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from prep.contracts.manifest import MANIFEST
from prep.io import storage
from prep.plan.spec import PlanSpec
from prep.reader.layouts.materialized import Materialized
from prep.reader.stage import Layout

__all__ = ["open_layout"]


def open_layout(path: str, *, global_batch_size: int, plan: PlanSpec | Mapping[str, Any] | None,
                epochs: int | Sequence[int] | None, s3: storage.S3Options | None) -> tuple[Layout, tuple[int, ...]]:
    """The layout at ``path`` and the epochs to read from it.

    Args:
        path: a materialized output, or a prepared table (read through ``plan``, else the default plan).
        global_batch_size: the reader's global batch (a mixture allows only multiples of its own).
        plan: an on-the-fly plan (a :class:`PlanSpec` or some of its keys), or None (a materialized
            output; a prepared table gets the default plan).
        epochs: all (None), the first ``n`` (int) or the listed ones (with a plan: None reads epoch 0).
        s3: where to reach ``s3://`` URIs.

    Raises:
        PrepError: no such output or table, epochs it does not have, a global batch it cannot serve.
    """
    if plan is None and _is_prepared_table(path, s3):
        plan = PlanSpec()
    if plan is not None:
        from prep.reader.layouts.planned import Planned

        planned = Planned(path, plan, 1 if epochs is None else epochs, s3=s3)
        return planned, planned.epochs
    materialized = Materialized.open(path, s3)
    materialized.check_global_batch(global_batch_size)
    return materialized, materialized.pick_epochs(epochs)


def _is_prepared_table(path: str, s3: storage.S3Options | None) -> bool:
    """A Lance table and not a materialized output (whose manifest says what it is)."""
    from prep.io.lance_tables import table_exists  # Lance only for this check: ``import prep.reader`` stays light

    return not storage.exists(storage.join(path, MANIFEST), s3) and \
        table_exists(path, storage.lance_storage_options(path, s3))
