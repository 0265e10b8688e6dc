"""The release plan: what ``release.yml`` would run for a tag, read from the workflow itself.

``make ci-plan TAG=v2.15.0-1`` loads ``.github/workflows/release.yml``, plays the part of
GitHub for the event that tag (or a workflow_dispatch) would trigger, and prints the job
graph and every step each job runs, with matrix values, env values and conditions filled
in. Nothing here restates the workflow, so the plan cannot drift from it:

* job order, ``needs``, ``if``, ``runs-on``, ``env``, ``permissions`` and steps come from
  the YAML;
* a step that runs ``python -m intelmac_torch_builder matrix ... --github-output`` is executed for
  real (its command line is parsed by the real CLI parser) to produce the job outputs that
  later ``fromJSON(needs.<job>.outputs.<kind>)`` matrices expand.

Values only known at run time (``github.run_id``, ``steps.<id>.outputs``) print as
``<github.run_id>``. The plan assumes every job succeeds.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from packaging.version import Version

from ..core.catalog import REPO_ROOT, Catalog
from ..core.errors import BuildError
from . import _args, budget, expressions, tags
from . import matrix as matrix_module
from .expressions import Unknown

RELEASE_WORKFLOW = REPO_ROOT / ".github" / "workflows" / "release.yml"
DEFAULT_REPOSITORY = "OWNER/REPO"


@dataclass
class Step:
    name: str
    condition: str  # "" when it runs unconditionally, else why it may not
    uses: str | None = None
    with_: dict[str, Any] = field(default_factory=dict)
    run: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    working_directory: str | None = None


@dataclass
class JobRun:
    """One job of the graph for one matrix entry."""

    name: str
    runs_on: str
    env: dict[str, str]
    steps: list[Step]
    budget_minutes: float = 0.0  # the time model's minutes for this run (ci/budget.py)
    version: str | None = None  # the line it builds, if any


@dataclass
class Job:
    id: str
    needs: tuple[str, ...]
    status: str  # "runs", "skipped: <why>" or "depends on run time: <why>"
    permissions: Any
    timeout_minutes: Any
    runs: list[JobRun]


@dataclass
class Plan:
    workflow: Path
    event: str
    description: str
    jobs: list[Job]
    #: The modelled minutes of each built line's fail-fast step (ci/budget.py).
    failfast_minutes: dict[str, float] = field(default_factory=dict)


def load_workflow(path: Path) -> dict[str, Any]:
    try:
        document = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise BuildError(
            f"No workflow at {path}: ci-plan reads the workflows of a checkout of this "
            "repository; run it there (make ci-plan TAG=...)."
        ) from None
    if not isinstance(document, dict) or "jobs" not in document:
        raise BuildError(f"{path} is not a GitHub Actions workflow (no 'jobs').")
    # YAML 1.1 reads the key `on` as the boolean True.
    if True in document and "on" not in document:
        document["on"] = document.pop(True)
    return document


def ordered(jobs: Mapping[str, Any]) -> list[str]:
    """Job ids in dependency order, keeping the file's order where it is free."""
    done: list[str] = []
    pending = list(jobs)
    while pending:
        for job_id in pending:
            needs = needs_of(jobs[job_id])
            missing = [need for need in needs if need not in jobs]
            if missing:
                raise BuildError(f"job '{job_id}' needs unknown job(s): {', '.join(missing)}")
            if all(need in done for need in needs):
                done.append(job_id)
                pending.remove(job_id)
                break
        else:
            raise BuildError(f"the jobs {', '.join(pending)} need each other in a cycle")
    return done


def needs_of(job: Mapping[str, Any]) -> tuple[str, ...]:
    needs = job.get("needs", ())
    return (needs,) if isinstance(needs, str) else tuple(needs)


#: The default branch the plan assumes (a repository setting; only payloads that carry a
#: repository object name it).
DEFAULT_BRANCH = "main"
EVENTS: tuple[str, ...] = ("push", "workflow_dispatch", "schedule")


def _repository_payload(repository: str) -> dict[str, Any]:
    return {"full_name": repository, "default_branch": DEFAULT_BRANCH}


