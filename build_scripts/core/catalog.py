"""The release catalog: the one place that holds version knowledge.

``patches/catalog.yaml`` lists every supported PyTorch release line: where its source comes
from and its sha256 pin, the patch series in apply order, the Python versions, the macOS
deployment target, the minimum macOS for MPS and the build environment overrides. A line
may name a companion (torchvision), built after torch against the torch wheel just built;
the companion is a ``ReleaseLine`` too, so every stage handles it the same way. The file is
parsed once into frozen dataclasses; every later stage reads typed values only.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from packaging.version import Version

from ..core.errors import CatalogError

if TYPE_CHECKING:
    import jsonschema

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


#: Where ``--source git`` clones each project from.
GIT_REPOS = {
    "torch": "https://github.com/pytorch/pytorch.git",
    "torchvision": "https://github.com/pytorch/vision.git",
}


def xcode_for_sdk(sdk: str) -> str:
    """The first Xcode that ships macOS SDK ``sdk``: 12 for SDK 11 ... 16 for SDK 15, then 26."""
    major = Version(sdk).major
    return f"{major}.0" if major >= 26 else f"{major + 1}.0"


def _release(text: str) -> tuple[int, ...]:
    return Version(text).release


@dataclass(frozen=True)
class XcodeRange:
    """The Xcode releases that can build a line, each bound with the evidence for it.

    ``max`` covers its own point releases: "26.6" admits 26.6.1 (``xcodebuild -version``
    says "Xcode 26.4.1"); a newer minor is outside until evidence widens the range.
    """

    min: str
    max: str
    runner: str  # the one the release workflow selects on its runner image
    min_evidence: str
    max_evidence: str

    def admits(self, found: str) -> bool:
        have = _release(found)
        return have >= _release(self.min) and have[: len(_release(self.max))] <= _release(self.max)

    @property
    def words(self) -> str:
        """"Xcode 26.2 to 26.6" (or "Xcode 16.4" for a range of one release)."""
        return f"Xcode {self.min}" if self.min == self.max else f"Xcode {self.min} to {self.max}"


@dataclass(frozen=True)
class ToolchainSpec:
    """The line's pinned build toolchain: the pin file and what it must pin."""

    pins: Path  # absolute
    requires: tuple[str, ...]
    #: The BLAS the line's build_env chooses (MKL), as pip's hashed requirements; installed
    #: once per line with ``pip install --prefix`` (None: the BLAS is the OS's own).
    blas: Path | None = None


@dataclass(frozen=True)
class ReleaseLine:
    version: str
    source: Source
    patches: tuple[Path, ...]  # absolute paths, in apply order
    python: tuple[str, ...]
    macos_deployment_target: str
    mps_min_macos: str
    build_env: Mapping[str, str]
    toolchain: ToolchainSpec | None  # None: no pinned toolchain (only fixtures lack one)
    macos_sdk_min: str  # the oldest macOS SDK whose Metal/MPSGraph APIs the line compiles in
    xcode: XcodeRange | None = None  # the Xcodes that build it (None: any new enough for the SDK)
    build_backend: str = "setuptools"  # the PEP 517 backend of the release (core/backend.py)
    name: str = "torch"  # the distribution this line builds
    # A torch line: the companion built after it. A companion: the torch version it pairs
    # with, and why (pairs_with is None for a torch line).
    companion: ReleaseLine | None = None
    pairs_with: str | None = None
    pair_evidence: str = ""
    #: A companion: the Python-ABI tags of its official macOS wheels (the catalog's
    #: wheel_tags, checked against the registry by tests/ci/test_ci_companion_tags.py).
    wheel_tags: tuple[str, ...] = ()

    @property
    def per_python(self) -> bool:
        """Whether this companion's wheel is built per Python (cpXY), not one py3-none wheel."""
        return any(tag != "py3-none" for tag in self.wheel_tags)

    @property
    def key(self) -> str:
        """Names the line's work folder, lock and trust-on-first-use pin: ``2.6.0``, ``torchvision-0.21.0``."""
        return self.version if self.name == "torch" else f"{self.name}-{self.version}"

    @property
    def title(self) -> str:
        """How messages name it: ``PyTorch 2.6.0``, ``torchvision 0.21.0``."""
        return f"PyTorch {self.version}" if self.name == "torch" else f"{self.name} {self.version}"

    @property
    def git_repo(self) -> str:
        return GIT_REPOS[self.name]

    @property
    def pins(self) -> Path:
        """The pinned toolchain file; an error for a line without one."""
        if self.toolchain is None:
            raise CatalogError(
                f"PyTorch {self.version} has no pinned build toolchain: add 'toolchain' (pins "
                "and requires) to its catalog entry."
            )
        return self.toolchain.pins

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

    @property
    def build_fingerprint(self) -> str:
        """sha256 over what the compile reads besides the source and the series: the line's
        ``build_env`` and its pinned toolchain (the pin file, its required names, the BLAS pins
        and ``native.yaml`` beside them, which pins the OpenMP and the codecs a wheel bundles).

        A wheel records it, and the no-op match compares it, so a change to any of these
        builds the line again instead of answering "Up to date".
        """
        digest = hashlib.sha256(json.dumps(dict(self.build_env), sort_keys=True).encode() + b"\0")
        if self.toolchain is not None:
            digest.update("\0".join(self.toolchain.requires).encode() + b"\0")
            native = self.toolchain.pins.parent / "native.yaml"
            for path in (self.toolchain.pins, self.toolchain.blas, native):
                if path is not None and path.is_file():
                    digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
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

    def companions(self) -> tuple[ReleaseLine, ...]:
        return tuple(line.companion for line in self.lines if line.companion is not None)

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
def load_schema(name: str) -> dict[str, Any]:
    """A JSON schema shipped beside this module (the catalog's, the native pins')."""
    text = resources.files(__package__).joinpath(name).read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def _schema() -> dict[str, Any]:
    return load_schema("catalog.schema.json")


