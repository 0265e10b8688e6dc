"""``make ci-simulate``: the release workflow through the ways a release fails.

The job graph is the one ``ci-plan`` derives from ``release.yml`` (its ``on:``, ``needs``,
``if:`` and matrix expressions, the matrix step run for real, each event's contexts). This
module plays GitHub's part with its documented semantics, and each scenario's maintainer
presses the button the run's error messages name:

* **order** (*Using jobs in a workflow*): jobs run in parallel unless ``needs`` orders
  them; each scenario runs with every job starting as soon as its needs end, and with the
  jobs one at a time in the file's order; an artifact is seen once its upload step ran;
* **macOS runners** (*Actions limits*): in a third order, at most ``MACOS_CONCURRENT``
  GitHub-hosted macOS legs run at once; the next waits for the first to end;
* **needs and if** (GitHub docs, *Using jobs* / *Expressions*): a job without an ``if``
  runs when every job before it in its chain succeeded; ``!cancelled()``, ``always()``,
  ``failure()`` lift that; a step's ``if`` defaults to the steps before it succeeding;
  ``continue-on-error`` turns a failing step's conclusion into success;
* **re-runs** (*Re-running workflows and jobs*): "Re-run failed jobs" runs the failed
  jobs (a matrix leg is a job) and every leg of every job that depends on them again, in
  the same run (same id, same ref and commit), up to 30 days after the first attempt; jobs
  left out keep their results and outputs; the run's artifacts stay;
* **permissions** (*Controlling permissions for GITHUB_TOKEN*, the actions' READMEs): a
  job's ``permissions:`` set the scopes they leave out to none; each step's needs
  (``NEEDS``) are checked against its job's;
* **the shell** (*Workflow syntax*, ``steps[*].shell``): ``bash -e {0}``: command lists,
  ``&&``, ``||``, ``set -e``/``+e``, ``exit``, ``return`` decide a step's exit status;
* **artifacts** (actions/upload-artifact): named per run, ``overwrite: true`` replaces one,
  gone after ``retention-days`` (default 90);
* **caches** (*Dependency caching*): a run restores its own ref's entries, then the default
  branch's, exact key first, then the newest entry matching a restore key; an entry unused
  for 7 days is removed, and beyond 10 GB the least recently used go first;
* **concurrency** (*Control the concurrency of workflows and jobs*): a group holds one
  running and one pending run, a newer one cancelling the pending; the scenarios
  run one after another, so none is cancelled, and a group that would cancel is an error;
* **timeouts**: a step past its ``timeout-minutes`` fails; a job past its own is cut off;
* **working-directory**: a step whose folder does not exist fails (download-artifact makes
  none when no artifact matches its pattern);
* **draft releases** (REST API, *List releases*): listed only to a token with push access,
  so a job without ``contents: write`` sees no draft of its tag.

Our own entry points run for real with the step's arguments where they decide the
release: ``ci.warmup run`` (its compile modelled), ``ci.release_status`` and ``ci.draft add``
(``gh`` answered by the world, ``_Gh``), the matrix step; ``ci.warmup`` next/ready/pick,
``ci.tested``, ``ci.wheel_names`` and ``ci.draft``'s refusal are their real functions. The other
commands (the compile, ``make build``, the tests, the index) are modelled step by step
(``COMMANDS``). A command without a model is an error, so a new step cannot slip past.

The scenarios' expected end states are the table in docs/releasing.md ("When a release
fails"); the run exits 0 only if every scenario ends as that table says.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import functools
import hashlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from unittest import mock

from ..core import catalog as catalog_module
from ..core.catalog import REPO_ROOT, Catalog
from ..core.errors import BuildError
from . import (
    budget,
    companion_tags,
    draft,
    expressions,
    pins,
    plan,
    release_status,
    tested,
    warmup,
    wheel_names,
)
from .expressions import Unknown

RELEASES_DOC = REPO_ROOT / "docs" / "releasing.md"
STATES = ("published", "draft, resumable", "failed, says why")
DEFAULT_REF = f"refs/heads/{plan.DEFAULT_BRANCH}"
RERUN_DAYS = 30
CACHE_IDLE_DAYS = 7
CACHE_LIMIT_GB = budget.figure("repo_cache_limit")
RERUN = "Re-run failed jobs"
#: How an error names that button (the older messages said "re-run the failed jobs").
RERUN_NAMED = re.compile(r"re-run (the )?failed jobs", re.IGNORECASE)
DISPATCH_ON_TAG = "Use workflow from"
#: The orders a run's jobs may take (each respects ``needs`` and nothing else).
#: The job orders every scenario is played in: each job as early as its needs allow (the
#: order that exposes a missing ``needs``: a job races what it does not wait for), one job at
#: a time in the file's order, and as early as GitHub's macOS limit lets the legs start
#: (``MACOS_CONCURRENT``: which of two ready jobs gets the runners first is not promised).
SCHEDULES = ("earliest", "serial", "queued")


class SimulationError(BuildError):
    """The workflow has a step or construct the simulation does not model."""


# --- the world: artifacts, caches, releases, the index ------------------------------------


@dataclass
class Artifact:
    run_id: int
    name: str
    hour: float
    retention_days: float
    payload: dict[str, Any]

    def alive(self, now: float) -> bool:
        """Uploaded by ``now`` (a job running beside the uploader sees it only once its
        step ran) and not yet past its retention."""
        return self.hour <= now < self.hour + self.retention_days * 24


@dataclass
class CacheEntry:
    ref: str
    key: str
    hour: float
    used: float
    payload: dict[str, Any]
    gigabytes: float = budget.figure("ccache_size")


@dataclass
class Release:
    draft: bool
    assets: dict[str, str]  # name -> sha256


@dataclass
class World:
    hour: float = 0.0
    artifacts: list[Artifact] = field(default_factory=list)
    caches: list[CacheEntry] = field(default_factory=list)
    releases: dict[str, Release] = field(default_factory=dict)
    index: dict[str, str] = field(default_factory=dict)  # wheel name -> sha256 pip checks
    swapped: list[str] = field(default_factory=list)  # published names the index re-pointed
    built: set[str] = field(default_factory=set)  # the digest of every wheel a build job made
    builds: int = 0

    def advance(self, hours: float) -> None:
        self.hour += hours
        idle = CACHE_IDLE_DAYS * 24
        self.caches = [entry for entry in self.caches if self.hour - entry.used < idle]

    def save_cache(self, ref: str, key: str, payload: dict[str, Any]) -> None:
        if any(entry.ref == ref and entry.key == key for entry in self.caches):
            return  # GitHub keeps the first entry of a key; the save only warns
        self.caches.append(CacheEntry(ref, key, self.hour, self.hour, payload))
        while sum(entry.gigabytes for entry in self.caches) > CACHE_LIMIT_GB:
            self.caches.remove(min(self.caches, key=lambda entry: entry.used))

    def restore_cache(self, ref: str, key: str, prefixes: Sequence[str]) -> CacheEntry | None:
        for scope in dict.fromkeys((ref, DEFAULT_REF)):
            entries = [entry for entry in self.caches if entry.ref == scope]
            found = next((entry for entry in entries if entry.key == key), None)
            for prefix in prefixes:
                if found is None:
                    matching = [entry for entry in entries if entry.key.startswith(prefix)]
                    found = max(matching, key=lambda entry: entry.hour, default=None)
            if found is not None:
                found.used = self.hour
                return found
        return None


# --- the faults a scenario plants, and the scenarios ---------------------------------------


@dataclass
class Faults:
    compile_boxes: float = 2.5  # the line's shared compile, in warm-up time boxes
    python_fails: dict[str, int] = field(default_factory=dict)  # Python -> attempts it fails
    vision_fails: int = 0  # attempts in which torchvision's build fails
    lost: tuple[str, int] | None = None  # (job id, attempt) whose runner is lost mid-job
    # (job id, attempt) whose compiler-cache hand-over upload fails (after `overwrite`
    # deleted the artifact it replaces: upload-artifact deletes first, then uploads)
    handover_fails: tuple[str, int] | None = None
    # Attempts count across the scenario's runs: 1 fails the first attempt only, 99 all.
    index_errors: int = 0  # attempts in which one SHA256SUMS download fails
    # A package the test job installs (unpinned) swaps the wheels beside it for other bytes.
    test_swaps: bool = False
    # The Python-ABI tag torchvision's build gives its wheel, where it is not the catalog's.
    vision_tag: str | None = None
    # Attempts in which warm-up job 1's compile fails (exit != 0: a full disk, a download).
    warmup_fails: int = 0
    # Python -> attempts in which its own part of the build fails to compile (what links
    # that Python: torch_python, its _C bindings); what every Python shares compiles.
    python_own_fails: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Action:
    kind: str  # "push", "schedule", "press" (the button the messages name), "wait",
    # "publish-subset" (release_status --publish --publish-subset, by hand)
    value: Any = None


@dataclass(frozen=True)
class Scenario:
    name: str
    about: str
    actions: tuple[Action, ...]
    faults: Callable[[Catalog, str], Faults] = lambda catalog, version: Faults()


def _newest(catalog: Catalog, version: str) -> str:
    return catalog.line(version).python[-1]


def _second(catalog: Catalog, version: str) -> str:
    return catalog.line(version).python[1]


PUSH = Action("push", 1)
PRESS = Action("press")
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("first-tag-green", "a tag, nothing fails", (PUSH,)),
    Scenario("warmup-out-of-time", "the shared compile needs more than the warm-up jobs hold; "
             "then the button", (PUSH, PRESS),
             lambda c, v: Faults(compile_boxes=budget.WARMUP_JOBS + 0.5)),
    Scenario("one-python-fails", "one Python's wheel fails once; then the button", (PUSH, PRESS),
             lambda c, v: Faults(python_fails={_second(c, v): 1})),
    Scenario("newest-python-fails", "the newest Python fails every time", (PUSH, PRESS),
             lambda c, v: Faults(python_fails={_newest(c, v): 99})),
    Scenario("torchvision-fails", "torchvision's build fails once; then the button",
             (PUSH, PRESS), lambda c, v: Faults(vision_fails=1)),
    Scenario("rerun-after-2-days", "one Python fails once; the button two days later",
             (PUSH, Action("wait", 48), PRESS),
             lambda c, v: Faults(python_fails={_second(c, v): 1})),
    Scenario("runner-lost-mid-job", "the runner of warm-up job 2 is lost; then the button",
             (PUSH, PRESS),
             lambda c, v: Faults(compile_boxes=budget.WARMUP_JOBS - 0.5, lost=("warmup-2", 1))),
    Scenario("index-transient-error", "one SHA256SUMS download fails once; then the button",
             (PUSH, PRESS), lambda c, v: Faults(index_errors=1)),
    Scenario("second-tag-same-line", "build 1 stays a draft (the newest Python fails), build "
             "2 after the fix", (PUSH, PRESS, Action("wait", 24), Action("push", 2)),
             lambda c, v: Faults(python_fails={_newest(c, v): 2})),
    Scenario("schedule-refresh", "the scheduled refresh of the compiler cache",
             (Action("schedule"), Action("wait", 84), Action("schedule"))),
    Scenario("test-dependency-swaps-wheels", "a package a test job installs (unpinned) swaps "
             "the wheels beside it", (PUSH,), lambda c, v: Faults(test_swaps=True)),
    Scenario("handover-upload-fails", "the last warm-up job finishes, and its compiler-cache "
             "hand-over upload fails; then the button", (PUSH, PRESS),
             lambda c, v: Faults(compile_boxes=budget.WARMUP_JOBS - 0.5,
                                 handover_fails=(f"warmup-{budget.WARMUP_JOBS}", 1))),
    Scenario("newest-python-own-part-fails", "the newest Python's own part of the build (its "
             "_C bindings) fails every time", (PUSH, PRESS),
             lambda c, v: Faults(python_own_fails={_newest(c, v): 99})),
    Scenario("subset-published-then-completed", "the newest Python fails once; the subset is "
             "published by hand; then the button", (PUSH, Action("publish-subset"), PRESS),
             lambda c, v: Faults(python_fails={_newest(c, v): 1})),
)


# --- one run ------------------------------------------------------------------------------


@dataclass
class Leg:
    name: str
    result: str  # success, failure, skipped
    outputs: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    matrix: dict[str, Any] = field(default_factory=dict)
    attempt: int = 0  # the attempt that ran it (a kept leg keeps an earlier one)
    job_id: str = ""
    start: float = 0.0  # hours on the world's clock
    minutes: float = 0.0  # the runner's minutes

    @property
    def end(self) -> float:
        return self.start + self.minutes / 60


@dataclass
class JobResult:
    result: str
    legs: list[Leg]
    outputs: dict[str, Any]
    why: str = ""


@dataclass
class Run:
    run_id: int
    event: str
    tag: str | None
    contexts: dict[str, Any]
    started: float
    attempt: int = 0
    jobs: dict[str, JobResult] = field(default_factory=dict)
    minutes: float = 0.0  # runner minutes over every attempt

    @property
    def ref(self) -> str:
        return str(self.contexts["github"]["ref"])

    def errors(self) -> list[str]:
        return [error for job in self.jobs.values() for leg in job.legs for error in leg.errors]


MatrixStep = Callable[[str, Catalog, Sequence[str]], "dict[str, str] | None"]


@dataclass(frozen=True)
class Code:
    """Our code the workflow's steps run: the warm-up's state machine and the matrix step.
    A test swaps in an older commit's, to run that commit's workflow as it was."""

    warmup: Any = warmup
    matrix_step: MatrixStep = plan.run_matrix_step
    error: type[Exception] = BuildError  # what that code raises for bad input
    # Whether pip installs must be pinned by hash: an older commit, from before the pins,
    # is compared on its graph, not on them.
    hash_pins: bool = True


@functools.lru_cache(maxsize=8)
def _load_workflow(path: str, mtime_ns: int) -> dict[str, Any]:
    """release.yml, parsed once per version of the file (the simulator only reads it)."""
    return plan.load_workflow(Path(path))


def _with_success(condition: Any) -> str:
    """An ``if:`` as GitHub evaluates it: without a status function it means
    ``success() && (...)`` (GitHub docs, 'Expressions', status check functions)."""
    if condition is None:
        return "success()"
    text = str(condition).strip()
    inner = text[3:-2].strip() if text.startswith("${{") and text.endswith("}}") else text
    if expressions.uses_status_function(inner):
        return inner
    return f"success() && ({inner})"


#: GitHub-hosted macOS jobs that run at once; more wait in a queue, first come first served
#: (GitHub docs, *Actions limits*, concurrent jobs: 5 macOS jobs on the Free, Pro and Team
#: plans, 50 on Enterprise).
MACOS_CONCURRENT = 5


class Simulator:
    def __init__(self, workflow_path: Path, catalog: Catalog, version: str, faults: Faults,
                 log: Callable[[str], None] | None = None, code: Code = Code(),
                 schedule: str = "earliest", variables: Mapping[str, str] | None = None) -> None:
        self.variables = dict(variables or {})  # the repository's variables (vars.*)
        if schedule not in SCHEDULES:
            raise SimulationError(f"no schedule {schedule!r}: {', '.join(SCHEDULES)}")
        self.order_kind = schedule
        self.code = code
        self.workflow = _load_workflow(str(workflow_path), workflow_path.stat().st_mtime_ns)
        self.jobs: Mapping[str, Any] = self.workflow["jobs"]
        self.order = plan.ordered(self.jobs)
        self.catalog = catalog
        self.version = version
        self.faults = faults
        self.world = World()
        self.runs: list[Run] = []
        self.macos_concurrent = MACOS_CONCURRENT
        # (start, end) hours of every GitHub-hosted macOS leg so far, in the order they
        # started: the account's macOS slots, shared by every run.
        self.macos_legs: list[tuple[float, float]] = []
        self.attempts = 0  # every attempt of every run: the faults count these
        self.failed_before: set[str] = set()  # the jobs that failed before this attempt
        self.log = log or (lambda text: None)
        self._check_concurrency()

    def _check_concurrency(self) -> None:
        for where, spec in [("workflow", self.workflow.get("concurrency"))] + [
                (job_id, job.get("concurrency")) for job_id, job in self.jobs.items()]:
            if isinstance(spec, Mapping) and spec.get("cancel-in-progress") not in (False, None):
                raise SimulationError(f"{where}: cancel-in-progress would cancel a release run "
                                      "that another run of its group follows")

    # -- the maintainer's actions --

    def push(self, build: int) -> Run:
        tag = f"v{self.version}-{build}"
        return self._start("push", tag)

    def schedule(self) -> Run:
        return self._start("schedule", None)

    def publish_subset(self) -> str:
        """The maintainer's `release_status --tag T --publish --publish-subset`, run for real."""
        run = self.runs[-1]
        code, printed, _ = _entry_point(
            release_status.main, ["--tag", run.tag or "", "--publish", "--publish-subset"],
            {}, {}, _Gh(self, run, None), self.catalog)
        return "published the subset" if code == 0 else f"refused ({printed.strip()[:80]})"

    def dispatch_on_tag(self, tag: str) -> Run:
        return self._start("workflow_dispatch", tag)

    def _start(self, event: str, tag: str | None) -> Run:
        _, _, contexts = plan.event_contexts(
            self.workflow, self.catalog, event=event, tag=tag, lines=None, pythons=None,
            repository=plan.DEFAULT_REPOSITORY, variables=self.variables)
        run = Run(len(self.runs) + 1, event, tag, contexts, self.world.hour)
        self.runs.append(run)
        self._attempt(run, set(self.order))
        return run

    def press(self) -> str:
        """The button the last run's messages name; what was pressed (or why nothing)."""
        run = self.runs[-1]
        text = " ".join(run.errors())
        if RERUN_NAMED.search(text) and self.world.hour - run.started <= RERUN_DAYS * 24:
            self._attempt(run, self._failed_and_dependents(run))
            return RERUN
        if DISPATCH_ON_TAG in text and run.tag:
            self.dispatch_on_tag(run.tag)
            return f"Run workflow on {run.tag}"
        return "no button named"

    def _failed_and_dependents(self, run: Run) -> set[str]:
        chosen = {job_id for job_id, job in run.jobs.items() if job.result == "failure"}
        for job_id in self.order:
            if set(plan.needs_of(self.jobs[job_id])) & chosen:
                chosen.add(job_id)
        return chosen

    # -- the jobs of one attempt --

    def _attempt(self, run: Run, chosen: set[str]) -> None:
        """One attempt: each chosen job starts once every job it needs has ended, and no
        other order is promised (GitHub docs, 'Using jobs in a workflow': jobs run in
        parallel unless ``needs`` says otherwise). ``serial`` runs them one at a time in the
        file's order; ``earliest`` starts each as early as its needs allow, so a job sees
        only the artifacts its needs (and whatever happened to end before it) uploaded."""
        run.attempt += 1
        self.attempts += 1
        run.contexts["github"]["run_attempt"] = str(run.attempt)
        run.contexts["github"]["run_id"] = str(run.run_id)
        start = self.world.hour
        self.failed_before = {job_id for job_id, job in run.jobs.items()
                              if job.result == "failure"}
        ends = {job_id: start for job_id in self.order if job_id not in chosen}
        pending = [job_id for job_id in self.order if job_id in chosen]
        clock = start
        while pending:
            ready = [job_id for job_id in pending
                     if all(need in ends for need in plan.needs_of(self.jobs[job_id]))]
            if self.order_kind == "serial":
                job_id, begins = ready[0], clock
            else:
                job_id, begins = min(((j, max([start] + [ends[n] for n in plan.needs_of(
                    self.jobs[j])])) for j in ready), key=lambda pair: pair[1])
            pending.remove(job_id)
            self.world.hour = begins
            before = run.jobs.get(job_id)
            result = self._job(run, job_id, before, begins)
            run.jobs[job_id] = result
            ends[job_id] = max([begins] + [leg.end for leg in result.legs])
            clock = ends[job_id]
            run.minutes += sum(leg.minutes for leg in result.legs if leg.attempt == run.attempt)
        self.world.hour = start
        self.world.advance(max(ends.values(), default=start) - start)
        self.log(f"  run {run.run_id} attempt {run.attempt}: " + ", ".join(
            f"{job_id}={run.jobs[job_id].result}" for job_id in self.order if job_id in run.jobs))
        for error in run.errors():
            self.log(f"    ! {error}")

    def _ancestors(self, job_id: str) -> set[str]:
        found: set[str] = set()
        for need in plan.needs_of(self.jobs[job_id]):
            found |= {need} | self._ancestors(need)
        return found

    def _job(self, run: Run, job_id: str, before: JobResult | None, begins: float) -> JobResult:
        job = self.jobs[job_id]
        needs = plan.needs_of(job)
        contexts = {**run.contexts, "needs": {
            need: {"result": run.jobs[need].result if need in run.jobs else "skipped",
                   "outputs": run.jobs[need].outputs if need in run.jobs else {}}
            for need in needs}}
        results = [run.jobs[a].result if a in run.jobs else "skipped"
                   for a in self._ancestors(job_id)]
        contexts[expressions.STATUS_KEY] = {
            "success": all(result == "success" for result in results),
            "failure": any(result == "failure" for result in results),
            "always": True, "cancelled": False}
        condition = _with_success(job.get("if"))
        decided = expressions.condition(condition, contexts)
        if isinstance(decided, Unknown):
            raise SimulationError(f"job {job_id}: cannot decide if {condition!r} ({decided})")
        if not decided:
            return JobResult("skipped", [], {}, why=f"if {condition}")
        try:
            entries = plan.expand_matrix(job_id, job, contexts)
        except BuildError as exc:
            raise SimulationError(str(exc)) from None
        if not entries:
            leg = Leg(job_id, "failure", errors=[f"{job_id}: the matrix has no entries"])
            return JobResult("failure", [leg], {})
        legs = []
        # "Re-run failed jobs" re-runs the failed jobs (a matrix's legs are jobs of their
        # own) and every job that depends on them, all its legs (GitHub docs, 'Re-running
        # workflows and jobs'): only a job with no failed job up its chain keeps legs.
        dependent = bool(self._ancestors(job_id) & self.failed_before)
        for entry in entries:
            kept = None if dependent else self._kept_leg(before, entry)
            legs.append(kept if kept is not None else self._leg(run, job_id, job, entry, contexts,
                                                                begins))
        result = "failure" if any(leg.result == "failure" for leg in legs) else "success"
        outputs = legs[-1].outputs if legs else {}
        return JobResult(result, legs, outputs)

    @staticmethod
    def _kept_leg(before: JobResult | None, entry: Mapping[str, Any]) -> Leg | None:
        """A matrix leg that succeeded in an earlier attempt of a failed job is not re-run."""
        if before is None or before.result != "failure":
            return None
        return next((leg for leg in before.legs if leg.matrix == dict(entry)
                     and leg.result == "success"), None)

    def _leg(self, run: Run, job_id: str, job: Mapping[str, Any], entry: Mapping[str, Any],
             contexts: Mapping[str, Any], begins: float) -> Leg:
        name = expressions.to_string(expressions.interpolate(
            job.get("name", job_id), {**contexts, "matrix": entry}))
        hosted_mac = str(expressions.interpolate(job.get("runs-on", ""),
                                                 {**contexts, "matrix": entry})).startswith("macos-")
        if hosted_mac and self.order_kind == "queued":
            begins = self._macos_slot(begins)
        leg = Leg(name, "success", matrix=dict(entry), attempt=run.attempt, start=begins,
                  job_id=job_id)
        self._run_leg(run, job_id, job, leg, contexts, begins)
        if hosted_mac and self.order_kind == "queued":
            self.macos_legs.append((leg.start, leg.end))
        return leg

    def _macos_slot(self, ready: float) -> float:
        """When a macOS leg ready at ``ready`` gets a runner: once fewer than
        ``macos_concurrent`` run, and not before one queued earlier started (first come,
        first served; the jobs reach here in the order they became ready)."""
        at = max([ready] + [start for start, _ in self.macos_legs[-1:]])
        while True:
            running = [end for start, end in self.macos_legs if start <= at < end]
            if len(running) < self.macos_concurrent:
                return at
            at = min(running)

    def _run_leg(self, run: Run, job_id: str, job: Mapping[str, Any], leg: Leg,
                 contexts: Mapping[str, Any], begins: float) -> None:
        name = leg.name
        entry = leg.matrix
        local: dict[str, Any] = {**contexts, "matrix": dict(entry), "steps": {},
                                 "github": {**contexts["github"], "job": job_id},
                                 "runner": {"temp": "/tmp/runner", "os": "macOS", "arch": "X64"}}
        env = {key: expressions.to_string(value) for key, value in
               expressions.interpolate(job.get("env") or {}, local).items()}
        env["GITHUB_JOB"] = job_id  # one of the variables every runner sets
        local["env"] = env
        files: dict[str, Any] = {}
        failed = False
        minutes = 0.0
        timeout = float(job.get("timeout-minutes", 360))
        for number, raw in enumerate(job.get("steps", []), start=1):
            self.world.hour = begins + minutes / 60  # what this step sees, and stamps
            local[expressions.STATUS_KEY] = {"success": not failed, "failure": failed,
                                             "always": True, "cancelled": False}
            condition = _with_success(raw.get("if"))
            decided = expressions.condition(condition, local)
            if isinstance(decided, Unknown):
                raise SimulationError(f"{name}, step {number}: cannot decide {condition!r}")
            step_id = raw.get("id")
            if not decided:
                if step_id:
                    local["steps"][step_id] = {"outcome": "skipped", "conclusion": "skipped",
                                               "outputs": {}}
                continue
            if self.faults.lost == (job_id, self.attempts) and "ci.warmup run" in str(raw.get("run")):
                leg.result = "failure"
                leg.errors.append(f"{name}: The runner lost communication with the server "
                                  "(the job stopped mid-step; nothing after it ran).")
                leg.minutes = minutes + float(self.line_box())
                return
            step_env = {**env, **{key: expressions.to_string(value) for key, value in
                                  expressions.interpolate(raw.get("env") or {}, local).items()}}
            with_ = {key: expressions.to_string(value) for key, value in
                     expressions.interpolate(raw.get("with") or {}, {**local, "env": step_env}).items()}
            script = None
            if "run" in raw:
                script = plan._substitute_env(expressions.to_string(
                    expressions.interpolate(raw["run"], {**local, "env": step_env})), step_env)
            folder = raw.get("working-directory")
            if folder and not any(key.startswith(f"{folder}/") for key in files):
                # GitHub starts no shell in a folder that does not exist: the step fails.
                outcome = StepOutcome(False, error=f"{name}: working directory {folder} does "
                                      "not exist (No such file or directory)")
            else:
                outcome = self._run_step(run, job_id, leg, raw, with_, script, step_env, files)
            limit = float(raw.get("timeout-minutes", timeout))
            if outcome.minutes > limit:
                outcome = StepOutcome(False, {}, f"{name}: '{raw.get('name', raw.get('uses'))}' "
                                      f"ran past its {limit:g}-minute timeout", limit)
            minutes += outcome.minutes
            if outcome.error:
                leg.errors.append(outcome.error)
            conclusion = outcome.ok or bool(raw.get("continue-on-error"))
            if step_id:
                local["steps"][step_id] = {
                    "outcome": "success" if outcome.ok else "failure",
                    "conclusion": "success" if conclusion else "failure",
                    "outputs": outcome.outputs}
            if outcome.env:
                env.update(outcome.env)
            if not conclusion:
                failed = True
            if minutes > timeout:
                leg.errors.append(f"{name}: the job ran past its {timeout:g}-minute timeout and "
                                  "was cancelled")
                failed = True
                break
        leg.result = "failure" if failed else "success"
        leg.minutes = minutes
        leg.outputs = {key: expressions.interpolate(value, local)
                       for key, value in (job.get("outputs") or {}).items()}

    # -- the steps --

    def _run_step(self, run: Run, job_id: str, leg: Leg, raw: Mapping[str, Any],
                  with_: Mapping[str, str], script: str | None, env: Mapping[str, str],
                  files: dict[str, Any]) -> StepOutcome:
        uses = str(raw.get("uses", "")).split("@")[0]
        if uses:
            model = ACTIONS.get(uses)
            if model is None:
                raise SimulationError(f"no model of the action {uses}")
            lacking = _lacks(self, job_id, uses)
            if lacking:
                return StepOutcome(False, error=f"{leg.name}: {uses} needs the job's token to "
                                   f"have {lacking} (HTTP 403: Resource not accessible by "
                                   "integration)")
            return model(self, run, leg, with_, files)
        assert script is not None
        # Comments say what a step does in words; only its commands choose its model.
        script = "\n".join(line for line in script.splitlines()
                           if not line.lstrip().startswith("#"))
        shell = str(raw.get("shell") or "")
        lists = _command_lists(script)
        if lists is None:  # a compound script (if, for, while, case, $(...)): one model
            return self._command(run, job_id, leg, raw, script, env, files)
        # GitHub runs a step without `shell:` as `bash -e {0}`, and `shell: bash` as
        # `bash --noprofile --norc -eo pipefail {0}` (docs, 'Workflow syntax', steps.shell):
        # -e stops at the first command list that fails, unless the list's failure is
        # tested (`a || b`, `a && b` but for its last command).
        errexit = shell in ("", "bash")
        total = StepOutcome(True, minutes=0.0)  # a step's minutes: its commands' (below)
        status = 0
        for commands in lists:
            status = 0
            for operator, words in commands:
                if (operator == "&&" and status != 0) or (operator == "||" and status == 0):
                    continue
                status, stop = self._simple(run, job_id, leg, raw, words, env, files, total)
                if stop is not None:
                    errexit = errexit if stop != "set" else total.env.pop("-e", "1") == "1"
                    if stop == "exit":
                        return _ended(total, status)
            if status != 0 and errexit:
                return _ended(total, status)
        return _ended(total, status)

    def _simple(self, run: Run, job_id: str, leg: Leg, raw: Mapping[str, Any],
                words: list[str], env: Mapping[str, str], files: dict[str, Any],
                total: StepOutcome) -> tuple[int, str | None]:
        """One simple command: bash's builtins here, our commands through their models.
        Returns its exit status, and "exit" or "set" where it changes how the script goes."""
        head = words[0] if words else ""
        if head in ("true", ":"):
            return 0, None
        if head == "false":
            return 1, None
        if head == "echo":  # an ::error:: annotation is what the maintainer reads
            text = " ".join(words[1:])
            match = re.match(r"::error[^:]*::(.*)", text, re.DOTALL)
            if match:
                total.error = "\n".join(filter(None, (total.error, f"{leg.name}: {match[1]}")))
            return 0, None
        if head == "exit":
            return int(words[1]) if len(words) > 1 else 0, "exit"
        if head == "return":  # bash: "can only `return' from a function or sourced script"
            return 1, None
        if head == "set":
            flags = "".join(w for w in words[1:] if w.startswith(("-", "+")))
            if "e" in flags:
                total.env["-e"] = "1" if flags.startswith("-") else "0"
                return 0, "set"
            return 0, None
        outcome = self._command(run, job_id, leg, raw, shlex.join(words), env, files,
                                " ".join(words))
        total.outputs.update(outcome.outputs)
        total.env.update(outcome.env)
        # The set-up commands (a noop's share of the job's set-up) count once a step.
        total.minutes = (max(total.minutes, outcome.minutes) if model_is_noop(outcome)
                         else total.minutes + outcome.minutes)
        if outcome.error:
            total.error = "\n".join(filter(None, (total.error, outcome.error)))
        return (0 if outcome.ok else outcome.status or 1), None

    def _command(self, run: Run, job_id: str, leg: Leg, raw: Mapping[str, Any], script: str,
                 env: Mapping[str, str], files: dict[str, Any],
                 words: str | None = None) -> StepOutcome:
        """The model of a command (``words``: its text unquoted, which the markers name)."""
        lacking = _lacks(self, job_id, script)
        if lacking:
            return StepOutcome(False, error=f"{leg.name}: the job's token lacks {lacking} "
                               "(HTTP 403: Resource not accessible by integration)")
        for marker, model in COMMANDS:
            if marker in (script if words is None else words):
                return model(self, run, leg, script, env, files)
        raise SimulationError(f"{job_id}: no model of the step {raw.get('name') or script[:60]!r}")

    def line(self) -> catalog_module.ReleaseLine:
        return self.catalog.line(self.version)

    def line_box(self) -> float:
        """The warm-up's time box, in minutes (what a lost runner had run by then)."""
        return budget.compile_minutes()


