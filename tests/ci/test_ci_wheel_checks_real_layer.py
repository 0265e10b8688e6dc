"""ci/wheel_checks.py against the REAL patched Python layer, on pretend Macs with no usable GPU.

test_ci_wheel_checks.py proves the checks against a hand-written stand-in of the contract.
Here they run where the release workflow's test-wheel job runs them, a macOS VM without a
usable GPU, as far as Linux can play it: check-upstream's sandbox
(``check_upstream.sandbox_for``) holds a line's own upstream ``torch/backends`` files (the
2.6.0 source tree, the official wheels) with the catalog's series applied, under a stand-in
``torch`` whose ``torch._C`` and ``torch.ops.intelmac`` run the series' C++ policy header through a ctypes shim.
The pretend Macs are a macOS VM whose only Metal device is the Apple Paravirtual device, and
a Mac where Metal finds no device at all.

The stand-in torch has no tensors, so ``mps-tensor-error`` is left out with wheel_checks'
``--skip`` (and said so), and the CPU smoke group is not run (``--only api``).

The upstream material comes from ~/.cache/pytorch-upstream, which .ci/run fills through
../shared/tools before ``make test``; without it these tests skip and say so.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from ci_support import REPO
from intelmac_torch_builder.core import catalog, contract
from intelmac_torch_builder.maint import check_upstream

CHECKS = REPO / "ci" / "wheel_checks.py"
UPSTREAM_CACHE = Path.home() / ".cache" / "pytorch-upstream"
SOURCE_2_6 = UPSTREAM_CACHE / "pytorch-v2.6.0"
#: The hosted-runner situations: only the paravirtual device, and no Metal device at all.
NO_GPU_MACS = ("macos-vm", "no-devices")
#: A tensor needs the real torch; nothing else may be left out.
SKIPPED = "mps-tensor-error"


def _load_script(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{path.stem}_real_layer", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wheel_checks = _load_script(CHECKS)
CATALOG = catalog.load()


def _trees() -> list[object]:
    """The 2.6.0 source tree and every catalogued line's unpacked official wheel."""
    trees = [pytest.param(SOURCE_2_6, id="src-2.6.0")]
    for version in CATALOG.versions:
        trees.append(pytest.param(UPSTREAM_CACHE / f"wheel-{version}-arm64", id=f"wheel-{version}"))
    return trees


@dataclasses.dataclass(frozen=True)
class PatchedTorch:
    sandbox: check_upstream.Sandbox
    wheel_version: str  # what torch.__version__ says, as in the built wheel

    def run_checks(self, mac: str, *args: str,
                   root: Path | None = None) -> subprocess.CompletedProcess[str]:
        """ci/wheel_checks.py's api group, as test-wheel runs it, on the pretend Mac ``mac``."""
        sandbox = self.sandbox if root is None else dataclasses.replace(self.sandbox, root=root)
        env = sandbox.environment(
            mac, {"INTELMAC_SANDBOX_TORCH_VERSION": self.wheel_version}, has_mps=True)
        return subprocess.run(
            [sandbox.python, str(CHECKS), "--only", "api", "--expect-version", self.wheel_version,
             "--expect-no-gpu", "--skip", SKIPPED, *args],
            cwd=sandbox.root, env=env, capture_output=True, text=True, timeout=300, check=False)


def _build_info(line: catalog.ReleaseLine) -> dict[str, object]:
    """INTELMAC_BUILD.json as the build writes it, from the catalog's line."""
    return {
        "upstream_version": line.version,
        "wheel_version": CATALOG.wheel_version(line),
        "source_sha256": line.source.sha256,
        "series_fingerprint": line.series_fingerprint,
        "patches": [patch.name for patch in line.patches],
        "toolchain": {"xcode": "16.4"},
        "built_at": "2026-11-22T00:00:00Z",
    }


_BUILT: dict[Path, PatchedTorch] = {}


def _patched(upstream: Path, tmp_path_factory: pytest.TempPathFactory) -> PatchedTorch:
    """The sandbox of ``upstream``, built once per test session."""
    if upstream in _BUILT:
        return _BUILT[upstream]
    if not upstream.is_dir():
        pytest.skip(f"no upstream {upstream.name}: make upstream-material fetches it")
    if shutil.which(os.environ.get("CXX", "g++")) is None:
        pytest.skip("no C++ compiler (apt-get install g++): the policy shim cannot be built")
    tree = check_upstream.detect_tree(upstream)
    sandbox = check_upstream.sandbox_for(tree, tmp_path_factory.mktemp(f"real-layer-{tree.line}"))
    info = _build_info(CATALOG.line(tree.line))
    # As in a built wheel: INTELMAC_BUILD.json in the .dist-info beside torch/.
    dist_info = next(sandbox.root.glob("torch-*.dist-info"))
    (dist_info / contract.BUILD_INFO_FILE).write_text(json.dumps(info), encoding="utf-8")
    _BUILT[upstream] = PatchedTorch(sandbox, str(info["wheel_version"]))
    return _BUILT[upstream]


