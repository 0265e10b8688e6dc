"""The patched torch.backends.mps against the contract of issue 3, on Linux.

Each scenario of intelmac_torch_builder.maint.check_upstream runs twice: against the new module alone
(stand-ins for every upstream file) and against the real 2.6.0 tree's own
torch/backends files with the series' Python hunks applied. torch._C's new bindings are
test doubles over the real policy header; see check_upstream's docstring.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from intelmac_torch_builder.maint import check_upstream
from intelmac_torch_builder.core.contract import ALLOW_ENV
from intelmac_torch_builder.maint.check_upstream import Sandbox

SCENARIOS = sorted(check_upstream.SCENARIOS)


@pytest.mark.parametrize("name", SCENARIOS)
def test_new_module_alone(module_sandbox: Sandbox, name: str) -> None:
    check_upstream.SCENARIOS[name](module_sandbox)


@pytest.mark.upstream
@pytest.mark.parametrize("name", SCENARIOS)
def test_on_upstream_2_6_0_tree(source_2_6_sandbox: Sandbox, name: str) -> None:
    check_upstream.SCENARIOS[name](source_2_6_sandbox)


def test_scenarios_catch_a_broken_setter(
    module_sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The exercise can fail: a setter that forgets the cache refresh is caught."""
    broken_root = tmp_path_factory.mktemp("broken")
    subprocess.run(["cp", "-a", f"{module_sandbox.root}/.", str(broken_root)], check=True)
    policy = broken_root / "torch" / "backends" / "mps" / "_device_policy.py"
    text = policy.read_text(encoding="utf-8")
    assert "cache_clear()" in text
    policy.write_text(text.replace("cache_clear()", "None"), encoding="utf-8")
    # The module-alone stand-in is_available() is not cached, so add upstream's lru_cache.
    init = broken_root / "torch" / "backends" / "mps" / "__init__.py"
    init.write_text(
        init.read_text(encoding="utf-8").replace(
            "def is_available():", "import functools\n\n\n@functools.lru_cache\ndef is_available():"
        ),
        encoding="utf-8",
    )
    broken = Sandbox(
        broken_root, module_sandbox.shim, module_sandbox.torch_version, "broken on purpose"
    )
    (result,) = check_upstream.run_scenarios(broken, ["opt_in_after_failed_scan"])
    assert not result.ok
    assert "expected is_available() False, True, True" in (result.failure or "")


def test_python_parser_matches_cpp_parser(module_sandbox: Sandbox) -> None:
    """Builds without MPS parse PYTORCH_MPS_ALLOW_INTEL_GPU in Python; it must agree with C++."""
    spellings = [
        "1",
        "true",
        "TRUE",
        "Yes",
        "on",
        "ON",
        "0",
        "false",
        "No",
        "OFF",
        "",
        "  ",
        " on ",
        "\tno\n",
        "2",
        "maybe",
        "enable",
        "y",
        "t",
        "truee",
        "o n",
        "\u00a0on",
        "on\u00a0",
        "none",
        "-1",
    ]
    script = (
        "import json, sys\n"
        "from torch.backends.mps._device_policy import parse_allow_env\n"
        "print(json.dumps([parse_allow_env(raw) for raw in json.loads(sys.argv[1])]))\n"
    )
    env = module_sandbox.environment("no-devices", {}, has_mps=False)
    result = subprocess.run(
        [sys.executable, "-c", script, json.dumps([None, *spellings])],
        cwd=module_sandbox.root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    python_side = json.loads(result.stdout)
    for raw, (value, warning) in zip([None, *spellings], python_side):
        c_value, c_warning = check_upstream.c_parse_bool_env(module_sandbox.shim, raw)
        assert value == c_value, f"{raw!r}: Python says {value}, C++ says {c_value}"
        assert (warning or "") == c_warning, (
            f"{raw!r}: warnings differ:\n  {warning}\n  {c_warning}"
        )
    assert python_side[spellings.index("maybe") + 1][1] is not None
    assert ALLOW_ENV in python_side[spellings.index("maybe") + 1][1]


def _interpreter(version: str) -> str | None:
    """A working python<version> on this machine (PATH, then pyenv's versions), or None."""
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(
        str(p) for p in Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}")
    )
    wanted = str(tuple(int(part) for part in version.split(".")))
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; print(tuple(sys.version_info[:2]))"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == wanted:
            return candidate
    return None


@pytest.mark.upstream
@pytest.mark.parametrize("version", ["3.9", "3.13"])
def test_on_upstream_2_6_0_tree_with_oldest_and_newest_python(
    source_2_6_sandbox: Sandbox, version: str
) -> None:
    """2.6.0 supports Python 3.9 to 3.13; the patched layer must run on both ends."""
    python = _interpreter(version)
    if python is None:
        pytest.skip(f"no working python{version} on this machine")
    sandbox = dataclasses.replace(source_2_6_sandbox, python=python)
    failures = [f"{r.name}: {r.failure}" for r in check_upstream.run_scenarios(sandbox) if not r.ok]
    assert not failures, "\n".join(failures)


# Every line: the allocator patches make AMD GPUs usable, so the dual-GPU MacBook Pro runs on
# its AMD GPU without the opt-in, and with it.
AMD = check_upstream.PRO5500M["name"]


def test_the_amd_gpu_is_used_on_a_dual_gpu_macbook_pro(module_sandbox: Sandbox) -> None:
    for env in ({}, {ALLOW_ENV: "1"}):
        result = module_sandbox.run_main("macbook-pro-16-2019", ["--json"], env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        data = json.loads(result.stdout)
        assert [d["name"] for d in data["devices"] if d["selected"]] == [AMD], env
        assert all("unified memory" not in (d["skip_reason"] or "") for d in data["devices"]), env
