"""Starting or joining Ray the same way from every entry point."""

from __future__ import annotations

import json
import logging
import os
import sys

from prep.runtime import logs

__all__ = ["init_ray", "use_ray", "parse_resources", "WORKER_ENV", "use_worker_env"]

log = logging.getLogger(__name__)

# Every task's tokenizer would otherwise spawn a thread per core and fight the
# other tasks for them; Ray gives each task its CPU share, we keep to it. Sandboxes are
# started with it (prep.prepare.isolation) and materialize's Ray tasks set it (use_worker_env),
# not a Ray runtime_env: Ray starts a runtime_env's workers through a setup process that
# imports Ray once more (py-spy beside benchmarks/executors.py: 1-2 CPU-s a worker and job).
WORKER_ENV = {"TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "LANCE_LOG": "error"}


def use_worker_env() -> None:
    """Gives this process :data:`WORKER_ENV` (a Ray task, before its first tokenizer or Lance call)."""
    os.environ.update(WORKER_ENV)


def use_ray(address: str | None = None) -> bool:
    """Whether a job should run on Ray: only when there is a cluster to use.

    A cluster is there when ``address`` (``--ray-address``) is given, when
    ``RAY_ADDRESS`` is set (as under ``ray job submit``), or when Ray is already
    initialised in this process. Otherwise a job runs on this machine without
    Ray: starting a fresh local Ray costs seconds and buys nothing on one machine.
    Checking does not import Ray.

    Args:
        address (str | None): the address the user passed, if any (default None).

    Returns:
        True to run on Ray (joining that cluster), False to run in this process.

    Example:
        >>> use_ray("ray://head:10001")
        True
    """
    if address or os.environ.get("RAY_ADDRESS"):
        return True
    ray = sys.modules.get("ray")  # imported means someone may have started it; not imported means not started
    return bool(ray is not None and ray.is_initialized())


def init_ray(address: str | None = None, *, num_cpus: int | None = None) -> None:
    """Joins the cluster at ``address`` / ``RAY_ADDRESS`` (as under ``ray job submit``),
    else starts a local Ray with ``num_cpus`` CPUs. A no-op when Ray is already up.

    Ray's banner, its token-auth notice, its INFO lines and the workers' output
    reach the terminal only with ``prep -v`` (:mod:`prep.runtime.logs`).
    """
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    talk = dict(log_to_driver=logs.verbose(), logging_level=logs.third_party_level())
    if address:
        ray.init(address=address, **talk)
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False, **talk)
    logs.quiet_third_party()  # ray.init just reset its loggers' levels
    log.info("ray: %s", ray.cluster_resources())


def parse_resources(text: str) -> dict[str, float]:
    """``--ray-resources '{"gpu_node": 1}'``: custom Ray resources every task asks for (pins tasks to nodes
    that offer them, e.g. the nodes started with ``ray start --resources '{"gpu_node": 8}'``).

    >>> parse_resources('{"node2": 0.5}')
    {'node2': 0.5}
    """
    import argparse

    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, (int, float)) and v > 0
                                              for k, v in value.items()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a JSON object of resource name -> amount > 0")
    return {k: float(v) for k, v in value.items()}
