"""The release catalog: the shipped one is valid, and malformed ones say exactly what is wrong."""

from __future__ import annotations

import datetime
import os
import struct
import sys
from pathlib import Path

import pytest
import yaml
from packaging.version import Version
from intelmac_torch_builder.core import catalog
from intelmac_torch_builder.core.errors import CatalogError


def test_shipped_catalog_is_valid() -> None:
    loaded = catalog.load()
    assert {"2.15.0", "2.14.1", "2.9.1", "2.6.0"} <= set(loaded.versions)
    assert loaded.line().version == loaded.default_version
    for line in loaded.lines:
        assert line.source.url.endswith(f"/v{line.version}/pytorch-v{line.version}.tar.gz")
        assert all(patch.is_file() for patch in line.patches)


def _write(tmp_path: Path, document: object) -> Path:
    (tmp_path / "0001-x.patch").write_text("")
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _minimal() -> dict[str, object]:
    return {
        "schema_version": 1,
        "default_version": "1.0.0",
        "local_label": "intelmac",
        "lines": [
            {
                "version": "1.0.0",
                "source": {"url": "http://127.0.0.1/x.tar.gz", "sha256": None, "pin_origin": "t"},
                "patches": ["0001-x.patch"],
                "python": ["3.12", "3.10"],
                "macos_deployment_target": "14.0",
                "mps_min_macos": "14.0",
                "build_env": {},
            }
        ],
    }


def test_minimal_catalog_parses_to_typed_values(tmp_path: Path) -> None:
    loaded = catalog.load(_write(tmp_path, _minimal()))
    line = loaded.line("1.0.0")
    assert line.python == ("3.10", "3.12")  # sorted as versions
    assert line.patches == (tmp_path / "0001-x.patch",)
    assert line.source.sha256 is None
    assert loaded.wheel_version(line) == "1.0.0+intelmac"


