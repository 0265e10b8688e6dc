"""Headers as upstream's install step leaves them in a wheel.

From 2.14, the install step wraps every header it installs under ``torch/include`` (outside
the stable-ABI folders) in a packaging-time guard that the source tree lacks::

    #if !defined(TORCH_STABLE_ONLY) && !defined(TORCH_TARGET_VERSION)
    <the source file>
    #else
    #error "This file should not be included when either TORCH_STABLE_ONLY or ..."
    #endif  // !defined(TORCH_STABLE_ONLY) && !defined(TORCH_TARGET_VERSION)

(the official 2.14.1 wheel has thousands such headers). So a patched source header and its
installed copy differ by exactly that guard; the verify stage compares them without it.
"""

from __future__ import annotations

from dataclasses import dataclass

GUARD_OPEN = b"#if !defined(TORCH_STABLE_ONLY) && !defined(TORCH_TARGET_VERSION)"


@dataclass(frozen=True)
class Guard:
    """The guard around one installed header: its first line, and its last three."""

    opening: bytes  # "#if ...\n"
    closing: bytes  # "\n#else\n#error ...\n#endif ...\n"

    def wrap(self, body: bytes) -> bytes:
        """``body`` (a source header) as the install step leaves it."""
        return self.opening + body + self.closing


def split(installed: bytes) -> tuple[Guard, bytes] | None:
    """The guard and the source text of a guarded header; None when it carries no guard.

    Raises ValueError for a header that opens with the guard but does not end in its
    ``#else``/``#error``/``#endif``: that is not the install step's form.
    """
    if not installed.startswith(GUARD_OPEN):
        return None
    opening, _, rest = installed.partition(b"\n")
    # The install step appends "\n#else\n#error ...\n#endif ...\n" to the file as it is: after a
    # final newline that reads as a blank line; a source whose last line has none (2.14.1's
    # symm_mem/env.hpp) gets its "#else" on the next line. Either way the body is what precedes.
    body, separator, tail = rest.rpartition(b"\n#else\n")
    lines = tail.splitlines(keepends=True)
    if (
        not separator
        or len(lines) != 2
        or not lines[0].startswith(b"#error")
        or not lines[1].startswith(b"#endif")
    ):
        raise ValueError("a guarded header that does not end in the guard's #else/#error/#endif")
    return Guard(opening + b"\n", separator + tail), body


def source_form(installed: bytes) -> bytes:
    """An installed header as its source file reads: without the install step's guard."""
    found = split(installed)
    return installed if found is None else found[1]