@dataclass
class StepOutcome:
    ok: bool
    outputs: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    minutes: float = 1.0
    env: dict[str, str] = field(default_factory=dict)
    status: int = 0  # the exit status, where a model knows it (else 1 for a failure)


def _ended(total: StepOutcome, status: int) -> StepOutcome:
    """The step as its script's exit status says: a failing command whose status the
    script swallowed (`|| true`) leaves a passing step, whatever it printed."""
    return StepOutcome(status == 0, total.outputs, total.error, total.minutes, total.env, status)


#: Shell syntax the line model below does not follow: such a script runs as one command.
_COMPOUND = re.compile(r"(^|[\s;])(if|then|for|while|until|case|do|done|fi|esac)(\s|$)|\$\(|`|\{|\}|(?<!\|)\|(?!\|)")


def _command_lists(script: str) -> list[list[tuple[str, list[str]]]] | None:
    """A script's command lists, one per line or `;`, each as (operator, words) with the
    operator before it ("", "&&", "||"); None where it uses compound syntax."""
    joined = script.replace("\\\n", " ")
    if _COMPOUND.search(joined):
        return None
    lists: list[list[tuple[str, list[str]]]] = []
    for line in joined.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        current: list[tuple[str, list[str]]] = []
        operator = ""
        words: list[str] = []
        for token in lexer:
            if token in ("&&", "||", ";"):
                current.append((operator, words))
                operator, words = token, []
                if token == ";":
                    lists.append(current)
                    current, operator = [], ""
            else:
                words.append(token)
        if words:
            current.append((operator, words))
        if current:
            lists.append(current)
    return lists


