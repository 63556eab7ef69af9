"""``prep verify``: check a materialized output against its source (:func:`verify`, a single table's checks in
:mod:`~prep.materialize.verify.table`, a mixture's in :mod:`~prep.materialize.verify.mixture`), what it found
(:mod:`~prep.materialize.verify.report`) and the command that repairs it (:mod:`~prep.materialize.verify.repair`)."""

from prep.materialize.verify.table import verify

__all__ = ["verify"]
