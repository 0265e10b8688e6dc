"""The command line, as a user meets it: its version, its usage lines, each command's options.

Each stage subcommand offers only the options its code reads (checked against the source:
an option is used when the stage reads the ``Options`` field it fills); every option of
every command, the GPU tools' included, has help text.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from intelmac_torch_builder import __version__, cli

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIR = REPO / "build_scripts"
CONSOLE_SCRIPT = Path(sys.executable).parent / "intelmac-torch"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


COMMANDS = _subcommands(cli.make_parser("intelmac-torch"))


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO)


def test_version_prints_the_tools_own_version() -> None:
    if not CONSOLE_SCRIPT.exists():
        pytest.skip(f"no {CONSOLE_SCRIPT}: the package is not installed in this environment")
    result = _run(str(CONSOLE_SCRIPT), "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"intelmac-torch {__version__}"
    as_module = _run(sys.executable, "-m", "intelmac_torch_builder", "--version")
    assert as_module.returncode == 0, as_module.stderr
    assert as_module.stdout.strip().endswith(__version__)


def test_usage_names_the_program_that_was_run() -> None:
    if not CONSOLE_SCRIPT.exists():
        pytest.skip(f"no {CONSOLE_SCRIPT}: the package is not installed in this environment")
    script = _run(str(CONSOLE_SCRIPT), "index", "--help")
    assert script.stdout.startswith("usage: intelmac-torch index "), script.stdout
    module = _run(sys.executable, "-m", "intelmac_torch_builder", "index", "--help")
    assert module.stdout.startswith("usage: python -m intelmac_torch_builder index "), module.stdout


def test_the_old_release_option_says_where_it_went(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["fetch", "--dry-run", "--version", "2.6.0"], prog="intelmac-torch")
    assert exited.value.code == 2
    assert "--torch X.Y.Z" in capsys.readouterr().err


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {
        option
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction)
        for option in action.option_strings
    }


def test_index_offers_only_what_index_uses() -> None:
    offered = _options(COMMANDS["index"])
    for foreign in ("--retries", "--timeout", "--backoff", "--libomp", "--source", "--sha256",
                    "--trust-on-first-use", "--cache-dir", "--builder"):  # fmt: skip
        assert foreign not in offered, f"index offers {foreign}, which it never reads"
    assert {"--torch", "--python", "--wheels-dir", "--work-dir", "--dry-run"} <= offered


# Which Options fields each option fills (core/options.py resolve()).
FIELDS = {
    "torch": {"line"},
    "catalog": {"catalog", "line"},
    "python": {"pythons"},
    "builder": {"builder"},
    "libomp": {"libomp", "libomp_prefix"},
    "source": {"source"},
    "sha256": {"sha256"},
    "trust_on_first_use": {"trust_on_first_use"},
    "retries": {"fetch"},
    "timeout": {"fetch"},
    "backoff": {"fetch"},
    "cache_dir": {"cache_dir"},
    "work_dir": {"work_dir", "layout"},
    "wheels_dir": {"wheels_dir"},
    "dry_run": {"dry_run"},
    "wait": {"wait"},
    # --companion makes the line the torch line's companion and remembers the torch build.
    "companion": {"line", "companion_of"},
    "torch_only": {"build_companions"},
    "shared_only": {"shared_only"},
}
STAGE_COMMANDS = ("fetch", "patch", "build", "repair", "verify", "index", "all")


def _registering_module(command: str) -> Path:
    """The stage module whose ``_stage.register(subparsers, "<command>", ...)`` adds it."""
    if command == "all":
        return PACKAGE_DIR / "pipeline.py"
    for path in sorted((PACKAGE_DIR / "stages").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "register"
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value == command
            ):
                return path
    raise AssertionError(f"no stage module registers {command}")


def _code_of(module: Path, seen: set[Path] | None = None) -> Iterator[Path]:
    """The module, the stage and platform modules it imports (and theirs), and the shared
    stage runner."""
    seen = set() if seen is None else seen
    if module in seen:
        return
    seen.add(module)
    yield module
    if len(seen) == 1:
        yield PACKAGE_DIR / "core" / "_stage.py"
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] in (
            "stages",
            "platforms",
        ):
            for alias in node.names:
                found = PACKAGE_DIR / node.module.split(".")[-1] / f"{alias.name}.py"  # type: ignore[union-attr]
                yield from _code_of(found, seen)


def _fields_read(paths: Iterator[Path]) -> set[str]:
    read: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "options"
            ):
                read.add(node.attr)
    return read


@pytest.mark.parametrize("command", STAGE_COMMANDS)
def test_a_stage_command_offers_only_options_its_code_reads(command: str) -> None:
    read = _fields_read(_code_of(_registering_module(command)))
    assert "line" in read, "the reader found no options.<field> in the stage: it is broken"
    for action in COMMANDS[command]._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.dest in FIELDS, f"{command} {action.option_strings}: add it to FIELDS"
        assert FIELDS[action.dest] & read, (
            f"{command} offers {'/'.join(action.option_strings)} but never reads "
            f"options.{' or options.'.join(sorted(FIELDS[action.dest]))}"
        )


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def _parser_of(main_module: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser a script's main() builds, caught when it parses."""

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Captured(self)

    module = importlib.import_module(main_module)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    entry = getattr(module, "parse_args", None) or module.main
    with pytest.raises(_Captured) as caught:
        entry([])
    return caught.value.parser


