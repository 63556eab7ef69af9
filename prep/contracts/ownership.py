"""Who may write an output: the lease (one writer at a time), the marker (prep wrote here), the claim.

**Lease.** Every command that writes takes an exclusive lease on its output before it
reads any input (:func:`hold`): the file :data:`LEASE` in the output folder, naming its
holder (host, pid, start time). Locally it is an ``flock`` on that file (it dies with its
process, SIGKILL included); on ``s3://`` it is created with ``If-None-Match: *`` and kept
fresh by a heartbeat thread that rewrites it every :data:`HEARTBEAT_S` with ``If-Match``.
A second run fails at once, naming the holder. A lease whose holder is dead (its pid gone
on the same host, or no heartbeat for :data:`STALE_S`) is taken over (a conditional
replace, so one taker wins), and the log says so. A heartbeat more than :data:`MAX_SKEW_S`
ahead of this host's clock is not trusted (a clock that far off, or a forged record, would
otherwise hold the output for as long as it is ahead): the lease is taken over, and the
log says why. Locally the heartbeat is kept too, so a filesystem whose ``flock`` does not
reach other hosts cannot give the lease twice.

**One lease per location.** The lease is keyed by :func:`lease_location`, the one spelling
of the output: ``..``, ``.``, ``//`` and a trailing slash resolved, ``file://`` dropped, a
local path's symlinks followed. Two spellings of one table (``s3://b/x.lance`` and
``s3://b/sub/../x.lance``, which Lance opens as the same table) are one lease.

**Marker and claim.** A job may write only where nothing is, where an empty folder is, or
where prep wrote before. It proves the last case with a marker (:data:`JOB_MARKER` for
tables and materialized outputs, :data:`CACHE_MARKER` for reader caches, both written by
:func:`write_marker`), put in the folder before the first data file and kept after the
commit. So a folder at ``--output`` is, in order (:func:`inspect_output`):

- absent or empty: claimed (the marker is written);
- a marker plus Lance's own folders (and prep's file indexes) and no committed version: the leftovers of a job that
  died before its commit, cleared and claimed (only under the lease, so never a live run's);
- a committed prep table (a marker, or prep's metadata in a table made before markers
  existed): replaced only with ``overwrite``, by a new version;
- anything else (a user's files, a Lance table prep did not write, a marker beside foreign
  files): an error, with or without ``overwrite``, before anything is written.

A storage error while looking is an error, never "absent": a transient failure must not
make a real table look like leftovers. :func:`remove_owned` is the one remover of files a
layout owns; nothing else in prep deletes an output's files.
"""

from __future__ import annotations

import fcntl
import functools
import json
import logging
import os
import posixpath
import re
import socket
import threading
import time
import uuid
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any, Iterator, Literal, Protocol, Sequence

from prep.contracts.file_index import INDEX_DIR
from prep.contracts.cache_marker import CACHE_MARKER, CacheMarker
from prep.contracts.marker import JOB_MARKER, JobMarker
from prep.contracts.table import METADATA_KEY
from prep.io import lance_tables
from prep.io import storage
from prep.errors import PrepError, one_line

__all__ = ["LEASE", "JOB_MARKER", "CACHE_MARKER", "HEARTBEAT_S", "STALE_S", "MAX_SKEW_S", "Holder", "LeaseHeld", "Lease",
           "lease_location", "take_lease", "hold", "OutputClaim", "entries", "inspect_output", "claim_outputs", "write_marker",
           "write_cache_marker", "remove_owned"]

log = logging.getLogger(__name__)

LEASE = "_prep_lease.json"
HEARTBEAT_S = 10.0  # how often a holder refreshes its lease
STALE_S = 120.0  # a lease not refreshed for this long belongs to a dead (or cut-off) holder
MAX_SKEW_S = STALE_S  # a heartbeat further ahead of this host's clock is not trusted
_RECORD_BYTES = 1024  # local records are written padded, in one pwrite, so a reader never sees half of one
# Lance's own folders, and the file indexes a prepare step writes beside them (prep.contracts.file_index).
_LANCE_ENTRIES = {"data", "_versions", "_transactions", "_indices", "_deletions", "_refs", INDEX_DIR}