def event_contexts(workflow: Mapping[str, Any], catalog: Catalog, *, event: str | None,
                   tag: str | None, lines: str | None, pythons: str | None,
                   repository: str, variables: Mapping[str, str],
                   inputs: Mapping[str, str] | None = None,
                   run_attempt: Any = None) -> tuple[str, str, dict[str, Any]]:
    """The contexts GitHub gives a run of ``event`` (GitHub docs, 'Events that trigger
    workflows' and 'Contexts'):

    * ``push`` of a tag: ``github.ref`` is the tag; the payload carries the repository;
    * ``workflow_dispatch``: on the default branch, or on ``tag`` (Use workflow from → Tags);
      the payload carries the inputs and the repository;
    * ``schedule``: always the default branch's latest commit; the payload carries only the
      cron line, no repository (so no ``github.event.repository.default_branch``).
    """
    triggers = workflow["on"]
    event = event or ("push" if tag else "workflow_dispatch")
    if event not in EVENTS:
        raise BuildError(f"ci-plan knows the events {', '.join(EVENTS)}, not '{event}'.")
    if event not in triggers:
        raise BuildError(f"This workflow has no {event} trigger (see its on:).")
    github: dict[str, Any] = {
        "repository": repository,
        "event_name": event,
        "repository_owner": repository.split("/")[0],
        "server_url": "https://github.com",
        "run_id": Unknown("github.run_id"),
        "run_attempt": run_attempt if run_attempt is not None else Unknown("github.run_attempt"),
        "token": Unknown("github.token"),
        "sha": Unknown("github.sha"),
        "workspace": Unknown("github.workspace"),
    }
    if tag:
        if event == "schedule":
            raise BuildError("A scheduled run has no tag: it runs on the default branch.")
        tags.versions_for_tag(catalog, tag)  # an invalid tag fails like in CI
        if event == "push" and not _tag_triggers(workflow, tag):
            raise BuildError(f"{tag} does not trigger this workflow (see its on.push.tags).")
        github.update(ref=f"refs/tags/{tag}", ref_name=tag, ref_type="tag")
    elif event == "push":
        raise BuildError("A push runs this workflow only for a tag; give --tag.")
    else:
        github.update(ref=f"refs/heads/{DEFAULT_BRANCH}", ref_name=DEFAULT_BRANCH,
                      ref_type="branch")
    given: dict[str, Any] = {}
    if event == "workflow_dispatch":
        declared = (triggers["workflow_dispatch"] or {}).get("inputs", {}) or {}
        given = {name: spec.get("default", "") for name, spec in declared.items()}
        given.update(inputs or {})
        if lines is not None:
            given["lines"] = lines
        if pythons is not None:
            given["pythons"] = pythons
        github["event"] = {"inputs": given, "ref": github["ref"],
                           "repository": _repository_payload(repository)}
        description = (f"workflow_dispatch on {github['ref_name']} with "
                       + ", ".join(f"{name}={value!r}" for name, value in given.items()))
    elif event == "schedule":
        crons = [entry.get("cron") for entry in triggers["schedule"] or []]
        github["event"] = {"schedule": crons[0] if crons else ""}
        description = f"schedule ({', '.join(map(str, crons))}) on {DEFAULT_BRANCH}"
    else:
        github["event"] = {"ref": github["ref"], "repository": _repository_payload(repository)}
        description = f"push of tag {tag}"
    contexts = {
        "github": github,
        "inputs": given,
        "vars": dict(variables),
        "secrets": Unknown("secrets"),
        "runner": {"temp": Unknown("runner.temp"), "os": "", "arch": ""},
        "env": {},
        "needs": {},
        "steps": {},
        "matrix": {},
        "strategy": {},
        "job": {},
    }
    return event, description, contexts


def _tag_triggers(workflow: Mapping[str, Any], tag: str) -> bool:
    push = workflow["on"].get("push") or {}
    patterns = push.get("tags")
    if patterns is None:
        return False
    return any(_glob_match(pattern, tag) for pattern in patterns)


def _glob_match(pattern: str, text: str) -> bool:
    """GitHub's filter patterns: * (no slash), ** (anything), ?, +, [..]."""
    regex = ""
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("**", index):
            regex += ".*"
            index += 2
            continue
        if char == "*":
            regex += "[^/]*"
        elif char == "[":
            end = pattern.index("]", index)
            regex += pattern[index:end + 1]
            index = end
        elif char in "?+":
            regex += char
        else:
            regex += re.escape(char)
        index += 1
    return re.fullmatch(regex, text) is not None


