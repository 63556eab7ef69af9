"""The mixture file: a small validated YAML naming the tables of a mixture and their weights.

::

    weight_by: rows            # or tokens: what the weights are shares of, always stated
    global_batch: 96           # proportions hold in every run of this many rows
    sources:
      - {table: out/gsm8k-sft.lance, weight: 3}
      - {table: out/alpaca-sft.lance, weight: 1, filter: "length <= 1024", max_repeats: 2}

Optional top-level keys: ``epoch_rows`` or ``epoch_tokens`` (default: as many rows as
the sources hold together), ``seed`` (0), ``clump`` (1). Per source: ``version`` (the
table version to draw from; default: its newest when materialized, which the manifest
records), ``filter``, ``columns``, ``max_repeats``. An unknown or missing key is a one-line error naming the
file and the key (:func:`prep.runtime.config.load_config`); the values are checked once,
by the plan they become (:class:`prep.plan.spec.MixtureSpec`), also one line naming the
file, the key and the value (and, for a number YAML read as text, such as ``1e-3``, how to
write it: ``1.0e-3``). Relative table paths resolve from the current directory, like every
prep config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, model_validator

from prep.runtime.config import ConfigModel, load_config
from prep.errors import PrepError
from prep.plan.spec import MixtureSource, MixtureSpec, PlanSpec

__all__ = ["MixtureFile", "load_mixture"]


class _Keys(ConfigModel):
    """The keys of the file only: their values are the plan's to check (:mod:`prep.plan.spec`), once."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceEntry(_Keys):
    """One ``sources`` entry (see :class:`prep.plan.spec.MixtureSource`)."""

    table: Any
    weight: Any
    version: Any = None
    filter: Any = None
    columns: Any = None
    max_repeats: Any = None


class MixtureFile(_Keys):
    """The mixture file (module docstring)."""

    sources: list[SourceEntry] = Field(min_length=1)
    weight_by: Any
    global_batch: Any
    epoch_rows: Any = None
    epoch_tokens: Any = None
    seed: Any = 0
    clump: Any = 1

    @model_validator(mode="after")
    def _one_epoch_size(self) -> "MixtureFile":
        if self.epoch_rows is not None and self.epoch_tokens is not None:
            raise ValueError("give epoch_rows or epoch_tokens, not both")
        return self

    def plan(self, num_splits: int) -> PlanSpec:
        """The plan of this file with ``num_splits`` splits (table versions not pinned yet)."""
        return PlanSpec(num_splits=num_splits, seed=self.seed, clump=self.clump, mixture=MixtureSpec(
            sources=tuple(MixtureSource(table=s.table, weight=s.weight, version=s.version, filter=s.filter, columns=s.columns,
                                        max_repeats=s.max_repeats)
                          for s in self.sources),
            weight_by=self.weight_by, global_batch=self.global_batch, epoch_rows=self.epoch_rows,
            epoch_tokens=self.epoch_tokens))


def load_mixture(path: str | Path, num_splits: int) -> PlanSpec:
    """The plan a mixture file asks for.

    Raises:
        PrepError: one line naming ``path`` and the bad key.
    """
    mix = load_config(MixtureFile, path)
    try:
        return mix.plan(num_splits)
    except PrepError as exc:
        raise PrepError(f"{path}: {exc}") from None
