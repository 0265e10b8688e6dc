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


@dataclass(frozen=True)
class Step:
    title: str
    argv: tuple[str, ...] = ()  # empty: done inside the orchestrator, ``title`` says what
    cwd: Path | None = None
    log_name: str | None = None  # the log file (under logs/) a command's output goes to
    path_prepend: Path | None = None  # a folder put first on PATH for this command
    action: Callable[[], None] | None = field(default=None, compare=False, repr=False)
    env: Mapping[str, str] = field(default_factory=dict)  # this command's own, on the section's

    def render(self) -> list[str]:
        lines = [f"# {self.title}"]
        if self.argv:
            command = " ".join(_shell_word(str(part)) for part in self.argv)
            if self.path_prepend is not None:
                command = f'PATH={_shell_word(str(self.path_prepend))}:"$PATH" {command}'
            if self.env:
                assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
                command = f"env {assignments} {command}"
            lines.append(f"(cd {_shell_word(str(self.cwd))} && {command})" if self.cwd else command)
        return lines

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` with this step's own variables and PATH change."""
        env = {**base, **self.env}
        if self.path_prepend is not None:
            env["PATH"] = os.pathsep.join(
                part for part in (str(self.path_prepend), env.get("PATH", "")) if part
            )
        return env


def _shell_word(word: str) -> str:
    """``word`` quoted for a shell, except that a ``*`` in it stays a glob the shell expands."""
    if "*" not in word:
        return shlex.quote(word)
    return "*".join(shlex.quote(piece) if piece else "" for piece in word.split("*"))


@dataclass(frozen=True)
class Computed:
    expression: str  # shell text that computes the value on the machine the plan is pasted on
    note: str


@dataclass(frozen=True)
class Section:
    stage: str
    notes: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)  # set on top of the inherited environment
    steps: tuple[Step, ...] = ()
    #: Values that depend on the machine: how the plan computes them where it is pasted (a
    #: shell expression), and a note saying so. A real run uses ``env``, probed on its host.
    computed: Mapping[str, Computed] = field(default_factory=dict)

    def render(self) -> list[str]:
        lines = [f"## {self.stage}"]
        lines += [f"# {note}" for note in self.notes]
        for key, value in sorted(self.env.items()):
            if key in self.computed:
                how = self.computed[key]
                lines.append(f"export {key}={how.expression}  # {how.note}")
            else:
                lines.append(f"export {key}={shlex.quote(value)}")
        for step in self.steps:
            lines += step.render()
        return lines


#: The plan's first line. zsh, macOS's login shell, treats a pasted "# ..." line as a command
#: unless interactive comments are on.
PASTE_NOTE = "# Paste into bash, or into zsh after `setopt interactive_comments`; every command runs as shown."


def render(sections: Sequence[Section]) -> str:
    out: list[str] = [PASTE_NOTE, ""]
    for section in sections:
        out += section.render() + [""]
    return "\n".join(out)


def environment(overrides: Mapping[str, str]) -> dict[str, str]:
    """The inherited environment with a section's variables on top."""
    return {**os.environ, **overrides}
