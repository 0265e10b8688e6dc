"""Install a built torch wheel into a fresh venv and check it (the test-wheel CI job).

    python ci/test_wheel.py --wheel-dir dist --expect-version 2.15.0+intelmac --expect-no-gpu
    python ci/test_wheel.py --wheel-dir dist --print-wheel     # the wheel for this Python
    python ci/test_wheel.py --wheel-dir dist --companion-version 0.29.2+intelmac   # + torchvision

With ``--companion-version``, the line's torchvision wheel is installed beside torch in the
same ``pip install`` and ``ci/vision_checks.py`` runs too (``--vision-device mps`` adds the
ops on the GPU against the CPU). With ``--expect-features`` (the matrix's ``expect_features``,
from the catalog) NumPy joins the venv and wheel_checks' ``features`` group runs.

Picks the wheel in ``--wheel-dir`` made for the running interpreter (``cpXY``), creates a
venv with that interpreter, ``pip install``s the wheel (its dependencies come from the
configured index) and runs ``ci/wheel_checks.py`` inside it. Standard library only, so it
runs on a bare ``actions/setup-python`` interpreter.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

CHECKS = Path(__file__).resolve().with_name("wheel_checks.py")
VISION_CHECKS = Path(__file__).resolve().with_name("vision_checks.py")


class WheelSelectionError(Exception):
    pass


def python_tag() -> str:
    return f"cp{sys.version_info[0]}{sys.version_info[1]}"


def select_wheel(wheel_dir: Path, tag: str | None = None, project: str = "torch") -> Path:
    """The one ``project`` wheel for this interpreter: a ``cpXY`` wheel, else a pure ``py3`` one."""
    tag = tag or python_tag()
    wheels = sorted(wheel_dir.glob(f"{project}-*.whl"))
    if not wheels:
        raise WheelSelectionError(f"no {project}-*.whl in {wheel_dir}")
    exact = [wheel for wheel in wheels if re.search(rf"-{tag}-(?:{tag}|abi3|none)-", wheel.name)]
    candidates = exact or [wheel for wheel in wheels if "-py3-none-" in wheel.name]
    if len(candidates) != 1:
        found = ", ".join(wheel.name for wheel in wheels)
        raise WheelSelectionError(
            f"expected exactly one {project} wheel for {tag} in {wheel_dir}, "
            f"found {len(candidates)} among: {found}")
    return candidates[0].resolve()


def run(command: Sequence[str]) -> None:
    print("+ " + " ".join(command), flush=True)
    subprocess.run(command, check=True)


def install(wheels: Sequence[Path], venv: Path, pip_args: Sequence[str]) -> Path:
    """A fresh venv with the wheels installed together; returns its Python."""
    run([sys.executable, "-m", "venv", str(venv)])
    python = venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
         *pip_args, *map(str, wheels)])
    return python


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel-dir", type=Path, required=True,
                        help="folder holding the wheels; the one for this Python is tested")
    parser.add_argument("--expect-version", help="torch.__version__, e.g. 2.15.0+intelmac")
    parser.add_argument("--expect-platform",
                        help="the wheel's platform tag, e.g. macosx_14_0_x86_64 (the catalog's "
                        "deployment target)")
    parser.add_argument("--expect-no-gpu", action="store_true",
                        help="require MPS to be unusable (GitHub-hosted runners have no usable GPU)")
    parser.add_argument("--print-wheel", action="store_true",
                        help="print the path of the wheel for this Python and exit")
    parser.add_argument("--project", default="torch", choices=("torch", "torchvision"),
                        help="the wheel --print-wheel prints (default: torch)")
    parser.add_argument("--companion-version",
                        help="also install the torchvision wheel beside torch and check it "
                        "(ci/vision_checks.py); its version, e.g. 0.29.1+intelmac. Empty: none")
    parser.add_argument("--vision-device",
                        help="with --companion-version: also run torchvision's ops on this "
                        "device against the CPU (mps)")
    parser.add_argument("--expect-features",
                        help="what the build turned on (the matrix's expect_features, from the "
                        "catalog): blas=mkl,distributed=on,fbgemm=off,mkldnn=on; adds the "
                        "features checks and NumPy to the venv (the LAPACK check compares "
                        "against it)")
    parser.add_argument("--only", choices=("api", "smoke", "features"), action="append",
                        help="run only these check groups (default: all)")
    parser.add_argument("--pip-arg", action="append", default=[],
                        help="extra argument for pip install (repeatable), e.g. --no-index")
    parser.add_argument("--keep-venv", type=Path, help="create the venv here and keep it")
    args = parser.parse_args(argv)

    try:
        if args.print_wheel:
            print(select_wheel(args.wheel_dir, project=args.project))
            return 0
        wheel = select_wheel(args.wheel_dir)
        companion = (select_wheel(args.wheel_dir, project="torchvision")
                     if args.companion_version else None)
    except WheelSelectionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for built in (wheel, companion):
        if built is None or not args.expect_platform:
            continue
        if built.name.endswith(f"-{args.expect_platform}.whl"):
            continue
        print(f"error: {built.name} is not tagged {args.expect_platform}. A bundled library "
              "probably needs a newer macOS than the catalog's deployment target (delocate "
              "raises the tag to match); build it for that target.", file=sys.stderr)
        return 1

    scratch = None if args.keep_venv else Path(tempfile.mkdtemp(prefix="test-wheel-"))
    venv = args.keep_venv or scratch / "venv"  # type: ignore[operator]
    started = time.monotonic()
    try:
        extra = ["numpy"] if args.expect_features else []
        python = install([wheel, *([companion] if companion else [])], venv,
                         [*args.pip_arg, *extra])
        command = [str(python), str(CHECKS)]
        if args.expect_version:
            command += ["--expect-version", args.expect_version]
        if args.expect_features:
            command += ["--expect-features", args.expect_features]
        if args.expect_no_gpu:
            command.append("--expect-no-gpu")
        for group in args.only or ():
            command += ["--only", group]
        print("+ " + " ".join(command), flush=True)
        # Run from the scratch folder so that no torch/ folder beside us can shadow the wheel.
        result = subprocess.run(command, cwd=venv.parent, check=False)
        if companion is not None:
            vision = [str(python), str(VISION_CHECKS), "--expect-version", args.companion_version]
            if args.vision_device:
                vision += ["--device", args.vision_device]
            print("+ " + " ".join(vision), flush=True)
            vision_result = subprocess.run(vision, cwd=venv.parent, check=False)
            if result.returncode == 0:
                result = vision_result
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    verdict = "passed" if result.returncode == 0 else "FAILED"
    print(f"{wheel.name}: checks {verdict} in {time.monotonic() - started:.0f} s")
    return 0 if result.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
