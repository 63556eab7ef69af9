"""What a prep command shows besides its result: timestamped log lines, progress, no third-party noise.

A default run shows prep's own lines (warnings and errors) and a progress bar;
``-v`` shows prep's INFO lines and everything Ray and Lance say (banners, the
token-auth notice, Ray Data's INFO lines, Lance's fork-safety warning, worker
output). ``--quiet`` drops the progress bars too. The CLI calls :func:`configure`
once; library code asks :func:`verbose` and :func:`quiet` (a library user who never
calls :func:`configure` gets Ray's and Lance's defaults and no bars when not on a terminal).
"""

from __future__ import annotations

import logging
import warnings

__all__ = ["configure", "verbose", "quiet", "third_party_level", "quiet_third_party", "LOG_FORMAT", "DATE_FORMAT"]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"

# Loggers that talk at INFO/WARNING about their own machinery on every run.
_NOISY = ("ray", "ray.data", "ray.train", "filelock", "urllib3", "httpx", "botocore", "s3fs", "fsspec")

_state = {"verbose": True, "quiet": False}  # a library user who never calls configure() sees everything


def configure(*, verbose: bool = False, quiet: bool = False) -> None:
    """Sets up logging for one CLI run: timestamps; INFO with ``verbose``, else WARNING and no noise."""
    _state.update(verbose=verbose, quiet=quiet)
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format=LOG_FORMAT, datefmt=DATE_FORMAT, force=True)
    for handler in logging.root.handlers:
        handler.addFilter(_printed_on_the_way)
    if not verbose:
        quiet_third_party()


def _printed_on_the_way(record: logging.LogRecord) -> bool:
    """False for a record that a handler of its own logger (or of a parent below the root) has printed already.

    Libraries such as huggingface_hub give their logger a stderr handler of their own and still let records
    propagate to the root, where this process's handler would print each line a second time.
    """
    logger: logging.Logger | None = logging.getLogger(record.name)
    while logger is not None and logger is not logging.root:
        if any(record.levelno >= h.level and not isinstance(h, logging.NullHandler) for h in logger.handlers):
            return False
        logger = logger.parent if logger.propagate else None
    return True


def quiet_third_party() -> None:
    """Keeps Ray's and Lance's routine messages out of this process's output (unless ``-v``).

    Called again after Ray and Ray Data configure their own loggers (at ``ray.init``),
    which reset the levels set here.
    """
    if _state["verbose"]:
        return
    warnings.filterwarnings("ignore", message="lance is not fork-safe")  # prep forks nothing that holds Lance state
    for name in _NOISY:
        logging.getLogger(name).setLevel(third_party_level())


def verbose() -> bool:
    """Whether the user asked for everything (``-v``; True when :func:`configure` was never called)."""
    return _state["verbose"]


def quiet() -> bool:
    """Whether progress bars are off (``--quiet``)."""
    return _state["quiet"]


def third_party_level() -> int:
    """The level Ray's loggers get: INFO with ``-v``, else ERROR (their warnings are about their own setup).

    Example:
        >>> logging.getLevelName(third_party_level()) in ("INFO", "ERROR")
        True
    """
    return logging.INFO if _state["verbose"] else logging.ERROR
