"""Materialize's two executors, on the shared runners of :mod:`prep.runtime.executor`: threads of this process
(:mod:`~prep.materialize.executors.local`) and Ray tasks, with holders placed per node (:mod:`~prep.materialize.executors.on_ray`)."""
