"""Without the stand-in's toolchain these tests skip and say how to get it; under CI=true they fail."""

from __future__ import annotations

import pytest
from _pytest.outcomes import Failed, Skipped

from . import build, conftest


def test_missing_toolchain_skips_with_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "missing", lambda: ["libgnustep-base-dev (GNUstep Foundation headers)"])
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(Skipped, match="apt-get install -y clang libgnustep-base-dev libblocksruntime-dev"):
        conftest.require_toolchain()


def test_missing_toolchain_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "missing", lambda: ["libblocksruntime-dev (Block.h, libBlocksRuntime)"])
    monkeypatch.setenv("CI", "true")
    with pytest.raises(Failed, match="CI=true: the stand-in Metal needs libblocksruntime-dev"):
        conftest.require_toolchain()


def test_this_machine_has_it_or_says_why() -> None:
    lacking = build.missing()
    assert all(isinstance(item, str) and item for item in lacking)


def test_the_personality_rewrite_makes_cxx_exceptions_catchable(tmp_path) -> None:
    """Why build.py rewrites the personality routine: a C++ throw caught in Objective-C++."""
    conftest.require_toolchain()
    import subprocess

    source = tmp_path / "throw.mm"
    source.write_text('#import <Foundation/Foundation.h>\n#include <stdexcept>\n'
                      'extern "C" int caught() { @autoreleasepool { try { throw std::runtime_error("x"); }'
                      ' catch (const std::exception&) { return 1; } } return 0; }\n'
                      'int main() { return caught() == 1 ? 0 : 1; }\n')
    obj = build.compile_objcxx(source, tmp_path / "throw.o", [f"-I{build.INCLUDE}"])
    exe = tmp_path / "throw"
    subprocess.run(["clang++", str(obj), "-o", str(exe), *build.LINK_LIBS], check=True)
    assert subprocess.run([str(exe)], check=False).returncode == 0
