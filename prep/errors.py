"""The one exception type users are meant to read."""

__all__ = ["PrepError"]


class PrepError(Exception):
    """A problem the user can act on: bad config, bad input, a missing path.

    The message names the file, key or row and says what to do; the CLI prints it
    as a single line instead of a traceback.
    """
