"""The workflows pass zizmor (security) and actionlint / the workflow schema (structure),
and keep the rules of issue 5: no version lists, least privilege, pinned actions, a
release that never waits for the GPU runner."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ci_support import REPO, TOOLING_PYTHON, WORKFLOWS, load_workflow, venv_tool
from intelmac_torch_builder.core import catalog as catalog_module

WORKFLOW_FILES = sorted(WORKFLOWS.glob("*.yml"))
ZIZMOR_CONFIG = REPO / ".github" / "zizmor.yml"
PUBLISH_JOBS = ("attest", "release", "pages")
SEVERITY_RANK = {"informational": 0, "unknown": 0, "low": 1, "medium": 2, "high": 3}


def tool(name: str) -> Path:
    path = venv_tool(name)
    if not path.exists():  # the test extras install all three; say so instead of skipping
        pytest.fail(f"{path} is missing: install the test extras (pip install -e '.[test]')")
    return path


def zizmor_findings(folder: Path, config: Path = ZIZMOR_CONFIG) -> list[dict[str, Any]]:
    files = [str(path) for path in sorted(folder.glob("*.yml"))]
    result = subprocess.run(
        [str(tool("zizmor")), "--offline", "--format", "json", "--config", str(config), *files],
        capture_output=True, text=True, timeout=120, check=False)
    # Exit codes 0 and 10-14 mean "ran; these findings"; anything else is a crash.
    assert result.returncode == 0 or 10 <= result.returncode <= 14, result.stderr
    findings: list[dict[str, Any]] = json.loads(result.stdout or "[]")
    return findings


def medium_or_worse(findings: list[dict[str, Any]]) -> list[str]:
    bad = []
    for finding in findings:
        severity = str(finding["determinations"]["severity"]).lower()
        if SEVERITY_RANK.get(severity, 3) >= SEVERITY_RANK["medium"]:
            bad.append(f"{finding['ident']} ({severity}): {finding.get('desc', '')}")
    return bad


def all_jobs() -> dict[str, tuple[str, dict[str, Any]]]:
    jobs = {}
    for path in WORKFLOW_FILES:
        for job_id, job in load_workflow(path)["jobs"].items():
            jobs[f"{path.name}:{job_id}"] = (path.name, job)
    return jobs


def test_there_are_the_two_workflows() -> None:
    assert {path.name for path in WORKFLOW_FILES} == {"ci.yml", "release.yml"}


def test_zizmor_offline_reports_nothing_medium_or_worse() -> None:
    assert medium_or_worse(zizmor_findings(WORKFLOWS)) == []


def test_zizmor_would_catch_an_injection_and_an_unpinned_action(tmp_path: Path) -> None:
    # The audit above can fail: plant two classic mistakes in a copy and expect findings.
    planted = tmp_path / "workflows"
    shutil.copytree(WORKFLOWS, planted)
    text = (planted / "ci.yml").read_text()
    text = text.replace("actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v7.0.1",
                        "actions/checkout@v7", 1)
    text = text.replace("run: make test",
                        'run: echo "${{ github.event.pull_request.title }}" && make test', 1)
    (planted / "ci.yml").write_text(text)
    idents = {finding.split(" ")[0] for finding in medium_or_worse(zizmor_findings(planted))}
    assert {"template-injection", "unpinned-uses"} <= idents


def test_actionlint_passes() -> None:
    # With shellcheck, actionlint also checks every run: script (quoting, unset variables).
    shellcheck = ["-shellcheck", str(tool("shellcheck"))]
    result = subprocess.run([str(tool("actionlint")), "-no-color", *shellcheck, *map(str, WORKFLOW_FILES)],
                            cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_would_catch_a_broken_expression(tmp_path: Path) -> None:
    broken = tmp_path / ".github" / "workflows"
    broken.mkdir(parents=True)
    shutil.copy(REPO / ".github" / "actionlint.yaml", broken.parent)
    text = (WORKFLOWS / "release.yml").read_text().replace(
        "needs.matrix.outputs.build", "needs.matrix.outputs.biuld", 1)
    (broken / "release.yml").write_text(text)
    result = subprocess.run([str(tool("actionlint")), "-no-color", "release.yml"],
                            cwd=broken, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode != 0 and "biuld" in result.stdout


def test_github_workflow_schema() -> None:
    result = subprocess.run(
        [str(tool("check-jsonschema")), "--builtin-schema", "vendor.github-workflows",
         *map(str, WORKFLOW_FILES)], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dependabot_config_schema() -> None:
    # Dependabot keeps the SHA pins current; a broken config would silently stop that.
    result = subprocess.run(
        [str(tool("check-jsonschema")), "--builtin-schema", "vendor.dependabot",
         str(REPO / ".github" / "dependabot.yml")], capture_output=True, text=True, timeout=120,
        check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_hard_coded_versions() -> None:
    catalog = catalog_module.load()
    for path in WORKFLOW_FILES:
        text = path.read_text()
        for version in catalog.versions:
            assert version not in text, f"{path.name} names torch {version}; read the matrix"
        for job_id, job in load_workflow(path)["jobs"].items():
            strategy = job.get("strategy") or {}
            if "matrix" in strategy:
                assert re.fullmatch(r"\$\{\{ fromJSON\(needs\.matrix\.outputs\.\w+\) \}\}",
                                    str(strategy["matrix"])), f"{job_id} has its own matrix"
            for step in job.get("steps", []):
                python = (step.get("with") or {}).get("python-version")
                if python is not None:
                    assert python == TOOLING_PYTHON or str(python).startswith("${{ matrix."), (
                        f"{path.name}:{job_id} pins Python {python!r} outside the matrix")


def test_permissions_are_least_privilege() -> None:
    for path in WORKFLOW_FILES:
        assert load_workflow(path)["permissions"] == {}, f"{path.name} must start from no permissions"
    granted: dict[str, dict[str, str]] = {}
    for name, (_, job) in all_jobs().items():
        assert "permissions" in job, f"{name} must state its permissions"
        granted[name] = job["permissions"] or {}
        for scope, level in granted[name].items():
            assert level in ("read", "write"), f"{name}: {scope}: {level}"
    writers = {name: sorted(scope for scope, level in perms.items() if level == "write")
               for name, perms in granted.items() if "write" in perms.values()}
    assert writers == {
        "release.yml:matrix": ["contents"],  # reads the tag's draft: push access only
        "release.yml:attest": ["attestations", "id-token"],
        "release.yml:release": ["contents"],
        "release.yml:pages": ["id-token", "pages"],
        "release.yml:cache-prune": ["actions"],
    }


def test_publishing_happens_only_on_tag_pushes_and_never_waits_for_the_gpu() -> None:
    jobs = load_workflow(WORKFLOWS / "release.yml")["jobs"]
    # A tag's push, or a maintainer's workflow_dispatch on the tag (resuming its draft).
    assert "github.ref_type == 'tag'" in jobs["attest"]["if"]
    # release and pages run only after attest succeeded.
    assert "attest" in jobs["release"]["needs"] and "needs.attest.result == 'success'" in jobs["release"]["if"]
    assert jobs["pages"]["needs"] == "release" and "needs.release.result == 'success'" in jobs["pages"]["if"]

    def upstream(job_id: str) -> set[str]:
        needs = jobs[job_id].get("needs", [])
        needs = [needs] if isinstance(needs, str) else needs
        return set(needs).union(*(upstream(need) for need in needs)) if needs else set()

    for job_id in PUBLISH_JOBS:
        assert "regress-gpu" not in upstream(job_id)
        assert "test-wheel" in upstream(job_id) or job_id == "test-wheel"


def test_gpu_job_is_gated_and_its_skip_is_announced() -> None:
    jobs = load_workflow(WORKFLOWS / "release.yml")["jobs"]
    assert jobs["regress-gpu"]["if"].startswith("${{ vars.HAS_INTEL_GPU_RUNNER == 'true' && ")
    assert jobs["gpu-runner-notice"]["if"].startswith("${{ vars.HAS_INTEL_GPU_RUNNER != 'true' ")
    notice = " ".join(step["run"] for step in jobs["gpu-runner-notice"]["steps"])
    assert "::notice" in notice and "HAS_INTEL_GPU_RUNNER" in notice
    commands = " ".join(step.get("run", "") for step in jobs["regress-gpu"]["steps"])
    assert "make regress DEVICE=mps" in commands and "make bench DEVICE=mps" in commands


def test_build_job_timeouts_fit_githubs_limit() -> None:
    for name, (_, job) in all_jobs().items():
        assert 0 < int(job["timeout-minutes"]) <= 360, name
        for step in job.get("steps", []):
            if "timeout-minutes" in step:
                assert int(step["timeout-minutes"]) < int(job["timeout-minutes"]), name


def test_checkouts_keep_no_credentials_and_actions_are_sha_pinned() -> None:
    for path in WORKFLOW_FILES:
        for line in path.read_text().splitlines():
            match = re.search(r"uses:\s*(\S+)(.*)", line)
            if match:
                assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", match.group(1)), line
                assert re.fullmatch(r"\s*# v\d+\.\d+\.\d+", match.group(2)), f"no version comment: {line}"
        for job_id, job in load_workflow(path)["jobs"].items():
            for step in job.get("steps", []):
                if str(step.get("uses", "")).startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False, f"{path.name}:{job_id}"


def test_no_expression_is_expanded_inside_a_shell_script() -> None:
    # Values reach scripts through env:, so none can inject shell code (zizmor checks too).
    for name, (_, job) in all_jobs().items():
        for step in job.get("steps", []):
            assert "${{" not in step.get("run", ""), f"{name}: {step.get('name')}"


def test_pull_request_jobs_use_no_secrets() -> None:
    for job_id, job in load_workflow(WORKFLOWS / "ci.yml")["jobs"].items():
        text = json.dumps(job)
        assert "secrets." not in text and "github.token" not in text, job_id


def _uploads(workflow: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Every artifact upload of a workflow: (job id, step, its with:)."""
    found = []
    for job_id, job in workflow["jobs"].items():
        for step in job.get("steps", []):
            uses = str(step.get("uses", ""))
            if uses.startswith(("actions/upload-artifact@", "actions/upload-pages-artifact@")):
                found.append((job_id, step, step.get("with") or {}))
    return found


