"""``prep materialize-shuffle``: write shuffled epochs as per-split Lance datasets.

Layout and manifest: docs/architecture.md ("Materialized epochs"); how it
works, measurements and trade-offs: docs/materialize.md. In short:

1. The plan (:mod:`prep.plan`) says which selected rows split ``s`` reads in
   epoch ``e``, in order. ``--filter`` selects rows once: their row addresses go
   to a small sidecar (``OUT/_work/selection.lance``) that tasks read by position
   (:mod:`prep.materialize.rows.selected`).
2. One task per (epoch, split) writes ``OUT/epoch-EEEEE/split-SSSSS.lance``
   and then its done record (:mod:`prep.materialize.write`, :mod:`prep.contracts.done`).
   Both executors run them the same way, within a memory budget (``--max-memory``,
   :mod:`prep.materialize.budget`): rows that fit are read once and held, and every split
   is written from them on threads; rows beyond it go through a two-pass external shuffle
   (:mod:`prep.materialize.rows.spill`): read once, routed to spill files per group of splits,
   each group read back once (:mod:`prep.materialize.table`). On one machine in this process
   (:mod:`prep.materialize.executors.local`), on a cluster on every node, the driver's node's share in
   the driver (:mod:`prep.materialize.executors.on_ray`). :func:`prep.runtime.ray_cluster.use_ray`
   decides; both write identical outputs, at every budget.
3. ``manifest.json`` is written last, atomically; a rerun trusts only splits whose
   done record and files check out, and writes the others again (:mod:`prep.materialize.rerun`).

A single table and a mixture go through one run path (:func:`prep.materialize.run.materialize`)
with one options object (:class:`prep.materialize.options.RunOptions`).

Modules (the run itself at the top, its parts in subfolders):

- :mod:`prep.plan.spec`: the plan (:class:`~prep.plan.spec.PlanSpec`); :mod:`prep.contracts.manifest`: the manifest;
  :mod:`prep.contracts.done`: the done record
- :mod:`prep.contracts.materialized`: the files of an output, and which of them prep may remove
- :mod:`prep.materialize.options`: :class:`RunOptions`, the run's options (not the plan's)
- :mod:`prep.materialize.run`: the one run path: resolve, claim, prepare, tasks, manifest
- :mod:`prep.materialize.table`: a single table's run (``materialize_shuffle``)
- :mod:`prep.materialize.rerun`: which done splits a rerun may trust
- :mod:`prep.materialize.versions`: a table that grew: ``--extend``, the epochs a run keeps, the output's fingerprint
- :mod:`prep.materialize.resolved`: the :class:`ResolvedTable` tasks receive, the calls executors run, the per-worker dataset cache
- :mod:`prep.materialize.write`: the (epoch, split) write task
- :mod:`prep.materialize.budget`: the memory budget, and how a run spends it
- :mod:`prep.materialize.faults`: kill points at every commit (tests only)
- ``executors/``: :mod:`~prep.materialize.executors.local`, :mod:`~prep.materialize.executors.on_ray`: the two
  executors, on the runners of :mod:`prep.runtime.executor` (shared with prepare)
- ``rows/``: where a split gets its rows: :mod:`~prep.materialize.rows.selected` (selected rows, ids, hash keys;
  the filter sidecar), :mod:`~prep.materialize.rows.held` and :mod:`~prep.materialize.rows.take` (rows held in
  memory, taken into a split's read order), :mod:`~prep.materialize.rows.spill` (rows beyond the budget: the
  two-pass external shuffle)
- ``mixture/``: a mixture's run (``materialize_mixture``, :mod:`~prep.materialize.mixture.run`), its file
  (:mod:`~prep.materialize.mixture.file`, YAML -> a plan with a mixture), its tables opened, pinned and checked
  against each other (:mod:`~prep.materialize.mixture.sources`)
- ``verify/``: ``prep verify`` (:mod:`~prep.materialize.verify.table`, :mod:`~prep.materialize.verify.mixture`),
  its report, its scan of a split, the command that repairs an output
"""

from __future__ import annotations

import importlib
from typing import Any

# Loaded on first use: the CLI reads the run options' defaults (:mod:`prep.materialize.options`)
# at start-up, without loading Lance and the executors.
_EXPORTS = {
    "materialize": "prep.materialize.run", "materialize_shuffle": "prep.materialize.table",
    "materialize_mixture": "prep.materialize.mixture.run", "RunOptions": "prep.materialize.options",
    "ResolvedTable": "prep.materialize.resolved", "resolved_for_manifest": "prep.materialize.resolved", "read_rows": "prep.materialize.rows.selected",
    "selected_ids": "prep.materialize.rows.selected", "hash_keys_for": "prep.materialize.rows.selected",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'prep.materialize' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