def _substitute_env(script: str, env: Mapping[str, str]) -> str:
    """Fill in $NAME / ${NAME} for the env values the plan knows; leave the rest to bash."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        value = env.get(name)
        if value is None or "<" in value:
            return match.group(0)
        return value

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", replace, script)


def _strings(mapping: Mapping[str, Any] | None, contexts: Mapping[str, Any]) -> dict[str, str]:
    return {key: expressions.to_string(expressions.interpolate(value, contexts))
            for key, value in (mapping or {}).items()}


def run_matrix_step(command: str, catalog: Catalog,
                    draft_assets: Sequence[str] = ()) -> dict[str, str] | None:
    """Outputs of a `python -m intelmac_torch_builder matrix ... --github-output` step, computed.

    ``draft_assets`` stands in for the file its ``--draft`` names (what the tag's draft
    release holds; none in a plan)."""
    if "intelmac_torch_builder matrix" not in command or "--github-output" not in command:
        return None
    words = shlex.split(command)
    start = words.index("matrix") + 1
    args = _args.matrix_parser("python -m intelmac_torch_builder").parse_args(words[start:])
    if args.catalog:
        from ..core import catalog as catalog_module

        catalog = catalog_module.load(Path(args.catalog))
    lines = matrix_module.select_lines(catalog, tag=args.tag or None, lines=args.lines,
                                       pythons=args.pythons or None, refresh=args.event == "schedule")
    if args.kind == "all":
        document = matrix_module.all_matrices(catalog, lines, args.tag or None,
                                              draft_assets if args.draft else ())
    else:
        document = {args.kind: matrix_module.matrix(catalog, args.kind, lines)}
    return {name: json.dumps(value, separators=(",", ":"), sort_keys=True)
            for name, value in document.items()}


def expand_matrix(job_id: str, job: Mapping[str, Any],
                   contexts: Mapping[str, Any]) -> list[dict[str, Any]]:
    strategy = job.get("strategy") or {}
    if "matrix" not in strategy:
        return [{}]
    value = expressions.interpolate(strategy["matrix"], contexts)
    if isinstance(value, Unknown) or not isinstance(value, Mapping):
        raise BuildError(f"job '{job_id}': cannot expand matrix {strategy['matrix']!r}")
    axes = {key: item for key, item in value.items() if key not in ("include", "exclude")}
    if axes:
        raise BuildError(f"job '{job_id}': the plan expands only include-style matrices, "
                         f"as the catalog's generator makes them (found {', '.join(axes)})")
    return [dict(entry) for entry in value.get("include", [])]


def _job_runs(job: Mapping[str, Any], job_id: str, contexts: dict[str, Any],
              workflow_env: Mapping[str, str],
              catalog: Catalog) -> tuple[list[JobRun], dict[str, Any]]:
    runs: list[JobRun] = []
    outputs: dict[str, Any] = {}
    for entry in expand_matrix(job_id, job, contexts):
        # Step outputs exist only at run time, except the matrix step's, computed below.
        step_ids = {raw["id"]: Unknown(f"steps.{raw['id']}")
                    for raw in job.get("steps", []) if "id" in raw}
        github = {**contexts["github"], "job": job_id}
        local = {**contexts, "github": github, "matrix": entry, "steps": step_ids}
        name = expressions.to_string(expressions.interpolate(job.get("name", job_id), local))
        runs_on = expressions.interpolate(job.get("runs-on", ""), local)
        runs_on_text = ", ".join(map(str, runs_on)) if isinstance(runs_on, list) else str(runs_on)
        env = {**workflow_env, **_strings(job.get("env"), local)}
        local["env"] = env
        steps: list[Step] = []
        for number, raw in enumerate(job.get("steps", []), start=1):
            step_env = {**env, **_strings(raw.get("env"), {**local, "env": env})}
            step_contexts = {**local, "env": step_env}
            label = raw.get("name") or f"uses {raw.get('uses', f'step {number}')}"
            text = expressions.to_string(expressions.interpolate(label, step_contexts))
            condition = ""
            if "if" in raw:
                decided = expressions.condition(raw["if"], step_contexts)
                if decided is False:
                    continue
                if isinstance(decided, Unknown):
                    condition = f"if {raw['if']} (decided at run time)"
                elif expressions.uses_status_function(raw["if"]):
                    condition = f"if {raw['if']}"
            step = Step(name=text, condition=condition, env=_strings(raw.get("env"), step_contexts))
            if "uses" in raw:
                step.uses = raw["uses"]
                step.with_ = {key: expressions.to_string(expressions.interpolate(value, step_contexts))
                              for key, value in (raw.get("with") or {}).items()}
            if "run" in raw:
                script = expressions.to_string(expressions.interpolate(raw["run"], step_contexts))
                step.run = _substitute_env(script, step_env)
                # The plan's catalog stands in for the repository's (ci-plan --catalog).
                produced = run_matrix_step(step.run, catalog)
                if produced is not None and "id" in raw:
                    local["steps"][raw["id"]] = {"outputs": produced, "outcome": "success"}
            if "working-directory" in raw:
                step.working_directory = str(raw["working-directory"])
            steps.append(step)
        # Job outputs: a matrix job's outputs are those of its last entry, as on GitHub.
        outputs = {key: expressions.interpolate(value, local)
                   for key, value in (job.get("outputs") or {}).items()}
        version = entry.get("version")
        runs.append(JobRun(name=name, runs_on=runs_on_text, env=env, steps=steps,
                           budget_minutes=_modelled(job_id, job, entry, catalog),
                           version=version if isinstance(version, str) else None))
    return runs, outputs


def _model_kind(job_id: str) -> str:
    """The time model's name for a job: the warm-up jobs share one."""
    return "warmup" if re.fullmatch(r"warmup(-\d+)?", job_id) else job_id