# --- actions --------------------------------------------------------------------------------

ActionModel = Callable[[Simulator, Run, Leg, Mapping[str, str], dict[str, Any]], StepOutcome]


def _noop(sim: Simulator, run: Run, leg: Leg, with_: Mapping[str, str],
          files: dict[str, Any]) -> StepOutcome:
    return StepOutcome(True)


def _upload(sim: Simulator, run: Run, leg: Leg, with_: Mapping[str, str],
            files: dict[str, Any]) -> StepOutcome:
    name = with_["name"]
    found = _collect(files, with_.get("path", ""))
    root = _artifact_root(with_.get("path", ""), files)
    payload = {key[len(root):].lstrip("/") if root else key: value for key, value in found.items()}
    if not payload and with_.get("if-no-files-found", "warn") == "error":
        return StepOutcome(False, error=f"{leg.name}: no files for artifact {name}")
    if not payload:
        return StepOutcome(True)
    world = sim.world
    same = [a for a in world.artifacts if a.run_id == run.run_id and a.name == name
            and a.alive(world.hour)]
    if same and with_.get("overwrite", "false") != "true":
        return StepOutcome(False, error=f"{leg.name}: an artifact named {name} exists in this run")
    for artifact in same:
        world.artifacts.remove(artifact)
    if (sim.faults.handover_fails == (leg.job_id, sim.attempts)
            and name.startswith(str(leg.matrix.get("ccache_artifact")))):
        return StepOutcome(False, error=f"{leg.name}: Failed to upload artifact {name}: "
                           "the connection was reset (the artifact it replaces is deleted)")
    days = float(with_.get("retention-days") or 90)
    world.artifacts.append(Artifact(run.run_id, name, world.hour, days, payload))
    return StepOutcome(True)