State = Literal["absent", "empty", "leftovers", "table"]


# --- lease ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Holder:
    """Who holds a lease: the record in :data:`LEASE`."""

    job: str
    host: str
    pid: int
    started: str  # ISO time the holder took the lease
    heartbeat: float  # the holder's clock (seconds since the epoch) at its last refresh
    token: str  # unique per lease taken
    pid_start: str = ""  # the process's start time in clock ticks since boot (Linux): tells a reused pid apart

    def describe(self) -> str:
        return f"{self.job} (host {self.host}, pid {self.pid}, started {self.started})"

    def alive(self, stale_after: float) -> bool:
        """Whether the holder still runs: its pid on this host, else a heartbeat within ``stale_after``
        (and no more than :data:`MAX_SKEW_S` ahead of this host's clock)."""
        return not self.gone_because(stale_after)

    def gone_because(self, stale_after: float) -> str:
        """Why the holder counts as gone ("" while it runs): the words the takeover's log line uses."""
        if self.host == socket.gethostname():
            return "" if _pid_alive(self.pid, self.pid_start) else "no live process"
        age = time.time() - self.heartbeat
        if age < -MAX_SKEW_S:
            return (f"its heartbeat is {-age / 3600:.1f} h ahead of this host's clock, more than the {MAX_SKEW_S:.0f}s "
                    "of clock skew trusted: a clock that far off or a forged record")
        return f"no heartbeat for {age:.0f}s" if age >= stale_after else ""

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> "Holder | None":
        """The record in ``data``; None when it is empty or not a lease record (a torn or foreign file)."""
        try:
            doc = json.loads(data.decode().strip() or "null")
            return cls(**doc) if isinstance(doc, dict) else None
        except (ValueError, TypeError, UnicodeDecodeError):
            return None

    @classmethod
    def me(cls, job: str) -> "Holder":
        return cls(job=job, host=socket.gethostname(), pid=os.getpid(), started=_now(), heartbeat=time.time(),
                   token=uuid.uuid4().hex, pid_start=_pid_start(os.getpid()))


class LeaseHeld(PrepError):
    """Another live run holds the lease."""

    def __init__(self, uri: str, holder: Holder | None) -> None:
        who = holder.describe() if holder else "another prep run (its record is being written)"
        super().__init__(f"{uri} is being written by {who}; wait for it to finish or choose another output")
        self.holder = holder