@pytest.fixture(params=_trees())
def patched(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> PatchedTorch:
    return _patched(request.param, tmp_path_factory)


@pytest.fixture
def patched_2_6(tmp_path_factory: pytest.TempPathFactory) -> PatchedTorch:
    """The 2.6.0 source tree's sandbox: enough to show the checks can fail, since the new
    module is one file (patch 0003 is common) and only the upstream files differ per line."""
    return _patched(SOURCE_2_6, tmp_path_factory)


def _verdicts(stdout: str) -> dict[str, str]:
    """{check name: PASS/FAIL/SKIP} from wheel_checks' output."""
    verdicts = {}
    for line in stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASS", "FAIL", "SKIP"):
            verdicts[rest.split(":", 1)[0]] = word
    return verdicts


@pytest.mark.slow
@pytest.mark.parametrize("mac", NO_GPU_MACS)
def test_every_api_check_passes_on_the_real_layer(patched: PatchedTorch, mac: str) -> None:
    result = patched.run_checks(mac)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # The sandbox's torch was checked, not the CPU torch of the test environment.
    assert f"from {patched.sandbox.root / 'torch'}" in result.stdout, output
    verdicts = _verdicts(result.stdout)
    expected = {name: "PASS" for name in wheel_checks.API_CHECKS}
    expected[SKIPPED] = "SKIP"
    assert verdicts == expected, output


# The checks must also be able to fail here, against the same real layer: on a pretend Mac
# that has a usable GPU, and with the real module broken in ways a regression could break it.
@pytest.mark.slow
def test_the_checks_fail_where_a_gpu_is_usable(patched_2_6: PatchedTorch) -> None:
    result = patched_2_6.run_checks("macbook-pro-16-2019")
    verdicts = _verdicts(result.stdout)
    assert result.returncode != 0
    assert verdicts["devices"] == "FAIL" and verdicts["unavailable-reason"] == "FAIL", result.stdout
    assert verdicts["opt-in-without-gpu"] == "FAIL", result.stdout


BREAKAGES = {
    # (text of the real _device_policy.py, its broken replacement, the check that must fail)
    "report-exits-0": ('return 0 if data["usable"] else 1', "return 0",
                       "python-m-torch.backends.mps"),
    "no-skip-reason": ('skip_reason=entry["skip_reason"] or None', "skip_reason=None", "devices"),
    "no-reason": ('return _call("mps_unavailable_reason") or None', "return None",
                  "unavailable-reason"),
}


@pytest.mark.slow
@pytest.mark.parametrize("breakage", BREAKAGES)
def test_the_checks_catch_a_broken_real_layer(patched_2_6: PatchedTorch, breakage: str,
                                              tmp_path: Path) -> None:
    original, broken, check = BREAKAGES[breakage]
    root = tmp_path / "sandbox"
    shutil.copytree(patched_2_6.sandbox.root, root)
    module = root / "torch" / "backends" / "mps" / "_device_policy.py"
    text = module.read_text(encoding="utf-8")
    assert text.count(original) == 1, f"the real module no longer has {original!r}; update the test"
    module.write_text(text.replace(original, broken), encoding="utf-8")
    result = patched_2_6.run_checks("macos-vm", root=root)
    assert result.returncode != 0
    assert _verdicts(result.stdout)[check] == "FAIL", result.stdout + result.stderr


def test_the_checks_name_what_the_contract_names() -> None:
    """wheel_checks runs on a bare interpreter and keeps its own copies of the contract's names."""
    assert wheel_checks.ENV_FLAG == contract.ALLOW_ENV
    assert wheel_checks.DEVICE_FIELDS == contract.DEVICE_INFO_FIELDS
    assert wheel_checks.BUILD_INFO_KEYS == contract.BUILD_INFO_KEYS
    assert set(wheel_checks.ACCEPTED_WORDS) == {*contract.ACCEPTED_TRUE, *contract.ACCEPTED_FALSE}
    spellings = {*wheel_checks.TRUE_VALUES, *wheel_checks.FALSE_VALUES}
    assert {value.lower() for value in spellings} == set(wheel_checks.ACCEPTED_WORDS)
