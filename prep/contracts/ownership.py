"""Who may write an output: the lease record (one writer at a time), and the rules of the claim.

Records and rules only; the lease itself (``flock``, the conditional PUT, the heartbeat) is
:mod:`prep.io.lease`, and the claim's reads and writes are :mod:`prep.io.claims`.

**Lease.** Every command that writes holds an exclusive lease on its output: the file
:data:`LEASE` in the output folder, a :class:`Holder` record naming its holder (job, host,
pid, start time), refreshed every :data:`HEARTBEAT_S`. A holder counts as gone
(:meth:`Holder.gone_because`) when its pid is gone on this host, or, from another host, when
its heartbeat is :data:`STALE_S` old or more than :data:`MAX_SKEW_S` ahead of this host's
clock (a clock that far off, or a forged record, would otherwise hold the output for as long
as it is ahead); a gone holder's lease is taken over.

**Marker and claim.** A job may write only where nothing is, where an empty folder is, or
where prep wrote before. It proves the last case with a marker (:data:`JOB_MARKER` for
tables and materialized outputs, :data:`CACHE_MARKER` for reader caches), put in the folder
before the first data file and kept after the commit. So a folder at ``--output`` is, in
order (:func:`classify`):

- absent or empty: claimed (the marker is written);
- a marker plus Lance's own folders (and prep's file indexes) and no committed version: the leftovers of a job that
  died before its commit, cleared and claimed (only under the lease, so never a live run's);
- a committed prep table (a marker, or prep's metadata in a table made before markers
  existed): replaced only with ``overwrite``, by a new version;
- anything else (a user's files, a Lance table prep did not write, a marker beside foreign
  files): an error, with or without ``overwrite``, before anything is written.

Removing a layout's own files goes sub-folder entries first, the markers last
(:func:`removal_order`), so a crash on the way leaves the markers and a rerun may still clean up.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Callable, Literal, Mapping, Sequence

from prep.contracts.file_index import INDEX_DIR
from prep.contracts.cache_marker import CACHE_MARKER
from prep.contracts.marker import JOB_MARKER
from prep.errors import PrepError

__all__ = ["LEASE", "JOB_MARKER", "CACHE_MARKER", "HEARTBEAT_S", "STALE_S", "MAX_SKEW_S", "LANCE_ENTRIES", "Holder",
           "State", "OutputClaim", "classify", "leftovers", "removal_order"]

LEASE = "_prep_lease.json"
HEARTBEAT_S = 10.0  # how often a holder refreshes its lease
STALE_S = 120.0  # a lease not refreshed for this long belongs to a dead (or cut-off) holder
MAX_SKEW_S = STALE_S  # a heartbeat further ahead of this host's clock is not trusted
# Lance's own folders, and the file indexes a prepare step writes beside them (prep.contracts.file_index).
LANCE_ENTRIES = frozenset({"data", "_versions", "_transactions", "_indices", "_deletions", "_refs", INDEX_DIR})

State = Literal["absent", "empty", "leftovers", "table"]
_STRINGS = ("job", "host", "started", "token")


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: the record in :data:`LEASE` (and in a reader cache's user records)."""

    job: str
    host: str
    pid: int
    started: str  # ISO time the holder took the lease
    heartbeat: float  # the holder's clock (seconds since the epoch) at its last refresh
    token: str  # unique per lease taken
    pid_start: str = ""  # the process's start time in clock ticks since boot (Linux): tells a reused pid apart

    def describe(self) -> str:
        return f"{self.job} (host {self.host}, pid {self.pid}, started {self.started})"

    def gone_because(self, stale_after: float, *, now: float, here: str, running: Callable[[int, str], bool]) -> str:
        """Why the holder counts as gone ("" while it runs): the words the takeover's log line uses.

        Args:
            stale_after: seconds without a heartbeat after which a holder on another host is gone.
            now: this host's clock; here: this host's name.
            running: whether ``(pid, pid_start)`` is a live process on this host.

        >>> h = Holder(job="j", host="a", pid=1, started="s", heartbeat=1000.0, token="t")
        >>> h.gone_because(120, now=1100.0, here="b", running=bool), h.gone_because(120, now=1200.0, here="b", running=bool)
        ('', 'no heartbeat for 200s')
        """
        if self.host == here:
            return "" if running(self.pid, self.pid_start) else "no live process"
        age = now - self.heartbeat
        if age < -MAX_SKEW_S:
            return (f"its heartbeat is {-age / 3600:.1f} h ahead of this host's clock, more than the {MAX_SKEW_S:.0f}s "
                    "of clock skew trusted: a clock that far off or a forged record")
        return f"no heartbeat for {age:.0f}s" if age >= stale_after else ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Any, where: str) -> "Holder":
        """The record in ``doc`` (parsed JSON); strict.

        Raises:
            PrepError: one line naming ``where`` and the first bad key.
        """
        if not isinstance(doc, Mapping):
            raise PrepError(f"{where}: lease record must be a JSON object, not {type(doc).__name__}")
        missing = [k for k in (*_STRINGS, "pid", "heartbeat") if k not in doc]
        unknown = sorted(set(doc) - {*_STRINGS, "pid", "heartbeat", "pid_start"})
        if missing or unknown:
            raise PrepError(f"{where}: lease record: missing keys {missing}, unknown keys {unknown}")
        for key in (*_STRINGS, "pid_start"):
            if key in doc and not isinstance(doc[key], str):
                raise PrepError(f"{where}: lease record: {key}={doc[key]!r} must be a string")
        if not isinstance(doc["pid"], int) or isinstance(doc["pid"], bool) or doc["pid"] < 0:
            raise PrepError(f"{where}: lease record: pid={doc['pid']!r} must be an integer >= 0")
        if not isinstance(doc["heartbeat"], (int, float)) or isinstance(doc["heartbeat"], bool):
            raise PrepError(f"{where}: lease record: heartbeat={doc['heartbeat']!r} must be a number (seconds since the epoch)")
        return cls(job=doc["job"], host=doc["host"], pid=doc["pid"], started=doc["started"],
                   heartbeat=float(doc["heartbeat"]), token=doc["token"], pid_start=doc.get("pid_start", ""))

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> "Holder | None":
        """The record in ``data``; None when it is empty or not a lease record (a torn or foreign file)."""
        try:
            return cls.from_json(json.loads(data.decode().strip() or "null"), LEASE)
        except (ValueError, PrepError):  # UnicodeDecodeError is a ValueError
            return None


