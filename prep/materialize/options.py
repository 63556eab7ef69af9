"""The options of a materialize run that are not its plan, one frozen object for tables and mixtures alike.

The plan (:class:`prep.plan.spec.PlanSpec`) says what the epochs hold; these say
where they go and how they are written. Both are checked when built, so a bad value
is one line naming the option before anything is read. This module imports nothing
heavy: the CLI reads its defaults at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from prep.errors import PrepError
from prep.runtime.executor import EXECUTORS, Executor

if TYPE_CHECKING:
    from prep.io.storage import S3Options
    from prep.materialize.budget import Budget

__all__ = ["READ_ROWS", "PICK_ROWS", "DEFAULT_LANCE_FORMAT", "LANCE_FORMATS", "RunOptions"]

READ_ROWS = 16384  # rows per Lance read and per written batch
PICK_ROWS = 65536  # rows taken from held rows at once: each take touches every piece (~0.5 CPU-s less than 16k at 1 M rows)
# Split datasets are written once and read sequentially: Lance 2.0 files cost ~4x less CPU to
# write and ~2x less to scan than 2.2 here, but are ~2.5x larger (no compression): see docs/materialize.md.
DEFAULT_LANCE_FORMAT = "2.0"
LANCE_FORMATS = ("2.0", "2.1", "2.2", "stable")


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How a run writes its epochs (a single table's or a mixture's).

    Args:
        output: output directory (local path or ``s3://``).
        epochs: number of epochs to write in this run (>= 1).
        start_epoch: first epoch of this run (default 0).
        overwrite: replace an output that holds a different plan (default False).
        extend: the table grew since the output was written: plan the epochs this run adds over
            its newest version, keeping the epochs already there as they are (default False:
            a newer table version is refused). A single table only: a mixture names its
            tables' versions (``version:`` per source).
        s3: S3 endpoint/keys (default: the AWS environment).
        read_rows: rows per read and per written batch (default :data:`READ_ROWS`).
        lance_format: data storage version of the split datasets (default ``"2.0"``:
            cheapest to write and scan; ``"2.2"`` compresses ~2.5x, for remote storage).
        ray_address: Ray cluster to join (default ``RAY_ADDRESS``).
        num_cpus: CPUs of a local Ray, or threads of the local executor (default: all).
        executor: ``"auto"`` (default: Ray when there is a cluster, see
            :func:`prep.runtime.executor.resolve`, else this process), ``"ray"`` (a
            local Ray is started when there is no cluster) or ``"local"``. Both write
            identical outputs.
        ray_resources: custom Ray resources each task asks for (pins tasks to the nodes offering them).
        max_memory: the memory a run may use beyond its fixed base, per node, as bytes or a size
            (``"512MiB"``, ``"8GiB"``; default: a quarter of this machine's memory,
            :func:`prep.materialize.budget.default_max_memory`); rows beyond it are spilled to disk.
        spill_dir: where rows beyond ``max_memory`` are spilled (default: the output's ``_work``
            folder; for an object-store output on one node, this machine's temp dir).

    Raises:
        PrepError: one line naming the bad option.
    """

    output: str
    epochs: int
    start_epoch: int = 0
    overwrite: bool = False
    extend: bool = False
    s3: "S3Options | None" = None
    read_rows: int = READ_ROWS
    lance_format: str = DEFAULT_LANCE_FORMAT
    ray_address: str | None = None
    num_cpus: int | None = None
    executor: Executor = "auto"
    ray_resources: Mapping[str, float] | None = None
    max_memory: int | str | None = None
    spill_dir: str | None = None

    def __post_init__(self) -> None:
        if self.max_memory is not None:
            from prep.materialize.budget import parse_size

            object.__setattr__(self, "max_memory", parse_size(self.max_memory))
        if self.spill_dir is not None and (not isinstance(self.spill_dir, str) or not self.spill_dir):
            raise PrepError(f"spill_dir={self.spill_dir!r} must be a directory path or s3:// URI")
        if self.executor not in EXECUTORS:
            raise PrepError(f"executor={self.executor!r} is not one of {list(EXECUTORS)}")
        for key, least in (("epochs", 1), ("start_epoch", 0), ("read_rows", 1)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise PrepError(f"{key}={value!r} must be an integer >= {least}")
        if self.num_cpus is not None and (isinstance(self.num_cpus, bool) or not isinstance(self.num_cpus, int)
                                          or self.num_cpus < 1):
            raise PrepError(f"num_cpus={self.num_cpus!r} must be an integer >= 1 or None (all CPUs)")
        if self.lance_format not in LANCE_FORMATS:
            raise PrepError(f"lance_format={self.lance_format!r} is not one of {list(LANCE_FORMATS)}")
        if not isinstance(self.output, str) or not self.output:
            raise PrepError(f"output={self.output!r} must be a directory path or s3:// URI")

    @property
    def budget(self) -> "Budget":
        """The run's memory budget (:class:`prep.materialize.budget.Budget`)."""
        from prep.materialize.budget import Budget, default_max_memory

        return Budget(self.max_memory if isinstance(self.max_memory, int) else default_max_memory())

    @property
    def epoch_range(self) -> range:
        """The epochs this run writes."""
        return range(self.start_epoch, self.start_epoch + self.epochs)
