"""The rows a full run of the suite writes, enumerated from the groups' own tables, no device.

Keys are compat.json's: (group, op, dtype), the way `_compat._rows` names every row of a
report. The survey of public reports (known_gpu_bugs.yaml) names the rows that would catch
each report with these keys, and its test checks every key against this enumeration: a row
renamed or dropped in a group's code shows up as a survey entry that points at nothing.

Rows a device does not reach (an unsupported dtype becomes one "*" row) are listed as a
device that supports every dtype would write them.
"""

from __future__ import annotations

from . import _grid, _memory, _ops, _parity, _reports, _sampling, _shapes, _soak, _training, _vision, _workloads

Key = tuple[str, str, str]


def parity_rows() -> set[Key]:
    rows = {("parity", op, d) for op in _ops.ops_for(True, None, False) for d in _parity.FLOATING}
    rows |= {("parity", op, d) for op in _ops.ops_for(False, None, False) for d in _parity.INTEGRAL}
    return rows | {("parity", f"torchvision.ops.{name}", "float32") for name in _vision.OPS}


def shapes_rows() -> set[Key]:
    rows = {("shapes", f"shapes.{c.op}", d) for c in _shapes.cases(quick=False) for d in _parity.FLOATING}
    rows |= {("shapes", f"shapes.{c.op}", d) for d in _shapes.INTEGRAL for c in _shapes.int_cases(False, d)}
    # The large cases are float32 only, and only where a memory budget is known.
    return rows | {("shapes", f"shapes.{c.op}", "float32") for c in _shapes.large_cases(1024)}


def grid_rows() -> set[Key]:
    return {("grid", op, d) for op, d in _grid.rows()}


def soak_rows() -> set[Key]:
    # Only with --soak MINUTES.
    return {("soak", _soak.OP, "float32")}


def sampling_rows() -> set[Key]:
    # On the CPU every dtype's probe passes: the rows of a device that supports them all.
    return {("sampling", f"sampling.{c.op}", c.dtype) for c in _sampling.checks("cpu")}


def kernels_rows() -> set[Key]:
    # One summary row for torch's bundled Metal library (pass, fail, or skip off mps), and one
    # row per function that fails to build, named after it: those cannot be listed here.
    return {("kernels", "kernels.*", "-")}


def reports_rows() -> set[Key]:
    return {("reports", op, d) for op, d in _reports.rows()}


def memory_rows() -> set[Key]:
    # The checks are closures: building them allocates nothing on a device. On the CPU the
    # budget-sized allocation checks are one row either way.
    rows = set()
    for check in _memory.checks("cpu", None, 0.6):
        name, _, dtype = check.name.partition(":")
        rows.add(("memory", f"memory.{name}", dtype or "-"))
    return rows


def training_rows() -> set[Key]:
    return {("training", name, "float32") for name in _training.MODELS}


def workloads_rows() -> set[Key]:
    return {("workloads", op, d) for op, d in _workloads.rows()}


def suite_rows() -> set[Key]:
    """Every (group, op, dtype) of a full run (no --quick) on a device with every dtype."""
    return (parity_rows() | shapes_rows() | grid_rows() | reports_rows() | sampling_rows() | memory_rows()
            | training_rows() | kernels_rows() | workloads_rows() | soak_rows())  # fmt: skip