def _collect(files: Mapping[str, Any], paths: str) -> dict[str, Any]:
    """What a path (or several, one per line; globs) of the job's files holds."""
    found: dict[str, Any] = {}
    for path in filter(None, (line.strip() for line in paths.splitlines())):
        for key, value in files.items():
            if key == path or fnmatch.fnmatch(key, path) or key.startswith(path.rstrip("/") + "/"):
                found[key] = value
    return found


def _artifact_root(paths: str, files: Mapping[str, Any]) -> str:
    """The folder an artifact's paths are stored relative to (actions/upload-artifact: the
    least common ancestor of the search paths; a pattern's search path ends before its first
    wildcard, a single file's is its folder)."""
    roots = []
    for path in filter(None, (line.strip() for line in paths.splitlines())):
        parts = path.rstrip("/").split("/")
        wild = next((i for i, part in enumerate(parts) if any(c in part for c in "*?[")), None)
        if wild is not None:
            parts = parts[:wild]
        elif path in files:
            parts = parts[:-1]
        roots.append(parts)
    common: list[str] = []
    for segments in zip(*roots):
        if len(set(segments)) != 1:
            break
        common.append(segments[0])
    return "/".join(common)


def _download(sim: Simulator, run: Run, leg: Leg, with_: Mapping[str, str],
              files: dict[str, Any]) -> StepOutcome:
    world = sim.world
    alive = [a for a in world.artifacts if a.run_id == run.run_id and a.alive(world.hour)]
    target = with_.get("path", ".").rstrip("/")
    if "name" in with_:
        found = [a for a in alive if a.name == with_["name"]]
        if not found:
            return StepOutcome(False, error=f"{leg.name}: Artifact not found for name: "
                               f"{with_['name']} (expired or never uploaded)")
    else:
        found = [a for a in alive if fnmatch.fnmatch(a.name, with_.get("pattern", "*"))]
    for artifact in found:
        for key, value in artifact.payload.items():
            files[f"{target}/{key}"] = value
    return StepOutcome(True)


def _cache_restore(sim: Simulator, run: Run, leg: Leg, with_: Mapping[str, str],
                   files: dict[str, Any]) -> StepOutcome:
    prefixes = [line.strip() for line in with_.get("restore-keys", "").splitlines() if line.strip()]
    entry = sim.world.restore_cache(run.ref, with_["key"], prefixes)
    if entry is not None:
        files.update(entry.payload)  # the cached paths, where they were saved from
    return StepOutcome(True, {"cache-hit": str(entry is not None and entry.key == with_["key"]).lower()})


def _cache_save(sim: Simulator, run: Run, leg: Leg, with_: Mapping[str, str],
                files: dict[str, Any]) -> StepOutcome:
    payload = _collect(files, with_["path"])
    if payload:
        sim.world.save_cache(run.ref, with_["key"], payload)
    return StepOutcome(True)


def _pages_upload(sim: Simulator, run: Run, leg: Leg, with_: Mapping[str, str],
                  files: dict[str, Any]) -> StepOutcome:
    return _upload(sim, run, leg, {"name": with_.get("name", "github-pages"),
                                   "path": with_.get("path", "site"), "retention-days": "1",
                                   "if-no-files-found": "error"}, files)


def _deploy(sim: Simulator, run: Run, leg: Leg, with_: Mapping[str, str],
            files: dict[str, Any]) -> StepOutcome:
    name = with_.get("artifact_name", "github-pages")
    found = [a for a in sim.world.artifacts if a.run_id == run.run_id and a.name == name]
    if not found:
        return StepOutcome(False, error=f"{leg.name}: no Pages artifact {name}")
    sim.world.index = dict(found[-1].payload.get("index", {}))  # site/index, relative to site
    return StepOutcome(True)


ACTIONS: dict[str, ActionModel] = {
    "actions/checkout": _noop,
    "actions/setup-python": _noop,
    "actions/attest-build-provenance": _noop,
    "actions/upload-artifact": _upload,
    "actions/download-artifact": _download,
    "actions/cache/restore": _cache_restore,
    "actions/cache/save": _cache_save,
    "actions/upload-pages-artifact": _pages_upload,
    "actions/deploy-pages": _deploy,
}


# --- commands -------------------------------------------------------------------------------