def user_cache() -> Path:
    """``$INTELMAC_CACHE`` or ``~/.cache/intelmac-torch``: what the user's builds share."""
    return Path(os.environ.get("INTELMAC_CACHE") or Path.home() / ".cache" / "intelmac-torch")


def _typed(value: Any) -> str:
    """A YAML value JSON has no type for (a date), with its type: a date never reads as a string."""
    return f"<{type(value).__name__} {value!r}>"


def valid_note(schema: Mapping[str, Any], document: Any) -> Path:
    """Where ``document`` is noted as valid against ``schema``: named by the digest of both."""
    digest = hashlib.sha256()
    for part in (schema, document):
        digest.update(json.dumps(part, sort_keys=True, default=_typed).encode() + b"\0")
    return user_cache() / "valid" / digest.hexdigest()


def schema_errors(schema: Mapping[str, Any], document: Any) -> list[jsonschema.ValidationError]:
    """Every place where ``document`` breaks ``schema`` (Draft 2020-12), in document order.

    A document found valid is noted in the user's cache (valid_note), and the same document
    against the same schema is not validated again: importing jsonschema alone was a fifth of
    a no-op `make build`. A changed document or schema has another digest, so it is checked.
    """
    note = valid_note(schema, document)
    if note.is_file():
        return []
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    if not errors:
        try:
            note.parent.mkdir(parents=True, exist_ok=True)
            note.touch()
        except OSError:
            pass  # a read-only home: validated again next time
    return errors


def _entry_name(raw: Any, index: int) -> str:
    """A line of the catalog as a person finds it: by its version, or by its position."""
    version = raw.get("version") if isinstance(raw, dict) else None
    if isinstance(version, str) and version:
        return f"release line {version}"
    return f"release line #{index + 1} (it has no valid version)"


def _expected(schema: Any) -> str:
    """What a schema fragment accepts, in words."""
    if not isinstance(schema, dict):
        return "a valid value"
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return " or ".join(_expected(option) for option in schema[key])
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return _expected(_schema()["$defs"].get(name, {}))
    if "const" in schema:
        return repr(schema["const"])
    if "enum" in schema:
        return "one of " + ", ".join(repr(value) for value in schema["enum"])
    kind = schema.get("type")
    words = {
        "string": "a string",
        "null": "null",
        "array": "a list",
        "object": "a mapping",
        "integer": "an integer",
        "boolean": "true or false",
    }
    text = words.get(kind, str(kind)) if kind else "a value"
    if "pattern" in schema:
        text += f" matching {schema['pattern']}"
    if kind == "array" and isinstance(schema.get("items"), dict):
        text += f" of {_expected(schema['items']).removeprefix('a ')}s"
    return text


def _yaml_type(value: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}
    names.update({list: "a list", dict: "a mapping", type(None): "null"})
    return names.get(type(value), type(value).__name__)


def _describe(path: Path, document: Any, error: jsonschema.ValidationError) -> str:
    location = list(error.absolute_path)
    entry = ""
    if len(location) >= 2 and location[0] == "lines" and isinstance(location[1], int):
        entry = f" {_entry_name(document['lines'][location[1]], location[1])},"
        location = location[2:]
    field = ".".join(str(part) for part in location) or "(top level)"
    if error.validator in ("type", "oneOf", "anyOf", "pattern", "const", "enum"):
        message = (
            f"got {error.instance!r} ({_yaml_type(error.instance)}), expected "
            f"{_expected(error.schema)}"
        )
    else:
        message = error.message
    return f"{path}:{entry} field '{field}': {message}"