def _without_help(name: str, parser: argparse.ArgumentParser) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            missing += [f"{name} {choice.dest}" for choice in action._choices_actions if not choice.help]
            missing += [
                item for sub, subparser in action.choices.items()
                for item in _without_help(f"{name} {sub}", subparser)
            ]  # fmt: skip
        elif not action.help:
            missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_subcommand_option_has_help() -> None:
    assert _without_help("intelmac-torch", cli.make_parser("intelmac-torch")) == []


@pytest.mark.parametrize(
    "script",
    [
        "intelmac_torch_builder.maint.newfile_patch",
        "intelmac_torch_builder.maint.toolchain_pins",
        "tests.regress.__main__",
        "tests.bench.__main__",
        "intelmac_torch_builder.ci.publish_index",
        "intelmac_torch_builder.ci.test_wheel",
        "intelmac_torch_builder.ci.wheel_checks",
    ],
)
def test_every_tool_option_has_help(script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if script.startswith("tests."):
        pytest.importorskip("torch")
    parser = _parser_of(script, monkeypatch)
    assert _without_help(script, parser) == []


def test_check_upstream_help_is_written_for_users() -> None:
    text = COMMANDS["check-upstream"].format_help()
    assert "``" not in text and "**" not in text, "reST markup in --help"
    assert "tests/" not in text and "test doubles" not in text, "talk of tests in --help"
    assert "--torch X.Y.Z" in text


@pytest.mark.parametrize("command", ["fetch", "all", "index"])
def test_a_bad_option_shows_that_commands_usage(command: str) -> None:
    result = _run(sys.executable, "-m", "intelmac_torch_builder", command, "--no-such-option")
    assert result.returncode == 2
    assert result.stderr.startswith(f"usage: python -m intelmac_torch_builder {command} "), result.stderr
    assert "unrecognized arguments: --no-such-option" in result.stderr


def test_each_command_is_found_in_the_module_that_registers_it() -> None:
    """cli.COMMAND_MODULES (a run imports only the module of its command) is what they register."""
    registered = {}
    for name in cli.SUBCOMMAND_MODULES:
        subparsers = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(name).register(subparsers)
        registered.update(dict.fromkeys(subparsers.choices, name))
    assert cli.COMMAND_MODULES == registered
    assert set(COMMANDS) == set(registered)


def _loaded(code: str) -> set[str]:
    """The project's modules a fresh interpreter has imported after ``code``."""
    probe = f"import sys\n{code}\nprint(*(m for m in sys.modules if m.startswith('intelmac_torch_builder')))"
    return set(_run(sys.executable, "-c", probe).stdout.split())


def test_a_command_imports_only_its_own_module() -> None:
    """What a no-op `make build` spends its time on: `all` imports the pipeline and what it
    needs, and none of the other commands' modules."""
    for_all = _loaded("from intelmac_torch_builder import cli\ncli.make_parser(None, 'all')")
    pipeline = _loaded("import intelmac_torch_builder.pipeline")
    assert "intelmac_torch_builder.maint.rehearse" in _loaded("from intelmac_torch_builder import cli\ncli.make_parser()")
    assert for_all - pipeline == {"intelmac_torch_builder.cli"}
