"""``prep materialize-shuffle``: write shuffled epochs as per-split Lance datasets.

Layout and manifest: docs/architecture.md ("Materialized epochs"); how it
works, measurements and trade-offs: docs/materialize.md. In short:

1. The plan (:mod:`prep.plan`) says which selected rows split ``s`` reads in
   epoch ``e``, in order. ``--filter`` selects rows once: their row addresses go
   to a small sidecar (``OUT/_work/selection.lance``) that tasks read by position
   (:mod:`prep.materialize.rows`).
2. One task per (epoch, split) writes ``OUT/epoch-EEEEE/split-SSSSS.lance``
   and then ``split-SSSSS.done.json`` (:mod:`prep.materialize.write`). On a
   cluster the tasks run on Ray (:mod:`prep.materialize.on_ray`; small clumps
   through a shared gather pass, :mod:`prep.materialize.gather`); on one machine
   on threads of this process, from rows held in memory
   (:mod:`prep.materialize.local`). :func:`prep.runtime.ray_cluster.use_ray` decides;
   both write identical outputs.
3. ``manifest.json`` is written last, atomically; a rerun skips splits already
   done (:mod:`prep.materialize.run`).

Modules:

- :mod:`prep.plan.spec`: the plan (:class:`~prep.plan.spec.PlanSpec`); :mod:`prep.contracts.manifest`: the manifest
- :mod:`prep.contracts.materialized`: the files of an output, and which of them prep may remove
- :mod:`prep.materialize.job`: the :class:`Job` tasks receive, the per-worker dataset cache
- :mod:`prep.materialize.rows`: reading selected rows, ids, hash keys; the filter sidecar
- :mod:`prep.materialize.held`: rows held in memory, taken into a split's read order
- :mod:`prep.materialize.write`: the (epoch, split) write task
- :mod:`prep.materialize.local`: the local executor (threads, no Ray)
- :mod:`prep.materialize.on_ray`: the Ray executor
- :mod:`prep.materialize.gather`: the Ray executor's gather pass for small clumps
- :mod:`prep.materialize.run`: ``materialize_shuffle``: resolve, select, run the tasks, finalize
- :mod:`prep.materialize.mixture_file`: the mixture file (YAML) -> a plan with a mixture
- :mod:`prep.materialize.mixture_sources`: a mixture's tables, opened, pinned and checked against each other
- :mod:`prep.materialize.mixture`: ``materialize_mixture``: several tables by weight, exact per global batch
"""

from __future__ import annotations

from prep.materialize.job import Job, job_for_manifest
from prep.materialize.rows import hash_keys_for, read_rows, selected_ids
from prep.materialize.mixture import materialize_mixture
from prep.materialize.run import materialize_shuffle

__all__ = ["materialize_shuffle", "materialize_mixture", "Job", "job_for_manifest", "read_rows", "selected_ids", "hash_keys_for"]