def _modelled(job_id: str, job: Mapping[str, Any], entry: Mapping[str, Any],
              catalog: Catalog) -> float:
    version = entry.get("version")
    line = catalog.line(version) if isinstance(version, str) else None
    return budget.job_minutes(_model_kind(job_id), line, timeout_minutes=_timeout(job))


def _timeout(job: Mapping[str, Any]) -> float:
    return float(job.get("timeout-minutes", budget.figure("job_limit")))


def make_plan(workflow_path: Path, catalog: Catalog, *, tag: str | None = None,
              lines: str | None = None, pythons: str | None = None,
              repository: str = DEFAULT_REPOSITORY,
              variables: Mapping[str, str] | None = None, event: str | None = None) -> Plan:
    workflow = load_workflow(workflow_path)
    event, description, contexts = event_contexts(
        workflow, catalog, event=event, tag=tag, lines=lines, pythons=pythons,
        repository=repository, variables=variables or {})
    workflow_env = _strings(workflow.get("env"), contexts)
    jobs_yaml: Mapping[str, Any] = workflow["jobs"]
    jobs: list[Job] = []
    status_of: dict[str, str] = {}
    outputs_of: dict[str, dict[str, Any]] = {}
    for job_id in ordered(jobs_yaml):
        job = jobs_yaml[job_id]
        needs = needs_of(job)
        skipped_needs = [need for need in needs if status_of[need].startswith("skipped")]
        contexts["needs"] = {
            need: {"outputs": outputs_of[need],
                   "result": "skipped" if need in skipped_needs else "success"}
            for need in needs
        }
        status = "runs"
        if skipped_needs and not expressions.uses_status_function(job.get("if", "")):
            status = f"skipped: needs {', '.join(skipped_needs)}, which is skipped"
        elif "if" in job:
            decided = expressions.condition(job["if"], contexts)
            if decided is False:
                status = f"skipped: if {job['if']} is false"
            elif isinstance(decided, Unknown):
                status = f"depends on run time: if {job['if']}"
        runs: list[JobRun] = []
        outputs: dict[str, Any] = {}
        if not status.startswith("skipped"):
            runs, outputs = _job_runs(job, job_id, contexts, workflow_env, catalog)
        status_of[job_id] = status
        outputs_of[job_id] = outputs
        jobs.append(Job(id=job_id, needs=needs, status=status,
                        permissions=job.get("permissions", workflow.get("permissions")),
                        timeout_minutes=job.get("timeout-minutes", 360), runs=runs))
    built = sorted({run.version for job in jobs if job.id == "warmup" for run in job.runs
                    if run.version}, key=Version, reverse=True)
    return Plan(workflow=workflow_path, event=event, description=description, jobs=jobs,
                failfast_minutes={version: budget.failfast_minutes(catalog.line(version))
                                  for version in built})


def _permissions_text(permissions: Any) -> str:
    if permissions is None:
        return "(workflow default)"
    if permissions == {}:
        return "none"
    if isinstance(permissions, Mapping):
        return ", ".join(f"{key}: {value}" for key, value in permissions.items())
    return str(permissions)


