"""Errors a user can act on.

A ``BuildError`` message says what is wrong, where, and what fixes it. The CLI prints it
without a traceback and exits with ``exit_code``. Anything else that escapes is a bug.
"""

from __future__ import annotations

#: The command line's exit codes; docs/build-reference.md documents them and what `make build` makes of them.
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2  # argparse
EXIT_NEEDS_MAC = 3


class BuildError(Exception):
    """A problem with the user's input or machine, explained in the message."""

    exit_code = EXIT_ERROR


class CatalogError(BuildError):
    """The release catalog is malformed or does not know the requested release."""


class UnsupportedHostError(BuildError):
    """The host cannot run this stage (for example: compiling on Linux).

    Exit code 3 (``NEEDS_MAC``) tells scripts "everything up to here is done; finish on a
    Mac". 1 is any error, 2 is a usage error (argparse's own code).
    """

    exit_code = EXIT_NEEDS_MAC


class LockBusyError(BuildError):
    """Another build of the line holds its lock and ``--no-wait`` was given.

    Nothing was done, and the line's records (``outcome.json``) belong to that other build,
    so a refused run leaves them alone.
    """