CommandModel = Callable[[Simulator, Run, Leg, str, Mapping[str, str], dict[str, Any]], StepOutcome]
CCACHE = "/tmp/runner/ccache"


NOOP_MINUTES = budget.figure("setup") / 4


def _cmd_noop(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
              files: dict[str, Any]) -> StepOutcome:
    return StepOutcome(True, minutes=NOOP_MINUTES)


def model_is_noop(outcome: StepOutcome) -> bool:
    return outcome.ok and outcome.minutes == NOOP_MINUTES and not outcome.outputs


def _cmd_state(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
               files: dict[str, Any]) -> StepOutcome:
    """The warm-up's state commands (next, ready) and the job-id shell around them."""
    number = re.search(r"\(job (\d+)\)", leg.name)
    stage = int(number.group(1)) if number else 1
    outputs: dict[str, str] = {}
    extra_env = {"STAGE": str(stage)} if number else {}
    code = sim.code.warmup
    if "artifact" in getattr(code.State, "__dataclass_fields__", {}):
        # ci.warmup next/ready as the step runs them: their exit status and outputs.
        line = next(line for line in script.splitlines() if "ci.warmup" in line)
        argv = _argv_after(line.replace('"$stage"', str(stage)), "ci.warmup")
        status, printed, outputs = _entry_point(code.main, argv, env, files)
        return StepOutcome(status == 0, outputs, _said(leg, printed), env=extra_env,
                           status=status)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "warmup.json"
        if "state/warmup.json" in files:
            path.write_text(json.dumps(files["state/warmup.json"]))
        try:
            if "ci.warmup ready" in script:
                code.ready(path)
            elif "ci.warmup next --stage" in script:
                step = code.next_step(path, stage)
                outputs = {"todo": str(step.todo).lower(), "fresh": str(step.fresh).lower()}
            elif "ci.warmup next" in script:  # the older warm-up: job 1 starts, the rest read
                todo = True if stage == 1 else code.next_step(path)
                outputs = {"todo": str(bool(todo)).lower()}
            else:
                raise SimulationError(f"no model of {script[:80]!r}")
        except (BuildError, sim.code.error) as exc:
            return StepOutcome(False, error=f"{leg.name}: {exc}", env=extra_env)
    return StepOutcome(True, outputs, env=extra_env)


def _cmd_copy_vision(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
                     files: dict[str, Any]) -> StepOutcome:
    """The older test job's `cp vision/torchvision-*.whl dist/`."""
    for key in [k for k in files if k.startswith("vision/torchvision-")]:
        files["dist/" + key.split("/", 1)[1]] = files[key]
    return StepOutcome(True)


def _progress(files: Mapping[str, Any]) -> float:
    return float((files.get(f"{CCACHE}/ccache") or {}).get("boxes", 0.0))


def _cmd_compile(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
                 files: dict[str, Any]) -> StepOutcome:
    """One warm-up job's time-boxed compile: one box of the line's shared compile. The
    compile is modelled; ``ci.warmup run`` itself runs with the step's arguments (its
    state, its exit status, its messages), its compile replaced by the modelled one."""
    stage = int(env.get("STAGE") or 1)
    box = float(env.get("COMPILE_MINUTES") or budget.compile_minutes())
    done = _progress(files)
    need = sim.faults.compile_boxes
    gated_python = "make build" in script and "PYTHON=" in script  # the older warm-up: one
    # Python's whole make build (repair and verify too) is the gate
    python = env.get("PYTHON", "")
    if stage == 1 and not gated_python and sim.faults.warmup_fails >= sim.attempts:
        state = warmup.State(stage, warmup.FAILED, 2, box * 0.1, box)
    else:
        done = min(need, done + 1.0)
        files[f"{CCACHE}/ccache"] = {"boxes": done}
        if done >= need and gated_python and _python_fails(sim, python):
            state = warmup.State(stage, warmup.FAILED, 1, box, box)
        elif done >= need:
            state = warmup.State(stage, warmup.FINISHED, 0, box * 0.5, box)
        else:
            state = warmup.State(stage, warmup.UNFINISHED, 0, box, box)
    code = sim.code.warmup
    if "--version" in script and hasattr(code, "run_all"):
        return _real_warmup_run(sim, leg, script, env, files, state)
    # An older warm-up's state, as its code reads it (it had no artifact field).
    files["state/warmup.json"] = {k: v for k, v in state.__dict__.items() if k != "artifact"}
    if state.outcome == warmup.FAILED:
        why = (f"Python {python}'s wheel failed its verify stage" if gated_python
               else "the compile failed (exit 2)")
        return StepOutcome(False, {"outcome": state.outcome}, f"{leg.name}: {why}",
                           minutes=state.minutes)
    return StepOutcome(True, {"outcome": state.outcome}, minutes=state.minutes)


def _real_warmup_run(sim: Simulator, leg: Leg, script: str, env: Mapping[str, str],
                     files: dict[str, Any], state: warmup.State) -> StepOutcome:
    code = sim.code.warmup

    def compiled(commands: Any, *, minutes: float, stage: int, state_path: Path,
                 grace: float = 0.0) -> Any:
        # The commands are the real code's: a build stage that compiles a Python's own part
        # (no --shared-only) fails with it, once the compile gets that far (its last box).
        own = [python for command in commands if _builds_own_part(command)
               for python in _flag_values(command, "--python")]
        ended_as = state
        if state.outcome == warmup.FINISHED and any(_python_own_fails(sim, p) for p in own):
            ended_as = replace(state, outcome=warmup.FAILED, exit_code=1)
        known = getattr(code.State, "__dataclass_fields__", {})
        ended = code.State(**{k: v for k, v in ended_as.__dict__.items() if k in known})
        ended.save(state_path)
        return ended

    with mock.patch.object(code, "run_all", compiled):
        status, printed, outputs = _entry_point(code.main, _argv_after(script, "ci.warmup"),
                                                env, files)
    return StepOutcome(status == 0, outputs, _said(leg, printed), state.minutes, status=status)


def _builds_own_part(command: Sequence[str]) -> bool:
    """Whether an orchestrator command compiles a Python's own part: its build stage
    without --shared-only (failfast.SHARED_TARGETS)."""
    words = list(command)
    return "build" in words and "--shared-only" not in words


def _flag_values(command: Sequence[str], flag: str) -> list[str]:
    words = list(command)
    return [words[i + 1] for i, word in enumerate(words[:-1]) if word == flag]


def _python_own_fails(sim: Simulator, python: str) -> bool:
    return sim.faults.python_own_fails.get(python, 0) >= sim.attempts


def _python_fails(sim: Simulator, python: str) -> bool:
    """Whether Python's wheel fails in this attempt: its verify stage, or its own part."""
    return sim.faults.python_fails.get(python, 0) >= sim.attempts or _python_own_fails(sim, python)


def _wheel_name(project: str, version: str, tag: str, platform: str) -> str:
    return f"{project}-{version}-{tag}-{platform}.whl"


def _cmd_build(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
               files: dict[str, Any]) -> StepOutcome:
    """make build in a wheel or torchvision job."""
    line = sim.line()
    catalog = sim.catalog
    platform = leg.matrix.get("platform_tag", "macosx_x86_64")
    sim.world.builds += 1
    digest = f"{sim.world.builds:064x}"
    vision_only = "--companion torchvision" in script
    python = re.search(r'PYTHON="?([0-9.]+)', script)
    python_text = python.group(1) if python else env.get("PYTHON", "")
    cp = "cp" + python_text.replace(".", "")
    record = f"build/{line.version}/dist/{cp}/verified.json"
    if vision_only:
        if record not in files:  # the companion builds against the verify stage's record
            return StepOutcome(False, error=f"{leg.name}: No verified wheel for {cp} in "
                               f"{record}: run the verify stage first")
        if sim.faults.vision_fails >= sim.attempts:
            return StepOutcome(False, error=f"{leg.name}: torchvision's build failed",
                               minutes=budget.job_minutes("vision"))
        sim.world.built.add(digest + "v")
        return StepOutcome(True, minutes=budget.job_minutes("vision"),
                           outputs=_add_vision(files, catalog, line, cp, platform, digest,
                                               sim.faults.vision_tag))
    warm = _progress(files) >= sim.faults.compile_boxes
    minutes = budget.job_minutes("wheel", line) if warm else (
        budget.bulk_compile_minutes(line) * budget.figure("peer_overrun"))
    if not warm:
        return StepOutcome(False, error=f"{leg.name}: the compiler cache is cold; the build "
                           "ran out of time", minutes=minutes)
    if _python_own_fails(sim, python_text):
        return StepOutcome(False, error=f"{leg.name}: Python {python_text}'s own part of "
                           "the build (its _C bindings) failed to compile", minutes=minutes)
    if _python_fails(sim, python_text):
        return StepOutcome(False, error=f"{leg.name}: Python {python_text}'s wheel failed "
                           "its verify stage", minutes=minutes)
    torch = _wheel_name('torch', catalog.wheel_version(line), f'{cp}-{cp}', platform)
    files[f"wheels/{torch}"] = digest
    sim.world.built.add(digest)
    files[record] = {"wheel": torch}
    files[f"build/{line.version}/dist/{cp}/repaired/{torch}"] = digest
    if "TORCH_ONLY=1" not in script and "--torch-only" not in script and line.companion:
        if sim.faults.vision_fails >= sim.attempts:
            return StepOutcome(False, error=f"{leg.name}: torchvision's build failed",
                               minutes=minutes)
        sim.world.built.add(digest + "vv")
        _add_vision(files, catalog, line, cp, platform, digest + "v", sim.faults.vision_tag)
    return StepOutcome(True, minutes=minutes)


def _add_vision(files: dict[str, Any], catalog: Catalog, line: catalog_module.ReleaseLine,
                cp: str, platform: str, digest: str, tag: str | None = None) -> dict[str, Any]:
    """torchvision's wheel, tagged as the official wheels of its release are (catalog), or
    as a fault says its build tags it."""
    companion = line.companion
    assert companion is not None
    tag = tag or (f"{cp}-{cp}" if companion.per_python else "py3-none")
    name = _wheel_name(companion.name, catalog.wheel_version(companion), tag, platform)
    files[f"wheels/{name}"] = digest + "v"
    return {}