def _companion(path: Path, where: str, line: ReleaseLine, raw: dict[str, Any]) -> ReleaseLine:
    """The companion of ``line``: same Pythons and macOS targets, its own source and series."""
    patches = tuple(path.parent / name for name in raw["patches"])
    for name, patch in zip(raw["patches"], patches):
        if not patch.is_file():
            raise CatalogError(
                f"{where}, field 'companion.patches': {name} does not exist in {path.parent}"
            )
    return ReleaseLine(
        version=raw["version"],
        source=Source(**raw["source"]),
        patches=patches,
        python=line.python,
        macos_deployment_target=line.macos_deployment_target,
        mps_min_macos=line.mps_min_macos,
        build_env=dict(raw["build_env"]),
        # The line's pinned toolchain builds the companion too (setuptools, wheel, ninja).
        toolchain=line.toolchain,
        macos_sdk_min=line.macos_sdk_min,
        xcode=line.xcode,
        name=raw["name"],
        pairs_with=line.version,
        pair_evidence=raw["pair_evidence"],
        wheel_tags=tuple(raw["wheel_tags"]),
    )


def _xcode_range(where: str, raw: Mapping[str, Any]) -> XcodeRange | None:
    """The line's ``xcode`` range, checked for order and against the line's SDK."""
    if "xcode" not in raw:
        return None
    found = XcodeRange(**raw["xcode"])
    low, high = _release(found.min), _release(found.max)
    if not low <= high or not found.admits(found.runner):
        raise CatalogError(
            f"{where}, field 'xcode': runner {found.runner} must lie in min {found.min} to max "
            f"{found.max}, and min must not be above max."
        )
    sdk = raw.get("macos_sdk_min", raw["mps_min_macos"])
    if low < _release(xcode_for_sdk(sdk)):
        raise CatalogError(
            f"{where}, field 'xcode.min': Xcode {found.min} has no macOS {sdk} SDK "
            f"(macos_sdk_min); the first that has it is Xcode {xcode_for_sdk(sdk)}."
        )
    return found


def parse(path: Path, document: Any) -> Catalog:
    """Validate ``document`` (the YAML of ``path``) and turn it into a Catalog."""
    errors = schema_errors(_schema(), document)
    if errors:
        details = "\n".join("  " + _describe(path, document, e) for e in errors)
        raise CatalogError(f"The release catalog is malformed:\n{details}")

    lines: list[ReleaseLine] = []
    seen: set[str] = set()
    for index, raw in enumerate(document["lines"]):
        where = f"{path}: {_entry_name(raw, index)}"
        if raw["version"] in seen:
            raise CatalogError(f"{where}, field 'version': listed twice")
        seen.add(raw["version"])
        patches = tuple(path.parent / name for name in raw["patches"])
        for name, patch in zip(raw["patches"], patches):
            if not patch.is_file():
                raise CatalogError(
                    f"{where}, field 'patches': {name} does not exist in {path.parent}"
                )
        python = tuple(sorted(raw["python"], key=Version))
        spec = None
        if "toolchain" in raw:
            pins = path.parent / raw["toolchain"]["pins"]
            if not pins.is_file():
                raise CatalogError(
                    f"{where}, field 'toolchain.pins': {raw['toolchain']['pins']} does not "
                    f"exist in {path.parent}"
                )
            blas = raw["toolchain"].get("blas")
            blas_pins = path.parent / blas if blas else None
            if blas_pins is not None and not blas_pins.is_file():
                raise CatalogError(
                    f"{where}, field 'toolchain.blas': {blas} does not exist in {path.parent}"
                )
            if (raw["build_env"].get("BLAS") == "MKL") != (blas_pins is not None):
                raise CatalogError(
                    f"{where}: build_env.BLAS is {raw['build_env'].get('BLAS')!r} and "
                    f"toolchain.blas is {blas!r}; MKL needs its pinned files "
                    "(toolchain.blas: toolchain/mkl.txt), and only MKL has any."
                )
            spec = ToolchainSpec(pins, tuple(raw["toolchain"]["requires"]), blas_pins)
        line = ReleaseLine(
            version=raw["version"],
            source=Source(**raw["source"]),
            patches=patches,
            python=python,
            macos_deployment_target=raw["macos_deployment_target"],
            mps_min_macos=raw["mps_min_macos"],
            build_env=dict(raw["build_env"]),
            toolchain=spec,
            # MPS needs at least the SDK of the macOS it runs on.
            macos_sdk_min=raw.get("macos_sdk_min", raw["mps_min_macos"]),
            xcode=_xcode_range(where, raw),
            build_backend=raw.get("build_backend", "setuptools"),
        )
        if "companion" in raw:
            line = replace(line, companion=_companion(path, where, line, raw["companion"]))
        lines.append(line)
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


def yaml_error(path: Path, exc: yaml.YAMLError) -> str:
    """``exc`` as a message naming ``path`` and the line and column (PyYAML's own names the
    file "<unicode string>" when it parsed a string)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    detail = f"{problem} ({context})" if context else problem
    return f"{where}: not valid YAML: {detail}"


def load(path: Path | None = None) -> Catalog:
    """Read and validate a catalog file (the repository's own by default)."""
    path = (path or DEFAULT_CATALOG).resolve()
    try:
        # libyaml's parser where PyYAML has it: the pure-Python one is a tenth of a no-op build.
        document = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except FileNotFoundError:
        raise CatalogError(f"No release catalog at {path}.") from None
    except yaml.YAMLError as exc:
        raise CatalogError(yaml_error(path, exc)) from None
    return parse(path, document)
