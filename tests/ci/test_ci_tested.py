"""ci/tested.py: the signing job keeps a built wheel only when a test passed those very bytes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from intelmac_torch_builder.ci import tested


def _wheel(folder: Path, name: str, data: bytes) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def test_select_keeps_tested_bytes_and_leaves_out_the_untested(tmp_path: Path) -> None:
    tested_dir, dist, verdicts = tmp_path / "test", tmp_path / "dist", tmp_path / "verdicts"
    _wheel(tested_dir, "a.whl", b"a")
    _wheel(dist, "a.whl", b"a")
    _wheel(dist, "b.whl", b"b")  # its test failed: no verdict
    assert tested.main(["record", "--dir", str(tested_dir),
                        "--out", str(verdicts / "tested-x.sha256")]) == 0
    assert tested.main(["select", "--verdicts", str(verdicts), str(dist)]) == 0
    assert sorted(p.name for p in dist.iterdir()) == ["a.whl"]


def test_other_bytes_than_built_stop_signing_and_remove_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tested_dir, dist, verdicts = tmp_path / "test", tmp_path / "dist", tmp_path / "verdicts"
    _wheel(tested_dir, "a.whl", b"swapped by a test dependency")
    _wheel(dist, "a.whl", b"a")
    _wheel(dist, "b.whl", b"b")
    tested.main(["record", "--dir", str(tested_dir), "--out", str(verdicts / "t.sha256")])
    assert tested.main(["select", "--verdicts", str(verdicts), str(dist)]) == 1
    assert "a.whl: the bytes tested are not the bytes the build job made" in capsys.readouterr().out
    assert sorted(p.name for p in dist.iterdir()) == ["a.whl", "b.whl"]


def test_a_py3_none_wheel_tested_by_several_pythons() -> None:
    pairs = [("v.whl", "1" * 64), ("v.whl", "1" * 64), ("v.whl", "2" * 64)]
    assert tested.select({"v.whl": "1" * 64}, pairs[:2]).keep == ("v.whl",)
    # An earlier attempt's verdict on bytes a re-run replaced: the built bytes passed too.
    assert tested.select({"v.whl": "2" * 64}, pairs).keep == ("v.whl",)
    # Verdicts only on other bytes stop it.
    assert tested.select({"v.whl": "3" * 64}, pairs).changed == ("v.whl",)


def test_a_malformed_verdict_says_what_is_wrong() -> None:
    with pytest.raises(tested.VerdictError, match="expected '<sha256>  <wheel name>'"):
        tested.parse_verdict("abc  ../x.whl\n", "t.sha256")