def test_a_valid_catalog_is_validated_once_and_a_changed_one_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The note that spares a no-op `make build` importing jsonschema (catalog.schema_errors)."""
    monkeypatch.setenv("INTELMAC_CACHE", str(tmp_path / "cache"))
    path = _write(tmp_path, _minimal())
    catalog.load(path)
    notes = list((tmp_path / "cache" / "valid").iterdir())
    assert len(notes) == 1
    with monkeypatch.context() as blocked:
        blocked.setitem(sys.modules, "jsonschema", None)  # importing it now fails
        assert catalog.load(path).line("1.0.0").python == ("3.10", "3.12")
    document = _minimal()
    document["lines"][0]["python"] = ["three"]  # type: ignore[index]
    with pytest.raises(CatalogError, match=r"field 'python.0'"):
        catalog.load(_write(tmp_path, document))
    notes[0].unlink()
    document["lines"][0]["python"] = ["3.12"]  # type: ignore[index]
    changed = catalog.load(_write(tmp_path, document))
    assert changed.line("1.0.0").python == ("3.12",)
    assert len(list((tmp_path / "cache" / "valid").iterdir())) == 1  # its own note
    # A date (which YAML reads as one) is not noted as the same document as that text.
    text, date = _minimal(), _minimal()
    text["lines"][0]["mps_min_macos"] = "2024-01-01"  # type: ignore[index]
    date["lines"][0]["mps_min_macos"] = datetime.date(2024, 1, 1)  # type: ignore[index]
    schema = catalog.load_schema("catalog.schema.json")
    assert catalog.valid_note(schema, text) != catalog.valid_note(schema, date)


def test_error_names_file_entry_and_field(tmp_path: Path) -> None:
    document = _minimal()
    document["lines"][0]["python"] = ["three"]  # type: ignore[index]
    path = _write(tmp_path, document)
    with pytest.raises(CatalogError) as error:
        catalog.load(path)
    message = str(error.value)
    assert str(path) in message
    # Named by its version, not by a 0-based index; the type error says what was expected.
    assert "release line 1.0.0, field 'python.0'" in message
    assert "entry 0" not in message
    assert "got 'three' (a string), expected a string matching ^3\\.[0-9]+$" in message


def test_bad_sha256_pin_is_named(tmp_path: Path) -> None:
    document = _minimal()
    document["lines"][0]["source"]["sha256"] = "abc"  # type: ignore[index]
    with pytest.raises(CatalogError, match=r"field 'source.sha256'"):
        catalog.load(_write(tmp_path, document))


def test_type_error_says_what_was_expected(tmp_path: Path) -> None:
    document = _minimal()
    document["lines"][0]["source"]["sha256"] = 12345  # type: ignore[index]
    with pytest.raises(CatalogError) as error:
        catalog.load(_write(tmp_path, document))
    message = str(error.value)
    assert "is not valid under any of the given schemas" not in message
    assert (
        "release line 1.0.0, field 'source.sha256': got 12345 (a number), expected a string "
        "matching ^[0-9a-f]{64}$ or null"
    ) in message


def test_entry_without_a_version_is_named_by_position(tmp_path: Path) -> None:
    document = _minimal()
    second = dict(document["lines"][0])  # type: ignore[index]
    del second["version"]
    document["lines"].append(second)  # type: ignore[union-attr]
    with pytest.raises(CatalogError, match=r"release line #2 \(it has no valid version\)"):
        catalog.load(_write(tmp_path, document))


def test_missing_patch_file_is_named(tmp_path: Path) -> None:
    document = _minimal()
    document["lines"][0]["patches"] = ["0002-missing.patch"]  # type: ignore[index]
    with pytest.raises(CatalogError, match=r"field 'patches': 0002-missing.patch does not exist"):
        catalog.load(_write(tmp_path, document))


def test_default_must_be_a_listed_line(tmp_path: Path) -> None:
    document = _minimal()
    document["default_version"] = "9.9.9"
    with pytest.raises(CatalogError, match=r"field 'default_version': 9.9.9"):
        catalog.load(_write(tmp_path, document))


def test_unknown_version_lists_the_supported_ones(tmp_path: Path) -> None:
    loaded = catalog.load(_write(tmp_path, _minimal()))
    with pytest.raises(CatalogError, match=r"(?s)PyTorch 3.0.0 is not a supported.*Supported: 1.0.0"):
        loaded.line("3.0.0")


def test_not_yaml_names_the_file_and_the_place(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text("lines: [unclosed\n  x: 1\n")
    with pytest.raises(CatalogError) as error:
        catalog.load(path)
    message = str(error.value)
    assert message.startswith(f"{path}, line 2, column 4: not valid YAML: ")
    assert "<unicode string>" not in message


def test_fingerprint_changes_with_patch_content(tmp_path: Path) -> None:
    path = _write(tmp_path, _minimal())
    before = catalog.load(path).line().series_fingerprint
    (tmp_path / "0001-x.patch").write_text("changed")
    assert catalog.load(path).line().series_fingerprint != before


@pytest.mark.parametrize(("blas_env", "blas_pins", "message"), [
    ("MKL", None, "build_env.BLAS is 'MKL' and toolchain.blas is None; MKL needs its pinned files"),
    (None, "mkl.txt", "build_env.BLAS is None and toolchain.blas is 'mkl.txt'"),
    ("MKL", "missing.txt", "field 'toolchain.blas': missing.txt does not exist"),
])
def test_mkl_comes_with_its_pinned_files(tmp_path: Path, blas_env: str | None,
                                         blas_pins: str | None, message: str) -> None:
    (tmp_path / "pins.txt").write_text("")
    (tmp_path / "mkl.txt").write_text("")
    document = _minimal()
    line = document["lines"][0]  # type: ignore[index]
    line["toolchain"] = {"pins": "pins.txt", "requires": ["cmake"],
                         **({"blas": blas_pins} if blas_pins else {})}
    if blas_env:
        line["build_env"] = {"BLAS": blas_env}
    with pytest.raises(CatalogError, match="release line 1.0.0") as caught:
        catalog.load(_write(tmp_path, document))
    assert message in str(caught.value)
    line["build_env"] = {"BLAS": "MKL"}
    line["toolchain"]["blas"] = "mkl.txt"
    loaded = catalog.load(_write(tmp_path, document)).line("1.0.0")
    assert loaded.toolchain is not None and loaded.toolchain.blas == tmp_path / "mkl.txt"


def test_every_shipped_line_chooses_its_blas_and_pins_mkl() -> None:
    for line in catalog.load().lines:
        assert line.build_env.get("BLAS") == "MKL", line.version
        assert line.toolchain is not None and line.toolchain.blas is not None
        text = line.toolchain.blas.read_text()
        # Every requirement carries its sha256, so pip --require-hashes checks each file.
        for name in ("mkl-static==2023.2.2", "mkl-include==2023.2.2"):
            assert f"{name} \\\n    --hash=sha256:" in text


def _with_xcode(**xcode: str) -> dict[str, object]:
    document = _minimal()
    evidence = {"min_evidence": "the first Xcode with the line's SDK (a runner image's table)",
                "max_evidence": "the SDK upstream's official binary was linked against (its LC_BUILD_VERSION)"}
    document["lines"][0]["xcode"] = {**evidence, **xcode}  # type: ignore[index]
    return document


def test_an_xcode_range_parses_and_admits_its_point_releases(tmp_path: Path) -> None:
    line = catalog.load(_write(tmp_path, _with_xcode(min="15.0", max="26.4", runner="26.2"))).line()
    assert line.xcode is not None and line.xcode.words == "Xcode 15.0 to 26.4"
    assert [line.xcode.admits(found) for found in ("14.3.1", "15.0", "26.4.1", "26.5")] == [
        False, True, True, False]


@pytest.mark.parametrize(("xcode", "said"), [
    ({"min": "26.2", "max": "26.0", "runner": "26.2"}, "runner 26.2 must lie in min 26.2 to max 26.0"),
    ({"min": "16.0", "max": "16.4", "runner": "26.2"}, "runner 26.2 must lie in min 16.0 to max 16.4"),
    ({"min": "14.3", "max": "16.4", "runner": "16.4"},
     "field 'xcode.min': Xcode 14.3 has no macOS 14.0 SDK (macos_sdk_min); the first that has it is Xcode 15.0"),
])
def test_a_wrong_xcode_range_is_named(tmp_path: Path, xcode: dict[str, str], said: str) -> None:
    with pytest.raises(CatalogError, match=said.replace("(", r"\(").replace(")", r"\)")):
        catalog.load(_write(tmp_path, _with_xcode(**xcode)))


def test_each_xcode_bound_needs_its_evidence(tmp_path: Path) -> None:
    document = _minimal()
    document["lines"][0]["xcode"] = {"min": "16.0", "max": "16.4", "runner": "16.4"}  # type: ignore[index]
    with pytest.raises(CatalogError, match="min_evidence"):
        catalog.load(_write(tmp_path, document))


def test_the_shipped_xcode_ranges_hold_each_runner_and_the_sdk() -> None:
    for line in catalog.load().lines:
        assert line.xcode is not None, line.version
        assert line.xcode.admits(line.xcode.runner), line.version
        # No Xcode below the first that ships the line's SDK.
        assert Version(line.xcode.min) >= Version(catalog.xcode_for_sdk(line.macos_sdk_min))
        # The macOS 26 lines: a user's Xcode 26.3 or 26.4 builds them.
        if line.xcode.min.startswith("26."):
            assert line.xcode.admits("26.3") and line.xcode.admits("26.4"), line.version


UPSTREAM_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pytorch-upstream"


def _linked_sdk(dylib: Path) -> str:
    """The SDK of a thin 64-bit Mach-O's LC_BUILD_VERSION ("26.5")."""
    data = dylib.read_bytes()[:1 << 20]
    ncmds, offset = struct.unpack_from("<I", data, 16)[0], 32
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", data, offset)
        if cmd == 0x32:  # LC_BUILD_VERSION: platform, minos, sdk (xxxx.yy.zz nibbles)
            sdk = struct.unpack_from("<I", data, offset + 16)[0]
            return f"{sdk >> 16}.{(sdk >> 8) & 0xFF}"
        offset += size
    raise AssertionError(f"{dylib} has no LC_BUILD_VERSION")


@pytest.mark.parametrize("version", ["2.6.0", "2.9.1", "2.14.1", "2.15.0"])
def test_the_xcode_evidence_names_the_sdk_upstream_linked_against(version: str) -> None:
    dylib = UPSTREAM_CACHE / f"wheel-{version}-arm64" / "torch" / "lib" / "libtorch_cpu.dylib"
    if not dylib.is_file():
        why = f"no upstream {version} wheel: make upstream-material fetches it"
        if os.environ.get("INTELMAC_REQUIRE_WHEELS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    line = catalog.load().line(version)
    assert line.xcode is not None
    sdk = _linked_sdk(dylib)
    evidence = f"{line.xcode.min_evidence} {line.xcode.max_evidence}"
    assert f"SDK {sdk} (LC_BUILD_VERSION" in evidence, (sdk, evidence)
