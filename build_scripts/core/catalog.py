"""The release catalog: the one place that holds version knowledge.

``patches/catalog.yaml`` lists every supported PyTorch release line: where its source comes
from and its sha256 pin, the patch series in apply order, the Python versions, the macOS
deployment target, the minimum macOS for MPS and the build environment overrides. It is
parsed once into frozen dataclasses; every later stage reads typed values only.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from packaging.version import Version

from ..core.errors import CatalogError

#: The series and the catalog: the repository's patches/ folder, which an installed copy
#: carries as the package data ``intelmac_torch_builder.patches``.
PATCHES_DIR = Path(str(resources.files(__name__.partition(".")[0] + ".patches")))
#: The checkout's root (an installed copy has no .github/ there).
REPO_ROOT = PATCHES_DIR.parent
DEFAULT_CATALOG = PATCHES_DIR / "catalog.yaml"


@dataclass(frozen=True)
class Source:
    url: str
    sha256: str | None  # None: not pinned yet, only fetchable with trust-on-first-use
    pin_origin: str

    @property
    def filename(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class ReleaseLine:
    version: str
    source: Source
    patches: tuple[Path, ...]  # absolute paths, in apply order
    python: tuple[str, ...]
    macos_deployment_target: str
    mps_min_macos: str
    build_env: Mapping[str, str]

    @property
    def series_fingerprint(self) -> str:
        """sha256 over the series' names and contents, in apply order.

        Two trees patched with the same fingerprint carry byte-identical patches.
        """
        digest = hashlib.sha256()
        for patch in self.patches:
            digest.update(patch.name.encode() + b"\0")
            digest.update(patch.read_bytes() + b"\0")
        return digest.hexdigest()


@dataclass(frozen=True)
class Catalog:
    path: Path
    default_version: str
    local_label: str
    lines: tuple[ReleaseLine, ...]

    @property
    def versions(self) -> tuple[str, ...]:
        return tuple(line.version for line in self.lines)

    def line(self, version: str | None = None) -> ReleaseLine:
        """The release line for ``version`` (the default line when None)."""
        wanted = version or self.default_version
        for line in self.lines:
            if line.version == wanted:
                return line
        raise CatalogError(
            f"PyTorch {wanted} is not a supported release line.\n"
            f"Supported: {', '.join(self.versions)} (catalog: {self.path}).\n"
            "Pick one of those with VERSION=... / --torch, or add the line to the catalog."
        )

    def wheel_version(self, line: ReleaseLine) -> str:
        """The PEP 440 version our wheel of ``line`` carries, e.g. ``2.6.0+intelmac``."""
        return f"{line.version}+{self.local_label}"


@functools.cache
def _schema() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("catalog.schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def _describe(path: Path, document: Any, error: jsonschema.ValidationError) -> str:
    location = list(error.absolute_path)
    entry = ""
    if len(location) >= 2 and location[0] == "lines" and isinstance(location[1], int):
        raw = document["lines"][location[1]]
        name = raw.get("version", "?") if isinstance(raw, dict) else "?"
        entry = f" entry {location[1]} (version {name}),"
        location = location[2:]
    field = ".".join(str(part) for part in location) or "(top level)"
    return f"{path}:{entry} field '{field}': {error.message}"


def parse(path: Path, document: Any) -> Catalog:
    """Validate ``document`` (the YAML of ``path``) and turn it into a Catalog."""
    validator = jsonschema.Draft202012Validator(_schema())
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    if errors:
        details = "\n".join("  " + _describe(path, document, e) for e in errors)
        raise CatalogError(f"The release catalog is malformed:\n{details}")

    lines: list[ReleaseLine] = []
    seen: set[str] = set()
    for index, raw in enumerate(document["lines"]):
        where = f"{path}: entry {index} (version {raw['version']})"
        if raw["version"] in seen:
            raise CatalogError(f"{where}, field 'version': listed twice")
        seen.add(raw["version"])
        patches = tuple(path.parent / name for name in raw["patches"])
        for name, patch in zip(raw["patches"], patches):
            if not patch.is_file():
                raise CatalogError(f"{where}, field 'patches': {name} does not exist in {path.parent}")
        python = tuple(sorted(raw["python"], key=Version))
        lines.append(
            ReleaseLine(
                version=raw["version"],
                source=Source(**raw["source"]),
                patches=patches,
                python=python,
                macos_deployment_target=raw["macos_deployment_target"],
                mps_min_macos=raw["mps_min_macos"],
                build_env=dict(raw["build_env"]),
            )
        )
    catalog = Catalog(
        path=path,
        default_version=document["default_version"],
        local_label=document["local_label"],
        lines=tuple(sorted(lines, key=lambda line: Version(line.version), reverse=True)),
    )
    if catalog.default_version not in seen:
        raise CatalogError(
            f"{path}: field 'default_version': {catalog.default_version} is not one of the "
            f"listed lines ({', '.join(catalog.versions)})"
        )
    return catalog


def load(path: Path | None = None) -> Catalog:
    """Read and validate a catalog file (the repository's own by default)."""
    path = (path or DEFAULT_CATALOG).resolve()
    try:
        document = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise CatalogError(f"No release catalog at {path}.") from None
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path} is not valid YAML: {exc}") from None
    return parse(path, document)
