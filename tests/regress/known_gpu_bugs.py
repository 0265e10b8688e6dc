"""The survey of public Intel/AMD Metal bug reports (known_gpu_bugs.yaml) and its page.

    python -m tests.regress.known_gpu_bugs            check the file and that the page is current
    python -m tests.regress.known_gpu_bugs --write    write docs/known-gpu-bugs.md from the file

The YAML holds the facts; docs/known-gpu-bugs.md is made from it, so a fact is written once.
tests/regress/test_known_gpu_bugs.py checks the file against its schema, against the suite's
own rows (tests/regress/_rows.py) and the page against the file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
SURVEY_FILE = HERE / "known_gpu_bugs.yaml"
SCHEMA_FILE = HERE / "known_gpu_bugs.schema.json"
PAGE_FILE = HERE.parents[1] / "docs" / "known-gpu-bugs.md"
WRITE_COMMAND = "python -m tests.regress.known_gpu_bugs --write"


def load(path: Path = SURVEY_FILE) -> dict[str, Any]:
    """The survey, checked against known_gpu_bugs.schema.json (jsonschema.ValidationError)."""
    import jsonschema  # the project's dependency; the suite itself runs without it

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    jsonschema.validate(data, json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))
    return data


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "/")


def _row_ref(row: dict[str, Any]) -> str:
    ref = f"`{row['group']}` `{row['op']}` {row['dtype']}"
    return ref + (f" (pending: {row['pending']})" if row.get("pending") else "")


def render(data: dict[str, Any]) -> str:
    reports, others = data["reports"], data["not_gpu_bugs"]
    certainty: dict[str, int] = {}
    for r in reports:
        certainty[r["certainty"]] = certainty.get(r["certainty"], 0) + 1
    with_rows = sum(1 for r in reports if r["rows"])
    coverage: dict[str, int] = {}
    for r in reports:
        coverage[r["coverage"]] = coverage.get(r["coverage"], 0) + 1
    pending = sum(1 for r in reports for row in r["rows"] if row.get("pending"))
    lines = [
        "# Known GPU bugs: public reports of Metal misbehaviour on Intel and AMD Macs",
        "",
        f"<!-- Generated from tests/regress/known_gpu_bugs.yaml by `{WRITE_COMMAND}`; edit the YAML. -->",
        "",
        "What users of PyTorch's MPS backend and of projects on the same Metal drivers (llama.cpp,",
        "whisper.cpp, tinygrad, MoltenVK, PlaidML, apps built on them) have reported on Intel and AMD",
        "Mac GPUs, and the rows of the regression suite (`python -m tests.regress`,",
        "[regression-and-benchmark.md](regression-and-benchmark.md)) that would catch each report.",
        "Rows are named as `compat.json` names them: group, op, dtype. The YAML holds every field",
        "(shape, symptom, why the certainty is what it is); this page is its summary.",
        "",
        f"{len(reports)} reports; {with_rows} have rows in the suite, the others say why none can.",
        "GPU the cause: " + ", ".join(f"{k} {n}" for k, n in sorted(certainty.items())) + ".",
        "*host-code* means the fix the report cites changed torch's host (CPU-side) code, not a",
        "kernel or a driver (pytorch PR 104374, argmax's -2^63 on x86): a bug of Intel Macs, not of",
        "their GPUs. An x86_64 Python, build or conda platform alone does not establish an Intel",
        "Mac (Rosetta 2 runs x86_64 code on Apple silicon), so such reports say `unknown`.",
        "Coverage: " + ", ".join(f"{k} {coverage.get(k, 0)}" for k in ("covered", "partial", "missed")) + ":",
        "*covered* when a row runs the report's trigger (its shapes and dtype, or a superset),",
        "*partial* when rows of its class run at other shapes or paths, *missed* when no row can.",
        "The `reports` group runs the cases that need a report's own shape, values or repetition",
        "(tests/regress/_reports.py).",
        *(
            [f"{pending} rows are marked *pending*: they belong to classes of issue 25 that are not",
             "in the suite yet (integer dtypes, sampling, the kernel compile probe, hang rows)."]
            if pending else []
        ),  # fmt: skip
        "",
        "| report | GPU (family) | macOS | version | op, dtype | GPU the cause? | coverage | suite rows |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        rows = "; ".join(_row_ref(x) for x in r["rows"]) or f"none: {_cell(r['no_row_reason'])}"
        lines.append(
            f"| [{r['id']}]({r['link']}) | {_cell(r['gpu'])} ({r['family']}) | {_cell(r['macos'])} | "
            f"{_cell(r['version'])} | {_cell(r['op'])}; {_cell(r['dtype'])} | {r['certainty']} | "
            f"{r['coverage']}{': ' + _cell(r['coverage_why']) if r.get('coverage_why') else ''} | {rows} |"
        )
    lines += [
        "",
        "## Not bugs of Intel or AMD GPUs",
        "",
        "| report | GPU (family) | version | why not |",
        "|---|---|---|---|",
    ]
    for r in others:
        lines.append(
            f"| [{r['id']}]({r['link']}) | {_cell(r['gpu'])} ({r['family']}) | {_cell(r['version'])} | "
            f"{_cell(r['why_not'])} |"
        )
    lines += [
        "",
        "## bfloat16 is probed, not assumed",
        "",
        "The report long cited for \"no Metal bfloat on Intel and AMD GPUs\" (pytorch 141864, above)",
        "ran torch 2.2.2, which refuses bfloat16 on MPS on every GPU: MPS bfloat16 arrived after it.",
        "It says nothing about the GPU. llama.cpp's Metal backend, as ToshLLM bundles it, logs",
        "`has bfloat = true` on a Radeon RX 6950 XT and a Radeon Pro Vega II Duo, both",
        "`MTLGPUFamilyMetal3` ([toshllm 28](https://github.com/engeldlgado/toshllm/issues/28),",
        "[toshllm 26](https://github.com/engeldlgado/toshllm/issues/26)): a capability flag, not a",
        "check of results. The suite therefore asks the device: before any bfloat16 row it",
        "computes a 4 x 4 bfloat16 matrix product and sum on the device and checks it against the",
        "CPU (tests/regress/_device.py, `dtype_supported`). Where that fails, one `unsupported` row",
        "says why; where it works, every bfloat16 row runs and is judged like the others.",
        "`compat.json` records the outcome per GPU, macOS and torch, which is how it gets settled.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.regress.known_gpu_bugs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--write", action="store_true", help=f"write {PAGE_FILE.name} from the YAML")
    args = p.parse_args(argv)
    try:
        page = render(load())
    except Exception as exc:  # noqa: BLE001  # yaml or jsonschema errors: say which file
        print(f"known_gpu_bugs: {SURVEY_FILE.name} is not valid: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    if args.write:
        PAGE_FILE.write_text(page, encoding="utf-8")
        print(f"known_gpu_bugs: wrote {PAGE_FILE}")
        return 0
    if not PAGE_FILE.exists() or PAGE_FILE.read_text(encoding="utf-8") != page:
        print(f"known_gpu_bugs: {PAGE_FILE} is out of date; run {WRITE_COMMAND}", file=sys.stderr)
        return 1
    print(f"known_gpu_bugs: {SURVEY_FILE.name} is valid and {PAGE_FILE.name} is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