def _cmd_pick(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
              files: dict[str, Any]) -> StepOutcome:
    with tempfile.TemporaryDirectory() as folder:
        for key in files:
            if key.startswith("wheels/"):
                (Path(folder) / key.split("/", 1)[1]).write_text("")
        try:
            python = warmup.pick(Path(folder), env.get("CANDIDATES", "").split())
        except BuildError as exc:
            return StepOutcome(False, error=f"{leg.name}: {exc}")
    return StepOutcome(True, {"python": python})


def _cmd_test(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
              files: dict[str, Any]) -> StepOutcome:
    """ci/test_wheel.py: this Python's torch wheel and a torchvision it can install."""
    python = str(leg.matrix.get("python", ""))
    cp = "cp" + python.replace(".", "")
    names = [key.split("/", 1)[1] for key in files if key.startswith("dist/")]
    torch = [n for n in names if n.startswith("torch-") and f"-{cp}-{cp}-" in n]
    vision = [n for n in names if n.startswith("torchvision-")
              and (f"-{cp}-{cp}-" in n or "-py3-none-" in n)]
    if not torch or (sim.line().companion and not vision):
        return StepOutcome(False, error=f"{leg.name}: no {'torch' if not torch else 'torchvision'} "
                           f"wheel for {cp} in dist/")
    for key in list(files):  # only what this Python installs is handed on
        if key.startswith("dist/") and key.split("/", 1)[1] not in torch + vision:
            del files[key]
        elif key.startswith("dist/") and sim.faults.test_swaps:
            files[key] = f"{files[key]}-swapped"
    return StepOutcome(True, minutes=budget.figure("test_wheel"))


def _cmd_verdict(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
                 files: dict[str, Any]) -> StepOutcome:
    """ci/tested.py record: the sha256 of each wheel the test passed."""
    out = re.search(r'--out "?([^"\s]+)', script)
    assert out is not None, script
    path = out.group(1).replace("${TESTED}", env.get("TESTED", ""))
    files[path] = _local_wheels(files)
    return StepOutcome(True)


def _cmd_select(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
                files: dict[str, Any]) -> StepOutcome:
    """ci/tested.py select: keep the built wheels a verdict passed (its own function)."""
    pairs = [pair for key, verdict in files.items() if key.startswith("verdicts/")
             for pair in verdict.items()]
    chosen = tested.select(_local_wheels(files), pairs)
    if chosen.changed:
        return StepOutcome(False, error=f"{leg.name}: {tested.changed_message(chosen.changed)}")
    for name in chosen.untested:
        del files[f"dist/{name}"]
    return StepOutcome(True)


def _cmd_sums(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
              files: dict[str, Any]) -> StepOutcome:
    wheels = {k.split("/", 1)[1]: v for k, v in files.items() if k.endswith(".whl")}
    if not wheels and "exit 1" in script and "Nothing to publish" in script:
        return StepOutcome(False, error=f"{leg.name}: Nothing to publish: no wheel passed its test")
    files["dist/SHA256SUMS"] = dict(wheels)
    return StepOutcome(True, {"count": str(len(wheels))})


def _release(sim: Simulator, run: Run) -> Release | None:
    return sim.world.releases.get(run.tag or "")


def _seen_release(sim: Simulator, run: Run, env: Mapping[str, str]) -> Release | None:
    """The tag's release as the step's job sees it: GitHub lists a draft only to a token
    with push access (REST API, 'List releases'), so a job without ``contents: write`` sees
    none."""
    release = _release(sim, run)
    permissions = sim.jobs[env["GITHUB_JOB"]].get("permissions") or {}
    if release is not None and release.draft and permissions.get("contents") != "write":
        return None
    return release


def _refusal(sim: Simulator, run: Run) -> str | None:
    """ci/draft.py's refusal of a published release that can take nothing (its own function)."""
    release = _release(sim, run)
    if release is None or release.draft:
        return None
    return draft.refusal(sim.catalog, run.tag or "",
                         draft.Release("published", dict(release.assets)))


def _cmd_publish_check(sim: Simulator, run: Run, leg: Leg, script: str,
                       env: Mapping[str, str], files: dict[str, Any]) -> StepOutcome:
    problem = _refusal(sim, run)
    return StepOutcome(problem is None, error=f"{leg.name}: {problem}" if problem else "")


def _cmd_draft_assets(sim: Simulator, run: Run, leg: Leg, script: str,
                      env: Mapping[str, str], files: dict[str, Any]) -> StepOutcome:
    problem = _refusal(sim, run)
    if problem:
        return StepOutcome(False, error=f"{leg.name}: {problem}")
    release = _seen_release(sim, run, env)
    files["draft.json"] = sorted(release.assets) if release else []
    return StepOutcome(True)


def _cmd_matrix(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
                files: dict[str, Any]) -> StepOutcome:
    try:
        outputs = sim.code.matrix_step(script, sim.catalog, files.get("draft.json", []))
    except (BuildError, sim.code.error) as exc:
        return StepOutcome(False, error=f"{leg.name}: {exc}")
    assert outputs is not None
    return StepOutcome(True, outputs)


def _local_wheels(files: Mapping[str, Any]) -> dict[str, str]:
    return {k.split("/", 1)[1]: v for k, v in files.items()
            if k.startswith("dist/") and k.endswith(".whl")}


def _cmd_draft_add(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
                   files: dict[str, Any]) -> StepOutcome:
    """ci/draft.py add, for real, with the step's arguments: its gh calls (list the
    releases, create the draft, upload, upload SHA256SUMS with --clobber, read assets back)
    answered by the world (``_Gh``). A wheel's bytes are its world digest."""
    code, printed, outputs = _entry_point(draft.main, _argv_after(script, "ci.draft"), env,
                                          files, _Gh(sim, run, env["GITHUB_JOB"]), sim.catalog)
    return StepOutcome(code == 0, outputs, _said(leg, printed), status=code)


def _cmd_pip(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
             files: dict[str, Any]) -> StepOutcome:
    """pip install in a job that builds, signs or publishes: every package pinned by hash
    (`--require-hashes` on a requirements file), or the project alone (ci/pins.py);
    anything else could fetch a package no one pinned (docs/releasing.md, 'Pinned with
    hashes'). What pip then installs is not modelled."""
    if not pins.unpinned(script) or not sim.code.hash_pins:
        return _cmd_noop(sim, run, leg, script, env, files)
    return StepOutcome(False, error=f"{leg.name}: '{script}' may install packages not pinned by "
                       "hash in a job that builds, signs or publishes (docs/releasing.md, "
                       "'Pinned with hashes')")


def _cmd_companion_tags(sim: Simulator, run: Run, leg: Leg, script: str,
                        env: Mapping[str, str], files: dict[str, Any]) -> StepOutcome:
    """ci/companion_tags.py built: the built wheels' tags against the catalog (for real)."""
    code, printed, outputs = _entry_point(companion_tags.main,
                                          _argv_after(script, "ci.companion_tags"), env, files,
                                          catalog=sim.catalog)
    return StepOutcome(code == 0, outputs, _said(leg, printed), status=code)


def _cmd_release_status(sim: Simulator, run: Run, leg: Leg, script: str,
                        env: Mapping[str, str], files: dict[str, Any]) -> StepOutcome:
    """ci/release_status.py with the step's own arguments (``--publish``, and
    ``--publish-subset`` if a workflow gives it), against the world's release."""
    argv = _argv_after(script, "ci.release_status")
    code, printed, outputs = _entry_point(release_status.main, argv, env, files,
                                          _Gh(sim, run, env["GITHUB_JOB"]), sim.catalog)
    return StepOutcome(code == 0, outputs, _said(leg, printed), status=code)


def _cmd_wheel_names(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
                     files: dict[str, Any]) -> StepOutcome:
    """ci/wheel_names.py: the tag's build number in the wheels' names (its own function)."""
    build = wheel_names.build_tag(run.tag or "")
    for key in [k for k in files if k.startswith("dist/") and k.endswith(".whl")]:
        renamed = "dist/" + wheel_names.with_build_tag(key.split("/", 1)[1], build)
        files[renamed] = files.pop(key)
    return StepOutcome(True)


def _cmd_old_release(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
                     files: dict[str, Any]) -> StepOutcome:
    """The older release step: create a draft, upload with --clobber."""
    tag = run.tag or ""
    release = sim.world.releases.get(tag)
    if release is not None and not release.draft:
        return StepOutcome(False, error=f"{leg.name}: Already published: Release {tag} is "
                           "already published; push the next build number")
    # `gh release create` makes a draft only when told (--draft); else it publishes at once.
    release = sim.world.releases.setdefault(tag, Release("--draft" in script, {}))
    release.assets.update(_local_wheels(files))
    return StepOutcome(True)


def _cmd_old_publish(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
                     files: dict[str, Any]) -> StepOutcome:
    sim.world.releases[run.tag or ""].draft = False
    return StepOutcome(True)


def _cmd_index_collect(sim: Simulator, run: Run, leg: Leg, script: str,
                       env: Mapping[str, str], files: dict[str, Any]) -> StepOutcome:
    if sim.faults.index_errors >= sim.attempts:
        return StepOutcome(False, error=f"{leg.name}: downloading one release's SHA256SUMS "
                           "failed after its retries; the index was not deployed.")
    published = {tag: release for tag, release in sim.world.releases.items() if not release.draft}
    files["releases/all"] = {tag: {name: digest for name, digest in release.assets.items()
                                   if name.endswith(".whl")}
                             for tag, release in published.items()}
    return StepOutcome(True)


def _cmd_index_build(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
                     files: dict[str, Any]) -> StepOutcome:
    index: dict[str, str] = {}
    for assets in (files.get("releases/all") or {}).values():
        for name, digest in assets.items():
            if name in index and index[name] != digest:
                return StepOutcome(False, error=f"{leg.name}: {name} is published with other "
                                   "bytes already; the index refuses to swap it")
            index[name] = digest
    for name, digest in index.items():
        if name in sim.world.index and sim.world.index[name] != digest:
            sim.world.swapped.append(name)
    files["site/index"] = index
    return StepOutcome(True)


