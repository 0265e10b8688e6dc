"""What ``--dry-run`` prints: each stage's commands and variables, as a readable script.

Stages describe themselves as ``Section`` values; the real run executes the very same
``Step`` values, so the plan cannot drift from what runs.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..core._log import format_command


@dataclass(frozen=True)
class Step:
    title: str
    argv: tuple[str, ...] = ()  # empty: done inside the orchestrator, ``title`` says what
    cwd: Path | None = None
    log_name: str | None = None  # the log file (under logs/) a command's output goes to
    action: Callable[[], None] | None = field(default=None, compare=False, repr=False)
    env: Mapping[str, str] = field(default_factory=dict)  # this command's own, on the section's

    def render(self) -> list[str]:
        lines = [f"# {self.title}"]
        if self.argv:
            command = format_command(self.argv)
            if self.env:
                assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
                command = f"env {assignments} {command}"
            lines.append(f"(cd {self.cwd} && {command})" if self.cwd else command)
        return lines


@dataclass(frozen=True)
class Section:
    stage: str
    notes: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)  # set on top of the inherited environment
    steps: tuple[Step, ...] = ()

    def render(self) -> list[str]:
        lines = [f"## {self.stage}"]
        lines += [f"# {note}" for note in self.notes]
        lines += [f"export {key}={shlex.quote(value)}" for key, value in sorted(self.env.items())]
        for step in self.steps:
            lines += step.render()
        return lines


def render(sections: Sequence[Section]) -> str:
    out: list[str] = []
    for section in sections:
        out += section.render() + [""]
    return "\n".join(out)


def environment(overrides: Mapping[str, str]) -> dict[str, str]:
    """The inherited environment with a section's variables on top."""
    return {**os.environ, **overrides}