def rerun_breakers(workflow: dict[str, Any]) -> list[str]:
    """Uploads that a re-run of their job would break.

    Artifact names are unique within a workflow run, across its attempts: upload-artifact
    v4 and later refuses a name that exists unless `overwrite: true` (which replaces it),
    so a re-run needs one of the two: overwrite, or a name with github.run_attempt in it.
    upload-pages-artifact has no overwrite: its name must carry the attempt, and
    deploy-pages must be given that name.
    """
    bad = []
    for job_id, step, with_ in _uploads(workflow):
        name = str(with_.get("name", "github-pages" if "pages" in step["uses"] else "artifact"))
        per_attempt = "github.run_attempt" in name
        if "upload-pages-artifact" in step["uses"]:
            deploys = [other.get("with", {}).get("artifact_name") for other in
                       workflow["jobs"][job_id]["steps"]
                       if str(other.get("uses", "")).startswith("actions/deploy-pages@")]
            if not per_attempt or deploys != [name]:
                bad.append(f"{job_id}: the Pages artifact '{name}' (deploy-pages reads {deploys})")
        elif with_.get("overwrite") is not True and not per_attempt:
            bad.append(f"{job_id}: artifact '{name}' has neither overwrite: true nor the attempt")
    return bad


def test_every_upload_survives_a_rerun() -> None:
    for path in WORKFLOW_FILES:
        assert rerun_breakers(load_workflow(path)) == [], path.name


