"""``prep materialize-shuffle``: write shuffled epochs as per-split Lance datasets.

Layout and manifest: docs/architecture.md ("Materialized epochs"); how it
works, measurements and trade-offs: docs/materialize.md. In short:

1. The plan (:mod:`prep.plan`) says which selected rows split ``s`` reads in
   epoch ``e``, in order. ``--filter`` selects rows once: their row addresses go
   to a small sidecar (``OUT/_work/selection.lance``) that tasks read by position
   (:mod:`prep.materialize.rows`).
2. One task per (epoch, split) writes ``OUT/epoch-EEEEE/split-SSSSS.lance``
   and then its done record (:mod:`prep.materialize.write`, :mod:`prep.contracts.done`).
   Both executors run them the same way, within a memory budget (``--max-memory``,
   :mod:`prep.materialize.budget`): rows that fit are read once and held, and every split
   is written from them on threads; rows beyond it go through a two-pass external shuffle
   (:mod:`prep.materialize.spill`): read once, routed to spill files per group of splits,
   each group read back once (:mod:`prep.materialize.table`). On one machine in this process
   (:mod:`prep.materialize.local`), on a cluster on every node, the driver's node's share in
   the driver (:mod:`prep.materialize.on_ray`). :func:`prep.runtime.ray_cluster.use_ray`
   decides; both write identical outputs, at every budget.
3. ``manifest.json`` is written last, atomically; a rerun trusts only splits whose
   done record and files check out, and writes the others again (:mod:`prep.materialize.rerun`).

A single table and a mixture go through one run path (:func:`prep.materialize.run.materialize`)
with one options object (:class:`prep.materialize.options.RunOptions`).

Modules:

- :mod:`prep.plan.spec`: the plan (:class:`~prep.plan.spec.PlanSpec`); :mod:`prep.contracts.manifest`: the manifest;
  :mod:`prep.contracts.done`: the done record
- :mod:`prep.contracts.materialized`: the files of an output, and which of them prep may remove
- :mod:`prep.materialize.options`: :class:`RunOptions`, the run's options (not the plan's)
- :mod:`prep.materialize.run`: the one run path: resolve, claim, prepare, tasks, manifest
- :mod:`prep.materialize.table`: a single table's run (``materialize_shuffle``)
- :mod:`prep.materialize.mixture`: a mixture's run (``materialize_mixture``): several tables by weight
- :mod:`prep.materialize.rerun`: which done splits a rerun may trust
- :mod:`prep.materialize.versions`: a table that grew: ``--extend``, the epochs a run keeps, the output's fingerprint
- :mod:`prep.materialize.resolved`: the :class:`ResolvedTable` tasks receive, the calls executors run, the per-worker dataset cache
- :mod:`prep.materialize.rows`: reading selected rows, ids, hash keys; the filter sidecar
- :mod:`prep.materialize.held`: rows held in memory, taken into a split's read order
- :mod:`prep.materialize.write`: the (epoch, split) write task
- :mod:`prep.materialize.local`, :mod:`prep.materialize.on_ray`: the executors
- :mod:`prep.materialize.budget`: the memory budget, and how a run spends it
- :mod:`prep.materialize.spill`: rows beyond the budget: the two-pass external shuffle
- :mod:`prep.materialize.faults`: kill points at every commit (tests only)
- :mod:`prep.materialize.mixture_file`: the mixture file (YAML) -> a plan with a mixture
- :mod:`prep.materialize.mixture_sources`: a mixture's tables, opened, pinned and checked against each other
- :mod:`prep.materialize.verify`, :mod:`prep.materialize.verify_mixture`: ``prep verify``
"""

from __future__ import annotations

import importlib
from typing import Any

# Loaded on first use: the CLI reads the run options' defaults (:mod:`prep.materialize.options`)
# at start-up, without loading Lance and the executors.
_EXPORTS = {
    "materialize": "prep.materialize.run", "materialize_shuffle": "prep.materialize.table",
    "materialize_mixture": "prep.materialize.mixture", "RunOptions": "prep.materialize.options",
    "ResolvedTable": "prep.materialize.resolved", "resolved_for_manifest": "prep.materialize.resolved", "read_rows": "prep.materialize.rows",
    "selected_ids": "prep.materialize.rows", "hash_keys_for": "prep.materialize.rows",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'prep.materialize' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
