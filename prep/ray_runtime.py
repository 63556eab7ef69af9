"""Starting or joining Ray the same way from every entry point."""

from __future__ import annotations

import logging
import os

__all__ = ["init_ray", "WORKER_ENV"]

log = logging.getLogger(__name__)

# Every task's tokenizer would otherwise spawn a thread per core and fight the
# other tasks for them; Ray gives each task its CPU share, we keep to it.
WORKER_ENV = {"TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "LANCE_LOG": "error"}


def init_ray(address: str | None = None, *, num_cpus: int | None = None) -> None:
    """Joins the cluster at ``address`` / ``RAY_ADDRESS`` (as under ``ray job submit``),
    else starts a local Ray with ``num_cpus`` CPUs. A no-op when Ray is already up.
    """
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    runtime_env = {"env_vars": WORKER_ENV}
    if address:
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=True)
    else:
        ray.init(num_cpus=num_cpus, runtime_env=runtime_env, include_dashboard=False, log_to_driver=True)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    log.info("ray: %s", ray.cluster_resources())