def _cmd_prune(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
               files: dict[str, Any]) -> StepOutcome:
    prefix, ref = env.get("PREFIX", ""), env.get("REF", "")
    entries = sorted((e for e in sim.world.caches if e.ref == ref and e.key.startswith(prefix)),
                     key=lambda e: e.hour, reverse=True)
    for entry in entries[1:]:
        sim.world.caches.remove(entry)
    return StepOutcome(True)


def _cmd_say(sim: Simulator, run: Run, leg: Leg, script: str, env: Mapping[str, str],
             files: dict[str, Any]) -> StepOutcome:
    """An echo of an ::error:: or ::notice:: annotation: its text is what the maintainer reads."""
    match = re.search(r"::error[^:]*::(.*?)\"?$", script.strip(), re.DOTALL)
    if match:
        return StepOutcome(True, error=f"{leg.name}: {match.group(1)}")
    return StepOutcome(True)


#: The workflow's commands, by a marker in their script (first match wins).
COMMANDS: tuple[tuple[str, CommandModel], ...] = (
    ("ci.warmup run", _cmd_compile),
    ("ci.warmup pick", _cmd_pick),
    ("ci.warmup", _cmd_state),
    ("intelmac_torch_builder matrix", _cmd_matrix),
    ("ci.publish_check --cold", _cmd_noop),  # it only warns
    ("ci.companion_tags built", _cmd_companion_tags),
    ("ci.publish_check", _cmd_publish_check),
    ("ci.draft assets", _cmd_draft_assets),
    ("ci.draft add", _cmd_draft_add),
    ("ci.release_status", _cmd_release_status),
    ("ci/wheel_names.py", _cmd_wheel_names),
    ("gh release create", _cmd_old_release),
    ("gh release edit", _cmd_old_publish),
    ("gh release view", _cmd_noop),  # the older draft check
    ("publish_index collect", _cmd_index_collect),
    ("publish_index build", _cmd_index_build),
    ("gh cache list", _cmd_prune),
    ("make build", _cmd_build),
    ("ci/test_wheel.py", _cmd_test),
    ("cp vision/torchvision-", _cmd_copy_vision),
    ("ci/tested.py record", _cmd_verdict),
    ("ci/tested.py select", _cmd_select),
    ("sha256sum", _cmd_sums),
    ("::error title=Unfinished::", _cmd_say),
    ("::warning title=Unpinned", _cmd_noop),
    ("::notice title=regress-gpu", _cmd_noop),
    ("pip install", _cmd_pip),
    ("xcode-select", _cmd_noop),
    ("simctl", _cmd_noop),
    ("native fetch", _cmd_noop),
    ("ccache -s", _cmd_noop),
    ("ccache -z", _cmd_noop),
    ("GITHUB_JOB#warmup-", _cmd_state),
)


# --- our entry points, run for real against the world ----------------------------------------


class _Gh:
    """``gh`` as the world answers it, for this job's token: a draft is seen, created,
    published or uploaded to only with ``contents: write`` (REST API, 'List releases',
    'Update a release'); ``release create`` makes a draft only when given ``--draft``, and
    ``release upload`` replaces an asset only with ``--clobber`` (gh manual)."""

    def __init__(self, sim: Simulator, run: Run, job_id: str | None) -> None:
        self.sim, self.run = sim, run
        # None: a maintainer's own gh, signed in with push access
        self.write = job_id is None or _permission(sim.jobs[job_id], "contents",
                                                   sim.workflow) == "write"

    def __call__(self, args: Sequence[str]) -> tuple[int, str, str]:
        releases = self.sim.world.releases
        if args[:1] == ["api"]:
            return self._api(args[1:])
        verb = " ".join(args[:2])
        tag = args[2] if len(args) > 2 else ""
        release = releases.get(tag)
        if verb == "release view":
            if release is None or (release.draft and not self.write):
                return 1, "", "release not found"
            return 0, json.dumps({"isDraft": release.draft, "assets": _assets(release)}), ""
        if not self.write:
            return 1, "", "HTTP 403: Resource not accessible by integration"
        if verb == "release upload":
            return self._upload(release, tag, args[3:])
        if verb == "release edit" and release is not None:
            for flag in args[3:]:
                if flag.startswith("--draft"):
                    release.draft = flag in ("--draft", "--draft=true")
            return 0, "", ""
        if verb == "release create":
            if release is not None:
                return 1, "", f"a release with the same tag name already exists: {tag}"
            releases[tag] = Release("--draft" in args or "--draft=true" in args, {})
            return 0, "", ""
        return 1, "", f"the simulated gh has no model of: gh {' '.join(args)}"

    def _api(self, args: Sequence[str]) -> tuple[int, str, str]:
        """``gh api``: the list of releases (a draft only for push access), and an asset's
        bytes by id."""
        path = next((arg for arg in args if arg.startswith("repos/")), "")
        if path.endswith("/releases"):
            listed = [{"tag_name": tag, "draft": release.draft, "immutable": False,
                       "assets": _assets(release)}
                      for tag, release in self.sim.world.releases.items()
                      if self.write or not release.draft]
            return 0, json.dumps([listed] if "--slurp" in args else listed), ""
        if "/releases/assets/" in path:
            wanted = int(path.rsplit("/", 1)[1])
            for release in self.sim.world.releases.values():
                if release.draft and not self.write:
                    continue
                for asset in _assets(release):
                    if asset["id"] == wanted:
                        return 0, release.assets[asset["name"]], ""
            return 1, "", "HTTP 404: Not Found"
        return 1, "", f"the simulated gh has no model of: gh api {' '.join(args)}"

    def _upload(self, release: Release | None, tag: str,
                args: Sequence[str]) -> tuple[int, str, str]:
        """``gh release upload TAG FILE... [--clobber]``: an asset of the same name is
        replaced only with --clobber (gh manual); else nothing is uploaded."""
        if release is None:
            return 1, "", f"release not found: {tag}"
        paths = [Path(arg) for arg in args if not arg.startswith("-")]
        clash = [path.name for path in paths if path.name in release.assets]
        if clash and "--clobber" not in args:
            return 1, "", f"asset under the same name already exists: {clash}"
        for path in paths:
            release.assets[path.name] = path.read_text()
        return 0, "", ""


def _assets(release: Release) -> list[dict[str, Any]]:
    """A release's assets as GitHub's API lists them: the sha256 of each one's bytes (a
    wheel's bytes are its world digest) and an id (its place in the release)."""
    return [{"name": name, "id": number, "digest":
             "sha256:" + hashlib.sha256(content.encode()).hexdigest()}
            for number, (name, content) in enumerate(release.assets.items(), start=1)]


#: What a step needs of its job's GITHUB_TOKEN (each action's README; the REST API's
#: permissions for the endpoints gh calls): (marker of the action or command, scopes).
NEEDS: tuple[tuple[str, dict[str, str]], ...] = (
    ("actions/checkout", {"contents": "read"}),
    ("actions/attest-build-provenance", {"id-token": "write", "attestations": "write"}),
    ("actions/deploy-pages", {"pages": "write", "id-token": "write"}),
    ("ci.publish_check", {"pages": "read", "actions": "read"}),
    ("ci.draft assets", {"contents": "read"}),  # a draft is listed only to write (above)
    ("ci.draft add", {"contents": "write"}),
    ("publish_index collect", {"contents": "read"}),
    ("gh cache", {"actions": "write"}),
)
_LEVELS = {"none": 0, "read": 1, "write": 2}


def _permission(job: Mapping[str, Any], scope: str,
                workflow: Mapping[str, Any] | None = None) -> str:
    """The job's GITHUB_TOKEN permission for ``scope``: a ``permissions:`` sets every scope
    it does not name to none, and a job without one takes the workflow's (docs,
    'Controlling permissions for GITHUB_TOKEN'); ``write`` includes ``read``."""
    permissions = job.get("permissions", (workflow or {}).get("permissions"))
    if isinstance(permissions, str):  # read-all, write-all
        return permissions.split("-")[0]
    return str((permissions or {}).get(scope, "none"))


def _lacks(sim: Simulator, job_id: str, text: str) -> str:
    """The permissions the step ``text`` (an action's name or a command) needs and its job
    lacks, as GitHub's refusal would name them; empty when it has them."""
    job = sim.jobs[job_id]
    missing = [f"{scope}: {level}" for marker, scopes in NEEDS if marker in text
               for scope, level in scopes.items()
               if _LEVELS.get(_permission(job, scope, sim.workflow), 0) < _LEVELS[level]]
    return ", ".join(dict.fromkeys(missing))


def _entry_point(main: Callable[[Sequence[str]], int], argv: Sequence[str],
                 env: Mapping[str, str], files: dict[str, Any],
                 gh: Callable[[Sequence[str]], tuple[int, str, str]] | None = None,
                 catalog: Catalog | None = None) -> tuple[int, str, dict[str, str]]:
    """Run one of our entry points with its real arguments, in a folder holding the job's
    files, its env, and ``gh`` answered by the world: (exit status, what it printed, the
    outputs it wrote to $GITHUB_OUTPUT). Changed JSON files are read back. The repository's
    catalog, which the entry points load, is the simulation's (``catalog``)."""
    real_run = subprocess.run
    real_load = catalog_module.load

    def load(path: Path | None = None) -> Catalog:
        return catalog if catalog is not None and path is None else real_load(path)

    def fake_run(command: Any, *args: Any, **kwargs: Any) -> Any:
        if gh is None or not isinstance(command, list) or command[:1] != ["gh"]:
            return real_run(command, *args, **kwargs)
        code, out, err = gh(command[1:])
        return subprocess.CompletedProcess(command, code, out, err)

    printed = io.StringIO()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for key, value in files.items():
            if key.startswith("/") or not isinstance(value, (dict, list, str)):
                continue
            (root / key).parent.mkdir(parents=True, exist_ok=True)
            (root / key).write_text(value if isinstance(value, str) else json.dumps(value))
        output = root / "github_output"
        output.touch()
        variables = {**env, "GITHUB_OUTPUT": str(output)}
        cwd = os.getcwd()
        try:
            os.chdir(root)
            with mock.patch.dict(os.environ, variables), \
                    mock.patch.object(subprocess, "run", fake_run), \
                    mock.patch.object(catalog_module, "load", load), \
                    contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                try:
                    code = int(main(list(argv)) or 0)
                except SystemExit as exc:  # argparse: bad arguments
                    code = exc.code if isinstance(exc.code, int) else 2
        finally:
            os.chdir(cwd)
        for path in root.rglob("*.json"):
            files[str(path.relative_to(root))] = json.loads(path.read_text())
        outputs = dict(line.split("=", 1) for line in output.read_text().splitlines()
                       if "=" in line)
    return code, printed.getvalue(), outputs