class Lease:
    """An exclusive lease on one output, refreshed by a daemon thread until :meth:`release`.

    Use :func:`take_lease` or :func:`hold`; ``lost`` is set when another run took the lease
    over (this run looked dead), and :meth:`check` raises then.
    """

    def __init__(self, uri: str, slot: "_Slot", holder: Holder, heartbeat_s: float) -> None:
        self.uri, self.holder = uri, holder
        self.lost: str | None = None
        self._slot = slot
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(heartbeat_s,), name="prep-lease", daemon=True)
        self._thread.start()

    def _beat(self, every: float) -> None:
        while not self._stop.wait(every) and not self.lost:
            try:
                self._refresh()
            except PrepError as exc:  # a storage hiccup: try again at the next beat
                log.warning("cannot refresh the lease on %s (%s)", self.uri, one_line(exc, limit=200))

    def _refresh(self) -> None:
        with self._lock:
            if self.lost:
                return
            try:
                self.holder = self._slot.refresh(self.holder)
            except LeaseHeld as exc:
                self.lost = str(exc)
                log.error("lost the lease on %s: %s", self.uri, exc)

    def check(self) -> None:
        """Refreshes the lease now and raises when it was taken over: call it before each commit.

        Raises:
            PrepError: another run took the lease over (this one looked dead); it must not commit.
        """
        self._refresh()
        if self.lost:
            raise PrepError(f"{self.uri}: this run lost its lease ({self.lost}); nothing more was committed: rerun")

    def release(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        if not self.lost:
            self._slot.drop(self.holder)


def take_lease(uri: str, job: str, s3: storage.S3Options | None = None, *, stale_after: float = STALE_S,
               heartbeat_s: float = HEARTBEAT_S) -> Lease:
    """Takes the exclusive lease on the output ``uri`` (a folder, local or ``s3://``) for ``job``.

    Raises:
        LeaseHeld: a live run holds it (one line naming the holder).
        PrepError: the storage cannot be written (naming it).
    """
    me = Holder.me(job)
    storage.scheme(uri)  # an unknown scheme is the one error, before anything else is said about the output
    uri = lease_location(uri)
    if uri.startswith("s3://"):
        slot: _Slot = _S3Slot(uri, (s3 or storage.S3Options()).resolved())
    elif storage.is_remote(uri):
        log.warning("%s: no lease on this store (only local paths and s3:// have one): a concurrent run is not detected", uri)
        slot = _NoSlot()
    else:
        slot = _LocalSlot(storage.fs_path(uri))
    previous = slot.take(me, stale_after)
    if previous is not None:
        log.warning("%s: taking over the lease of %s, which is gone (%s)", uri, previous.describe(),
                    previous.gone_because(stale_after) or f"no live process, no heartbeat for {stale_after:.0f}s")
    return Lease(uri, slot, me, heartbeat_s)


def lease_location(uri: str) -> str:
    """The one spelling of an output location that its lease is keyed by: ``file://`` dropped, a local
    path absolute with its symlinks, ``.``, ``..``, ``//`` and a trailing slash resolved; on object
    stores the key normalized the same way (never above the bucket).

    >>> lease_location("s3://b/sub/../x.lance/"), lease_location("s3://b//./x.lance"), lease_location("file:///d/./x//y/")
    ('s3://b/x.lance', 's3://b/x.lance', '/d/x/y')
    """
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    if "://" not in uri:
        return os.path.realpath(os.path.expanduser(uri))
    scheme, rest = uri.split("://", 1)
    bucket, _, key = rest.partition("/")
    key = posixpath.normpath("/" + re.sub("/+", "/", key)).lstrip("/")  # rooted: ".." cannot climb above the bucket
    return f"{scheme}://{bucket}/{key}" if key else f"{scheme}://{bucket}"


@contextmanager
def hold(uris: Sequence[str], job: str, s3: storage.S3Options | None = None) -> Iterator[list[Lease]]:
    """Holds the leases on every path in ``uris`` for the block (all or none); checks none was lost at the end."""
    with ExitStack() as stack:
        leases = []
        for uri in dict.fromkeys(lease_location(u) for u in uris):
            lease = take_lease(uri, job, s3)
            stack.callback(lease.release)
            leases.append(lease)
        yield leases
        for lease in leases:
            lease.check()


class _Slot(Protocol):
    """Where one lease record lives; ``take`` returns the dead holder it replaced (None: it was free)."""

    def take(self, me: Holder, stale_after: float) -> Holder | None: ...

    def refresh(self, me: Holder) -> Holder: ...

    def drop(self, me: Holder) -> None: ...


class _NoSlot(_Slot):
    def take(self, me: Holder, stale_after: float) -> Holder | None:
        return None

    def refresh(self, me: Holder) -> Holder:
        return me

    def drop(self, me: Holder) -> None:
        return None


class _LocalSlot(_Slot):
    """``flock`` on ``FOLDER/_prep_lease.json``; the folder is made when missing and removed at release if still empty."""

    def __init__(self, folder: str) -> None:
        self.folder, self.path = folder, os.path.join(folder, LEASE)
        self._fd: int | None = None
        self._made_folder = False

    def take(self, me: Holder, stale_after: float) -> Holder | None:
        if os.path.exists(self.folder) and not os.path.isdir(self.folder):
            raise PrepError(f"{self.folder} is a file, not a folder; choose another output path")
        for _ in range(20):  # only a release racing with this take makes it go round
            if not os.path.isdir(self.folder):
                try:
                    os.makedirs(self.folder)
                    self._made_folder = True
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise PrepError(f"cannot write to {self.folder} ({type(exc).__name__}: {one_line(exc, limit=200)})") from None
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:
                continue  # the folder was removed by a release meanwhile
            except OSError as exc:
                raise PrepError(f"cannot write to {self.folder} ({type(exc).__name__}: {one_line(exc, limit=200)})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_fd(fd)
                os.close(fd)
                raise LeaseHeld(self.folder, holder) from None
            if not _same_file(fd, self.path):  # released and unlinked between our open and our lock
                os.close(fd)
                continue
            old = Holder.decode(os.pread(fd, 64 << 10, 0))  # a dead holder's record, or nothing
            if old is not None and old.host != socket.gethostname() and old.alive(stale_after):
                os.close(fd)  # a holder on another host this filesystem's flock does not see
                raise LeaseHeld(self.folder, old)
            self._fd = fd
            self._write(me)
            return old
        raise PrepError(f"cannot take the lease {self.path}: it keeps being replaced; try again")

    def _write(self, me: Holder) -> None:
        assert self._fd is not None
        os.pwrite(self._fd, me.encode().ljust(_RECORD_BYTES), 0)

    def refresh(self, me: Holder) -> Holder:
        new = Holder(**{**asdict(me), "heartbeat": time.time()})
        self._write(new)
        return new

    def drop(self, me: Holder) -> None:
        if self._fd is None:
            return
        try:
            if _same_file(self._fd, self.path):
                os.unlink(self.path)  # while still locked: a waiter that opened it sees a removed file and retries
        finally:
            os.close(self._fd)
            self._fd = None
        if self._made_folder:
            try:
                os.rmdir(self.folder)  # only when the run left nothing there (e.g. it failed on its input)
            except OSError:
                pass


class _S3Slot(_Slot):
    """``s3://.../_prep_lease.json``: created with ``If-None-Match: *``, refreshed and taken over with ``If-Match``."""

    def __init__(self, uri: str, s3: storage.S3Options) -> None:
        self.uri = storage.join(uri, LEASE)
        self.bucket, _, self.key = self.uri[len("s3://"):].partition("/")
        self._client = _s3_client(s3)
        self._etag: str | None = None

    def take(self, me: Holder, stale_after: float) -> Holder | None:
        for _ in range(20):
            if self._put(me, IfNoneMatch="*"):
                return None
            try:
                got = self._call("get_object", Bucket=self.bucket, Key=self.key)
            except _Missing:
                continue  # released meanwhile
            old, etag = Holder.decode(got["Body"].read()), got["ETag"]
            if old is not None and old.token == me.token:  # our own create, retried after a lost reply
                self._etag = etag
                return None
            if old is not None and old.alive(stale_after):
                raise LeaseHeld(self.uri.rsplit("/", 1)[0], old)
            if self._put(me, IfMatch=etag):
                return old
        raise PrepError(f"cannot take the lease {self.uri}: it keeps being replaced; try again")

    def refresh(self, me: Holder) -> Holder:
        new = Holder(**{**asdict(me), "heartbeat": time.time()})
        if not self._put(new, IfMatch=self._etag):
            try:
                now = Holder.decode(self._call("get_object", Bucket=self.bucket, Key=self.key)["Body"].read())
            except (_Missing, PrepError):
                now = None
            raise LeaseHeld(self.uri.rsplit("/", 1)[0], now)
        return new

    def drop(self, me: Holder) -> None:
        try:
            try:
                self._call("delete_object", Bucket=self.bucket, Key=self.key, IfMatch=self._etag)
            except PrepError:  # a store without conditional deletes: delete it if it is still ours
                got = self._call("get_object", Bucket=self.bucket, Key=self.key)
                if got["ETag"] != self._etag:
                    raise _Conflict() from None
                self._call("delete_object", Bucket=self.bucket, Key=self.key)
        except (_Conflict, _Missing):
            log.warning("%s: the lease was no longer this run's at release; left as it is", self.uri)

    def _put(self, me: Holder, **condition: Any) -> bool:
        """One conditional PUT; False when its condition did not hold."""
        try:
            self._etag = self._call("put_object", Bucket=self.bucket, Key=self.key, Body=me.encode(), **condition)["ETag"]
            return True
        except _Conflict:
            return False
        except _Missing:
            return False

    def _call(self, op: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self._client, op)(**kwargs)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                raise _Conflict() from None
            if code == "NoSuchBucket":
                raise PrepError(f"cannot write to {self.uri.rsplit('/', 1)[0]} ({code}: {one_line(exc, limit=200)})") from None
            if code in ("NoSuchKey", "404") or status == 404:
                raise _Missing() from None
            if status == 501 or code == "NotImplemented":
                raise PrepError(f"{self.uri}: this store does not support conditional writes (If-None-Match), which prep "
                                "needs to keep two runs off one output; use AWS S3, MinIO or R2, or a local path") from None
            raise PrepError(f"cannot take the lease {self.uri} ({code}: {one_line(exc, limit=200)})") from None
        except BotoCoreError as exc:
            raise PrepError(f"cannot take the lease {self.uri} ({type(exc).__name__}: {one_line(exc, limit=200)})") from None


class _Conflict(Exception):
    """A conditional request whose condition did not hold."""


class _Missing(Exception):
    """No such object."""


@functools.lru_cache(maxsize=8)
def _s3_client(s3: storage.S3Options) -> Any:
    """A botocore S3 client on the configured endpoint and credentials (s3fs has no conditional PUT)."""
    import botocore.session
    from botocore.config import Config

    policy = s3.retry
    session = botocore.session.get_session()
    return session.create_client(
        "s3", region_name=s3.region, endpoint_url=s3.endpoint_url, aws_access_key_id=s3.access_key_id,
        aws_secret_access_key=s3.secret_access_key, aws_session_token=s3.session_token,
        config=Config(retries={"total_max_attempts": policy.max_attempts, "mode": "standard"},
                      connect_timeout=policy.connect_timeout_s, read_timeout=policy.read_timeout_s))


def _read_fd(fd: int) -> Holder | None:
    for _ in range(50):  # a holder that has just locked it writes its record next: read again, for up to a second
        holder = Holder.decode(os.pread(fd, 64 << 10, 0))
        if holder is not None:
            return holder
        time.sleep(0.02)
    return None


def _same_file(fd: int, path: str) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _pid_start(pid: int) -> str:
    """The process's start time in clock ticks since boot, "" where /proc is not there."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return "" if fields[0] == "Z" else fields[19]  # a zombie is dead: its locks are gone
    except (OSError, IndexError):
        return ""


def _pid_alive(pid: int, started: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive
    now = _pid_start(pid)
    return not (started and now != started)  # a pid reused by another process (or a zombie) is not the holder


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --- marker, claim, removal ----------------------------------------------------------------------
@dataclass(frozen=True)
class OutputClaim:
    """What was found at an output path, before anything was written there."""

    uri: str
    state: State


def entries(uri: str, s3: storage.S3Options | None = None) -> list[str] | None:
    """Names directly under ``uri`` (its lease left out); None when nothing is there. Storage errors raise."""
    fs, path = storage.filesystem(uri, s3)
    try:
        if fs.isfile(path):
            raise PrepError(f"{uri} is a file, not a table folder; choose another output path")
        listed = fs.ls(path, detail=False, refresh=True) if storage.is_remote(uri) else fs.ls(path, detail=False)
    except FileNotFoundError:
        return None
    except PrepError:
        raise
    except Exception as exc:  # permission denied, throttling, network: never read as "absent"
        raise PrepError(f"cannot check the output {uri} ({type(exc).__name__}: {one_line(exc, limit=200)}); nothing was changed") from None
    return sorted(n for n in (posixpath.basename(p.rstrip("/")) for p in listed) if n != LEASE)


def inspect_output(uri: str, s3: storage.S3Options | None = None) -> OutputClaim:
    """Classifies ``uri`` (see the module docstring); raises for anything prep must not touch."""
    names = entries(uri, s3)
    if names is None:
        return OutputClaim(uri, "absent")
    if not names:
        return OutputClaim(uri, "empty")
    foreign = [n for n in names if n != JOB_MARKER and n not in _LANCE_ENTRIES]
    if foreign:
        shown = ", ".join(foreign[:3]) + (" ..." if len(foreign) > 3 else "")
        raise PrepError(f"{uri} exists and holds files prep did not write ({shown}); choose another output path or move them")
    if "_versions" in names:
        ds = lance_tables.open_table(uri, storage_options=storage.lance_storage_options(uri, s3))
        if JOB_MARKER not in names and METADATA_KEY not in (ds.schema.metadata or {}):
            raise PrepError(f"{uri} is a Lance table that prep did not write; prep replaces only its own tables: choose another output path")
        return OutputClaim(uri, "table")
    if JOB_MARKER not in names:
        raise PrepError(f"{uri} holds Lance files that no prep job claimed ({', '.join(names)}); choose another output path or remove it")
    return OutputClaim(uri, "leftovers")


def claim_outputs(uris: list[str], job: str, *, overwrite: bool, s3: storage.S3Options | None = None) -> list[OutputClaim]:
    """Checks every path in ``uris`` first, then makes each this job's: clears a dead
    job's leftovers and writes the marker. Nothing is written unless all paths pass.
    The caller holds the leases on ``uris`` (:func:`hold`): leftovers are a dead job's only then.

    Raises:
        PrepError: a path holds something prep did not write, a table exists and
            ``overwrite`` is off, or the storage could not be read.
    """
    claims = [inspect_output(uri, s3) for uri in uris]
    for claim in claims:
        if claim.state == "table" and not overwrite:
            raise PrepError(f"{claim.uri} already holds a table; pass --overwrite (or overwrite: true) to replace it")
    for claim in claims:
        if claim.state == "leftovers":
            log.warning("%s: clearing the leftovers of a prep job that died before its commit", claim.uri)
            remove_owned(claim.uri, [n for n in entries(claim.uri, s3) or [] if n in _LANCE_ENTRIES], s3)
        write_marker(claim.uri, JobMarker.now(job), s3)
    return claims


def write_marker(uri: str, marker: JobMarker, s3: storage.S3Options | None = None) -> None:
    """Writes ``marker`` as :data:`JOB_MARKER` in the folder ``uri`` (atomically)."""
    _write(uri, JOB_MARKER, marker.to_json(), s3)


def write_cache_marker(uri: str, marker: CacheMarker, s3: storage.S3Options | None = None) -> None:
    """Writes ``marker`` as :data:`CACHE_MARKER` in the folder ``uri`` (atomically)."""
    _write(uri, CACHE_MARKER, marker.to_json(), s3)


def _write(uri: str, name: str, doc: dict[str, Any], s3: storage.S3Options | None) -> None:
    try:
        storage.write_json_atomic(storage.join(uri, name), doc, s3)
    except OSError as exc:  # e.g. a bucket that does not exist: say where
        raise PrepError(f"cannot write to {uri} ({type(exc).__name__}: {one_line(exc, limit=200)})") from None


def remove_owned(uri: str, owned: Sequence[str], s3: storage.S3Options | None = None) -> None:
    """Removes ``owned`` (paths under ``uri`` that the caller's layout wrote, files or trees), and nothing else.

    Entries in sub-folders go first, then top-level ones, the markers last (a crash on the
    way leaves them, so a rerun may still clean up); a local sub-folder is removed only when
    removing its entries emptied it (never a folder prep did not put anything in).
    """
    fs, root = storage.filesystem(uri, s3)
    root = root.rstrip("/")
    markers = (JOB_MARKER, CACHE_MARKER)
    ordered = sorted(owned, key=lambda rel: (rel in markers, "/" not in rel))
    emptied: set[str] = set()
    for rel in ordered:
        target = f"{root}/{rel}"
        if fs.exists(target):
            fs.rm(target, recursive=True)
        if "/" in rel:
            emptied.add(rel.rsplit("/", 1)[0])
    if not storage.is_remote(uri):
        for folder in sorted(emptied, reverse=True):
            try:
                os.rmdir(f"{root}/{folder}")
            except OSError:
                pass  # not empty: something else is there