@dataclass(frozen=True)
class OutputClaim:
    """What was found at an output path, before anything was written there."""

    uri: str
    state: State


def classify(uri: str, names: Sequence[str] | None, preps_table: Callable[[], bool]) -> OutputClaim:
    """What the folder ``uri`` is, by the rules of the module docstring.

    Args:
        names: the entries directly under ``uri`` (its lease left out); None when nothing is there.
        preps_table: whether the committed Lance table there carries prep's metadata (asked only for
            a table without a marker: one made before markers existed).

    Raises:
        PrepError: anything prep must not touch, one line naming ``uri``.

    >>> classify("t", None, bool).state, classify("t", ["_prep_job.json", "data"], bool).state
    ('absent', 'leftovers')
    """
    if names is None:
        return OutputClaim(uri, "absent")
    if not names:
        return OutputClaim(uri, "empty")
    foreign = [n for n in names if n != JOB_MARKER and n not in LANCE_ENTRIES]
    if foreign:
        shown = ", ".join(foreign[:3]) + (" ..." if len(foreign) > 3 else "")
        raise PrepError(f"{uri} exists and holds files prep did not write ({shown}); choose another output path or move them")
    if "_versions" in names:
        if JOB_MARKER not in names and not preps_table():
            raise PrepError(f"{uri} is a Lance table that prep did not write; prep replaces only its own tables: choose another output path")
        return OutputClaim(uri, "table")
    if JOB_MARKER not in names:
        raise PrepError(f"{uri} holds Lance files that no prep job claimed ({', '.join(names)}); choose another output path or remove it")
    return OutputClaim(uri, "leftovers")


def leftovers(names: Sequence[str]) -> list[str]:
    """What clearing a dead job's leftovers removes of ``names``: Lance's folders and the file indexes, never the marker."""
    return [n for n in names if n in LANCE_ENTRIES]


def removal_order(owned: Sequence[str]) -> list[str]:
    """``owned`` (paths relative to an output) in the order to remove them: entries in sub-folders first,
    then top-level ones, the markers last.

    >>> removal_order(["_prep_job.json", "manifest.json", "epoch-00000/split-00000.lance"])
    ['epoch-00000/split-00000.lance', 'manifest.json', '_prep_job.json']
    """
    return sorted(owned, key=lambda rel: (rel in (JOB_MARKER, CACHE_MARKER), "/" not in rel))