def render(plan: Plan) -> str:
    out: list[str] = []
    try:
        shown = plan.workflow.resolve().relative_to(REPO_ROOT)
    except ValueError:
        shown = plan.workflow
    out.append(f"Workflow {shown}, event: {plan.description}")
    out.append("Assumes every job succeeds; <...> values exist only at run time.")
    out.append("")
    out.append("Job graph (budget: the time model's minutes, ci/budget.py, against "
               f"{budget.figure('budget_share'):.0%} of the job's timeout):")
    for job in plan.jobs:
        needs = f" <- {', '.join(job.needs)}" if job.needs else ""
        count = f" x{len(job.runs)}" if len(job.runs) > 1 else ""
        out.append(f"  {job.id}{count}{needs}  [{job.status}]{_budget_text(job)}")
    if plan.failfast_minutes:
        each = ", ".join(f"{version} {minutes:.0f} min" for version, minutes in plan.failfast_minutes.items())
        out.append("")
        out.append("Fail-fast step (core/failfast.py), first in the warm-up's time box: a source or "
                   f"shader that does not compile stops the job within {each} of compiling; it "
                   f"adds {budget.failfast_extra_minutes():.1f} min to each build job, as the bulk "
                   "compile reuses what it built.")
    for job in plan.jobs:
        out.append("")
        out.append("=" * 78)
        out.append(f"job {job.id}: {job.status}")
        out.append(f"  needs: {', '.join(job.needs) or '-'};  permissions: "
                   f"{_permissions_text(job.permissions)};  timeout: {job.timeout_minutes} min")
        for run in job.runs:
            out.append("")
            measured = budget.MEASURED.get(run.name)
            seen = f"; measured {measured:g} min" if measured is not None else ""
            out.append(f"  -- {run.name}  (runs-on: {run.runs_on}; budget "
                       f"{run.budget_minutes:.0f} min{seen})")
            for number, step in enumerate(run.steps, start=1):
                head = f"    {number}. {step.name}"
                if step.condition:
                    head += f"  [{step.condition}]"
                out.append(head)
                if step.uses and step.name != f"uses {step.uses}":
                    out.append(f"       uses {step.uses}")
                if step.uses:
                    for key, value in step.with_.items():
                        shown_value = value.replace("\n", " | ").rstrip(" |")
                        out.append(f"         {key}: {shown_value}")
                if step.run is not None:
                    if step.working_directory:
                        out.append(f"       (in {step.working_directory})")
                    for line in step.run.rstrip("\n").splitlines():
                        out.append(f"       $ {line}" if line.strip() else "       $")
    return "\n".join(out) + "\n"


def _budget_text(job: Job) -> str:
    if not job.runs:
        return ""
    limit = budget.job_budget(float(job.timeout_minutes))
    low = min(run.budget_minutes for run in job.runs)
    high = max(run.budget_minutes for run in job.runs)
    span = f"{low:.0f}" if round(low) == round(high) else f"{low:.0f}-{high:.0f}"
    return f"  budget {span} of {limit:.0f} min ({job.timeout_minutes} min timeout)"


def over_budget(plan: Plan) -> list[str]:
    """Every job run whose modelled minutes exceed its share of the job's timeout."""
    found = []
    for job in plan.jobs:
        limit = budget.job_budget(float(job.timeout_minutes))
        found += [f"{run.name}: {run.budget_minutes:.0f} min modelled > {limit:.0f} min "
                  f"({budget.figure('budget_share'):.0%} of {job.timeout_minutes})"
                  for run in job.runs if run.budget_minutes > limit]
    return found


def plan_commands(plan: Plan) -> dict[str, list[str]]:
    """Every run-step command of the plan, keyed by the job run's name (for tests and tools)."""
    commands: dict[str, list[str]] = {}
    for job in plan.jobs:
        for run in job.runs:
            commands[run.name] = [step.run for step in run.steps if step.run is not None]
    return commands


def job(plan: Plan, job_id: str) -> Job:
    for candidate in plan.jobs:
        if candidate.id == job_id:
            return candidate
    raise KeyError(job_id)


__all__: Sequence[str] = ("RELEASE_WORKFLOW", "Plan", "job", "make_plan", "over_budget",
                          "plan_commands", "render")