def test_the_rerun_check_finds_an_upload_that_a_rerun_would_break() -> None:
    workflow = load_workflow(WORKFLOWS / "release.yml")
    job = workflow["jobs"]["wheel"]
    logs = next(step for step in job["steps"] if step.get("name") == "Upload the build logs")
    logs["with"] = {key: value for key, value in logs["with"].items() if key != "overwrite"}
    pages = next(step for step in workflow["jobs"]["pages"]["steps"]
                 if "upload-pages-artifact" in str(step.get("uses")))
    pages["with"].pop("name")
    found = rerun_breakers(workflow)
    # The wheel job's log upload is a YAML anchor the torchvision job reuses: both break.
    assert [entry.split(":")[0] for entry in found] == ["wheel", "vision", "pages"]


def test_one_global_pages_group_and_drafts_before_publishing() -> None:
    jobs = load_workflow(WORKFLOWS / "release.yml")["jobs"]
    assert jobs["pages"]["concurrency"] == {"group": "pages", "cancel-in-progress": False}
    script = "\n".join(step.get("run", "") for step in jobs["release"]["steps"])
    # ci/draft.py adds to the tag's draft (never replacing an asset); published only whole
    # (or a subset on purpose, by hand): ci/release_status.py decides.
    assert script.index("ci.draft add") < script.index('ci.release_status --tag "$TAG" --publish')
    assert "--draft=false" not in script and "--clobber" not in script


def test_nothing_comes_from_homebrew() -> None:
    for path in WORKFLOW_FILES:
        text = path.read_text()
        assert "brew " not in text and "micromamba" not in text, path.name


def test_warmup_jobs_are_chained_and_as_many_as_the_model_allows() -> None:
    from intelmac_torch_builder.ci import budget

    jobs = load_workflow(WORKFLOWS / "release.yml")["jobs"]
    chain = [job_id for job_id in jobs if job_id == "warmup" or job_id.startswith("warmup-")]
    assert chain == ["warmup"] + [f"warmup-{n}" for n in range(2, budget.WARMUP_JOBS + 1)]
    for earlier, later in zip(chain, chain[1:]):
        assert earlier in jobs[later]["needs"]
        # A line whose warm-up failed must not stop the other lines' continuations.
        assert jobs[later]["if"].startswith("${{ !cancelled()")
        assert jobs[later]["steps"] == jobs["warmup"]["steps"]
    assert chain[-1] in jobs["wheel"]["needs"]


def test_the_xcode_step_names_the_catalog_field_the_matrix_reads() -> None:
    """A runner image without the line's Xcode: the error names the field to change, the one
    the matrix's xcode comes from (ci/matrix.py: line.xcode.runner)."""
    steps = load_workflow(WORKFLOWS / "release.yml")["jobs"]["warmup"]["steps"]
    script = next(step["run"] for step in steps if "xcode-select" in step.get("run", ""))
    named = re.search(r"the line's (xcode\.\w+) in patches/catalog\.yaml", script)
    assert named, script
    for line in catalog_module.load().lines:
        assert line.xcode is not None
        assert getattr(line.xcode, named.group(1).split(".")[1]) == line.xcode.runner
