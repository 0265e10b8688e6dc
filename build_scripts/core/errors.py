"""Errors a user can act on.

A ``BuildError`` message says what is wrong, where, and what fixes it. The CLI prints it
without a traceback and exits with ``exit_code``. Anything else that escapes is a bug.
"""

from __future__ import annotations


class BuildError(Exception):
    """A problem with the user's input or machine, explained in the message."""

    exit_code = 1


class CatalogError(BuildError):
    """The release catalog is malformed or does not know the requested release."""


class UnsupportedHostError(BuildError):
    """The host cannot run this stage (for example: compiling on Linux).

    Exit code 2 tells scripts "everything up to here is done; finish on a Mac".
    """

    exit_code = 2