def _said(leg: Leg, printed: str) -> str:
    """What an entry point's output tells the maintainer: its ::error:: annotations and
    error lines, named by the job."""
    said = [match[1] for match in re.finditer(r"::error[^:]*::(.*)", printed)]
    said += [line for line in printed.splitlines() if line.startswith("error:")]
    if not said and "stays a draft" in printed:
        said = [printed.strip()]
    return "\n".join(f"{leg.name}: {text}" for text in said)


def _argv_after(script: str, marker: str) -> list[str]:
    """The arguments after ``python -m <module>`` (or ``python <file>``) in a command."""
    words = shlex.split(script)
    index = next(i for i, word in enumerate(words) if word.endswith(marker))
    return words[index + 1:]


# --- end states -----------------------------------------------------------------------------


def end_state(sim: Simulator) -> str:
    """What the maintainer finds after the scenario's last action."""
    last = sim.runs[-1]
    text = " ".join(last.errors())
    says = bool(text.strip())
    button = bool(RERUN_NAMED.search(text)) or DISPATCH_ON_TAG in text
    if last.event == "schedule":
        kept = [e for e in sim.world.caches if e.ref == DEFAULT_REF]
        lines = {e.key.split("-")[1] for e in kept}
        # Refreshed: each line's one entry is the one this run saved (a save under a key
        # that exists already is dropped: GitHub keeps the first entry of a key).
        fresh = all(e.hour >= last.started for e in kept)
        one_each = len(kept) == len(lines) and len(lines) > 0 and fresh
        if one_each and not says:
            return "published"
        return "failed, says why" if says else "failed, silently"
    release = _release(sim, last)
    if release is not None and not release.draft:
        gaps = release_status.missing(release_status.wanted(sim.catalog, last.tag or ""),
                                      sorted(release.assets))
        if gaps:
            return "published, incomplete (missing " + "; ".join(map(str, gaps)) + ")"
        if sim.world.swapped:
            return "published, replacing published files (" + ", ".join(sim.world.swapped) + ")"
        unbuilt = sorted(name for name, digest in release.assets.items()
                         if name.endswith(".whl") and digest not in sim.world.built)
        if unbuilt:
            return "published, with bytes no build job made (" + ", ".join(unbuilt) + ")"
        if any(sim.world.index.get(name) != digest for name, digest in release.assets.items()
               if name.endswith(".whl")):
            return "published, not in the index"
        return "published"
    if release is not None and any(name.endswith(".whl") for name in release.assets) and button:
        return "draft, resumable"
    return "failed, says why" if says else "failed, silently"


# --- the docs' table ------------------------------------------------------------------------

_ROW = re.compile(r"^\|\s*`(?P<name>[a-z0-9-]+)`\s*\|")


@dataclass(frozen=True)
class Expected:
    """A row of docs/releasing.md's table: the end state, and whether the button is pressed."""

    state: str
    rerun: bool  # its button column names *Re-run failed jobs*
    presses: int | None = None  # how many times a button is pressed
    hours: float | None = None  # the runner hours, at most (the time model's minutes)


def expected_rows(doc: Path = RELEASES_DOC) -> dict[str, Expected]:
    """The rows docs/releasing.md gives the scenarios (its 'When a release fails' table:
    scenario | what happens | what the maintainer sees | button | end state)."""
    text = doc.read_text()
    start = text.find("### When a release fails")
    if start < 0:
        raise BuildError(f"{doc} has no 'When a release fails' section with the scenario table.")
    found: dict[str, Expected] = {}
    for line in text[start:].splitlines()[1:]:
        if line.startswith("#"):
            break
        match = _ROW.match(line)
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if match and len(cells) in (5, 7) and cells[4] in STATES:
            counts = (int(cells[5]), float(cells[6])) if len(cells) == 7 else (None, None)
            found[match["name"]] = Expected(cells[4], RERUN_NAMED.search(cells[3]) is not None,
                                            *counts)
    return found


def expected_states(doc: Path = RELEASES_DOC) -> dict[str, str]:
    return {name: row.state for name, row in expected_rows(doc).items()}


@dataclass(frozen=True)
class Outcome:
    scenario: str
    state: str
    expected: Expected | None
    trace: tuple[str, ...]
    hours: float = 0.0  # runner hours over every run and attempt

    @property
    def presses(self) -> int:
        return sum(1 for line in self.trace if line.startswith("press: ") and
                   line != "press: no button named")

    @property
    def pressed_rerun(self) -> bool:
        return f"press: {RERUN}" in self.trace

    @property
    def ok(self) -> bool:
        row = self.expected
        return (row is not None and self.state == row.state
                and self.pressed_rerun == row.rerun
                and row.presses in (None, self.presses)
                and (row.hours is None or self.hours <= row.hours))


def simulate(scenario: Scenario, workflow: Path, catalog: Catalog, version: str,
             code: Code = Code(), schedule: str = SCHEDULES[0]) -> Outcome:
    trace: list[str] = [f"jobs in the {schedule} order"]
    sim = Simulator(workflow, catalog, version, scenario.faults(catalog, version), trace.append,
                    code, schedule)
    for action in scenario.actions:
        if action.kind == "push":
            trace.append(f"push v{version}-{action.value}")
            sim.push(action.value)
        elif action.kind == "schedule":
            trace.append("schedule")
            sim.schedule()
        elif action.kind == "wait":
            trace.append(f"wait {action.value} h")
            sim.world.advance(action.value)
        elif action.kind == "press":
            trace.append(f"press: {sim.press()}")
        elif action.kind == "publish-subset":
            trace.append(f"publish-subset: {sim.publish_subset()}")
    return Outcome(scenario.name, end_state(sim), None, tuple(trace),
                   sum(run.minutes for run in sim.runs) / 60)


def run_all(workflow: Path, catalog: Catalog, version: str | None = None,
            doc: Path = RELEASES_DOC, code: Code = Code(),
            only: Sequence[str] = ()) -> list[Outcome]:
    expected = expected_rows(doc)
    chosen = version or catalog.default_version
    unknown = sorted(set(only) - {scenario.name for scenario in SCENARIOS})
    if unknown:
        raise BuildError(f"no scenario {', '.join(unknown)}: the scenarios are "
                         + ", ".join(scenario.name for scenario in SCENARIOS))
    outcomes = []
    for scenario in SCENARIOS:
        if only and scenario.name not in only:
            continue
        row = expected.get(scenario.name)
        for schedule in SCHEDULES:  # every order must end as the table says
            try:
                outcome = simulate(scenario, workflow, catalog, chosen, code, schedule)
            except SimulationError as exc:
                outcome = Outcome(scenario.name, f"cannot simulate: {exc}", None, ())
            outcome = Outcome(scenario.name, outcome.state, row, outcome.trace, outcome.hours)
            if not outcome.ok:
                break
        outcomes.append(outcome)
    return outcomes


def ci_workflow_problems(path: Path = pins.CI_WORKFLOW,
                         makefile: Path = pins.MAKEFILE) -> list[str]:
    """ci.yml's installs that may fetch a package no hash pins, in any job: a job on the
    default branch can write the cache entries of the repository (docs/releasing.md,
    "Pinned with hashes"). A step's `make TARGET` counts with the Makefile's recipes."""
    found = pins.workflow_unpinned(_load_workflow(str(path), path.stat().st_mtime_ns), makefile)
    return [f"{path.name}: {where}: '{command}' may install packages not pinned by hash"
            for where, commands in found.items() for command in commands]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m intelmac_torch_builder.ci.simulate",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflow", type=Path, default=plan.RELEASE_WORKFLOW)
    parser.add_argument("--catalog", type=Path, default=None)
    parser.add_argument("--line", default=None, help="the line the tags release (default: "
                        "the catalog's default line)")
    parser.add_argument("--ci-workflow", type=Path, default=pins.CI_WORKFLOW,
                        help="the push and pull-request workflow, whose installs must be "
                        "pinned by hash (default: .github/workflows/ci.yml)")
    parser.add_argument("--doc", type=Path, default=RELEASES_DOC)
    parser.add_argument("-v", "--verbose", action="store_true", help="print each run's jobs")
    parser.add_argument("--scenario", action="append", default=[],
                        help="play only this scenario (repeatable; default: every one)")
    args = parser.parse_args(argv)
    try:
        outcomes = run_all(args.workflow, catalog_module.load(args.catalog), args.line, args.doc,
                           only=args.scenario)
        unpinned = ci_workflow_problems(args.ci_workflow)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for problem in unpinned:
        print(f"FAIL {problem}")
    width = max(len(outcome.scenario) for outcome in outcomes)
    for outcome in outcomes:
        mark = "ok  " if outcome.ok else "FAIL"
        row = outcome.expected
        wanted = "" if outcome.ok else (
            "   (docs/releasing.md: " + (f"{row.state}, button: "
                                          f"{RERUN if row.rerun else 'none pressed'}, "
                                          f"{row.presses} presses, at most {row.hours:g} runner "
                                          "hours" if row else "no row")
            + f"; pressed: {RERUN if outcome.pressed_rerun else 'none'})")
        print(f"{mark} {outcome.scenario:<{width}}  {outcome.state}, {outcome.presses} presses, "
              f"{outcome.hours:.1f} runner hours{wanted}")
        if args.verbose or not outcome.ok:
            for line in outcome.trace:
                print(f"       {line}")
    return 0 if all(outcome.ok for outcome in outcomes) and not unpinned else 1


if __name__ == "__main__":
    sys.exit(main())
