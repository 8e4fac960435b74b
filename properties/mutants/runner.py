"""Apply a mutant to a throwaway copy of the repository, run its suite there, and build the kill matrix.

The copy is the whole working tree minus version control, virtualenvs, reports and caches
(`copy_tree`); the mutant's edits are applied to the copy only (`apply_edits`), each `old` text
required to occur exactly once. The suite runs as `python -m pytest <files> -x` in the copy, with the
copy first on PYTHONPATH (so `impl`, `model` and `properties` import from it, not from the checkout the
virtualenv's editable install points at), CI=true and the derandomized Hypothesis profile, under a
per-mutant timeout. A small plugin (properties/mutants/pytest_plugin.py) reports the first failing test
and when it failed; that test is the killer and that instant, from the subprocess start, is the time to
kill.

Verdicts: `killed` (a test failed), `survived` (the suite passed), `timeout` (no test failed before the
timeout), `broken` (the patch does not apply, or the mutated code does not even import — a broken
patch proves nothing about the tests), `unjudged` (the same suite failed on the UNMUTATED tree under the
same profile: a failure in the mutated copy proves nothing, issue 51 item 5).

A kill counts only after the same selection of tests passed unmutated under the same environment and
Hypothesis profile: `run_catalogue` runs each distinct suite once on an unmutated copy first (the
baseline), and a mutant whose suite's baseline failed is `unjudged`, never `killed`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from properties.mutants.catalogue import Edit, Mutant

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TIMEOUT = 120.0
# soak/: the certifier tier (its judges are code under test, issue 32); properties/sdk/: the SDK adapter's judge
# (issue 54's hunt: it judges SDKs in other languages op by op, so it is code under test too)
PATCHABLE = ("impl/", "soak/", "properties/sdk/")
IGNORED = (
    ".git",
    ".venv",
    "venv",
    "reports",
    ".hypothesis",
    ".pytest_cache",
    ".ruff_cache",
    "__pycache__",
    "*.egg-info",
    ".mypy_cache",
)


class PatchError(Exception):
    """A mutant's edit does not apply to the current tree (its `old` text is missing or ambiguous)."""


@dataclass(frozen=True)
class Verdict:
    """One row of the kill matrix."""

    mutant: str
    section: str
    status: str  # killed | survived | timeout | broken
    killer: str  # the first failing test's node id ('' unless killed or broken)
    message: str  # its first failure line, or why the run is broken
    seconds: float  # killed: subprocess start → first failure; otherwise the whole run
    wall: float = 0.0  # the whole verdict: copy, patch, import check, run, teardown

    @property
    def killed(self) -> bool:
        return self.status == "killed"


# --- the mutated copy ---------------------------------------------------------------------------------


def copy_tree(source: Path, dest: Path) -> Path:
    """Copy the repository at `source` to `dest` (which must not exist), without VCS, venvs and caches."""
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns(*IGNORED), symlinks=True)
    return dest


def check_edits(root: Path, edits: Sequence[Edit]) -> list[str]:
    """Problems applying `edits` to the tree at root (empty when every `old` occurs exactly once)."""
    problems = []
    texts: dict[str, str] = {}
    for i, edit in enumerate(edits):
        if not edit.path.startswith(PATCHABLE):
            problems.append(
                f"edit {i} patches {edit.path}: mutants patch impl/ (and the certifier's soak/ and properties/sdk/) only "
                "(model/ is the oracle)"
            )
            continue
        path = root / edit.path
        if edit.path not in texts:
            if not path.is_file():
                problems.append(f"edit {i}: {edit.path} does not exist")
                continue
            texts[edit.path] = path.read_text(encoding="utf-8")
        count = texts[edit.path].count(edit.old)
        if count != 1:
            first = edit.old.strip().splitlines()[0] if edit.old.strip() else repr(edit.old)
            problems.append(f"edit {i}: the old text occurs {count} times in {edit.path} (expected once): {first!r}")
        elif edit.old == edit.new:
            problems.append(f"edit {i} in {edit.path} changes nothing")
        else:
            texts[edit.path] = texts[edit.path].replace(edit.old, edit.new)
    return problems


def apply_edits(root: Path, edits: Sequence[Edit]) -> None:
    """Apply edits in order to the tree at root; PatchError (and nothing written) if any does not apply."""
    problems = check_edits(root, edits)
    if problems:
        raise PatchError("; ".join(problems))
    for edit in edits:
        path = root / edit.path
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace(edit.old, edit.new), encoding="utf-8")


@contextmanager
def mutated_copy(mutant: Mutant | None, source: Path = ROOT) -> Iterator[Path]:
    """A temporary copy of `source` with the mutant applied (None: unmutated, for a baseline run)."""
    with tempfile.TemporaryDirectory(prefix=f"belay-mutant-{mutant.name if mutant else 'baseline'}-") as tmp:
        root = copy_tree(source, Path(tmp) / "repo")
        if mutant is not None:
            apply_edits(root, mutant.edits)
        yield root


def subprocess_env(root: Path) -> dict[str, str]:
    """The environment of a run in the copy: the copy first on PYTHONPATH, CI mode, derandomized profile."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    env["CI"] = "true"
    env["BELAY_HYPOTHESIS_PROFILE"] = "mutants"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def import_check(root: Path, python: str = sys.executable) -> str:
    """'' when the copy's impl modules compile and import from the copy; otherwise what went wrong."""
    code = (
        "import compileall, sys, pathlib\n"
        "ok = compileall.compile_dir('impl', quiet=1, legacy=True, force=True)\n"
        "ok = compileall.compile_dir('soak', quiet=1, legacy=True, force=True) and ok\n"
        "import impl.store, impl.runtime, impl.worker, impl.store.queries\n"
        "import soak.judges.checker, soak.judges.duties, soak.judges.coverage, soak.judges.verdicts, soak.judges.refine, soak.judges.replay\n"
        "from impl.store.queries import raw_queries\n"
        "raw_queries()\n"
        "root = pathlib.Path.cwd().resolve()\n"
        "where = pathlib.Path(impl.store.__file__).resolve()\n"
        "assert root in where.parents, f'impl imported from {where}, not from the copy {root}'\n"
        "where = pathlib.Path(soak.judges.checker.__file__).resolve()\n"
        "assert root in where.parents, f'soak imported from {where}, not from the copy {root}'\n"
        "sys.exit(0 if ok else 1)\n"
    )
    env = subprocess_env(root)
    env.pop("PYTHONDONTWRITEBYTECODE")
    done = subprocess.run(
        [python, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode == 0:
        return ""
    lines = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.strip()]
    return " | ".join(lines[-3:]) or f"exit code {done.returncode}"


# --- running a suite ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SuiteRun:
    returncode: int | None  # None: timed out
    failures: tuple[dict, ...]  # the plugin's records, in order
    seconds: float
    output: str


def _stop(proc: subprocess.Popen) -> None:
    """Interrupt the run we started (its own process group): SIGINT lets pytest tear its fixtures down
    (embedded PostgreSQL included); SIGKILL what is left after a grace."""
    for sig, grace in ((signal.SIGINT, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_suite(
    root: Path, tests: Sequence[str], timeout: float = DEFAULT_TIMEOUT, python: str = sys.executable
) -> SuiteRun:
    """Run `pytest -x` over the given test files in the copy at root."""
    report = root / ".mutant-report.jsonl"
    report.unlink(missing_ok=True)
    cmd = [
        python,
        "-m",
        "pytest",
        *tests,
        "-x",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "properties.mutants.pytest_plugin",
        "--mutant-report",
        str(report),
    ]
    log = root / ".mutant-pytest.log"
    started = time.time()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=root,
            env=subprocess_env(root),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            returncode: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            if proc.poll() is None:
                _stop(proc)
    seconds = time.time() - started
    failures = []
    if report.exists():
        for line in report.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                record["seconds"] = record["at"] - started
                failures.append(record)
    return SuiteRun(returncode, tuple(failures), seconds, log.read_text(encoding="utf-8", errors="replace"))


def existing(root: Path, tests: Sequence[str]) -> list[str]:
    return [t for t in tests if (root / t.split("::")[0]).exists()]


def judge(mutant: Mutant, run: SuiteRun, timeout: float) -> Verdict:
    """The verdict of one mutant's suite run."""
    if run.failures:
        first = run.failures[0]
        if first["when"] == "collect":
            return Verdict(
                mutant.name,
                mutant.section,
                "broken",
                first["nodeid"],
                f"collection failed: {first['message']}",
                first["seconds"],
            )
        return Verdict(mutant.name, mutant.section, "killed", first["nodeid"], first["message"], first["seconds"])
    if run.returncode is None:
        return Verdict(mutant.name, mutant.section, "timeout", "", f"no test failed within {timeout:.0f}s", run.seconds)
    if run.returncode == 0:
        return Verdict(mutant.name, mutant.section, "survived", "", "", run.seconds)
    tail = " | ".join([ln for ln in run.output.splitlines() if ln.strip()][-3:])
    return Verdict(mutant.name, mutant.section, "broken", "", f"pytest exited {run.returncode}: {tail}", run.seconds)


def run_mutant(
    mutant: Mutant,
    source: Path = ROOT,
    timeout: float = DEFAULT_TIMEOUT,
    python: str = sys.executable,
    keep: Callable[[Path, SuiteRun], None] | None = None,
) -> Verdict:
    """Copy, patch, import-check and run the mutant's suite; never raises for a bad patch (verdict broken)."""
    started = time.time()
    try:
        with mutated_copy(mutant, source) as root:
            problem = import_check(root, python)
            if problem:
                elapsed = time.time() - started
                return Verdict(
                    mutant.name, mutant.section, "broken", "", f"does not import: {problem}", elapsed, elapsed
                )
            tests = existing(root, mutant.suite)
            run = run_suite(root, tests, timeout, python)
            if keep is not None:
                keep(root, run)
            return replace(judge(mutant, run, timeout), wall=time.time() - started)
    except PatchError as exc:
        elapsed = time.time() - started
        return Verdict(mutant.name, mutant.section, "broken", "", f"patch does not apply: {exc}", elapsed, elapsed)


def run_baseline(
    suite: Sequence[str], source: Path = ROOT, timeout: float = 600.0, python: str = sys.executable
) -> SuiteRun:
    """The suite on an unmutated copy: it must pass, or the kills prove nothing."""
    with mutated_copy(None, source) as root:
        return run_suite(root, existing(root, suite), timeout, python)


def run_catalogue(
    mutants: Sequence[Mutant],
    source: Path = ROOT,
    timeout: float = DEFAULT_TIMEOUT,
    python: str = sys.executable,
    baseline: Callable[[Sequence[str]], SuiteRun] | None = None,
    mutate: Callable[[Mutant], Verdict] | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> list[Verdict]:
    """Every mutant's verdict, each counted only against a baseline of its own suite that passed.

    `baseline` and `mutate` default to `run_baseline` / `run_mutant` on `source` (tests inject fakes)."""

    def _baseline(suite: Sequence[str]) -> SuiteRun:
        return run_baseline(suite, source, max(timeout * 5, 600.0), python)

    def _mutate(mutant: Mutant) -> Verdict:
        return run_mutant(mutant, source, timeout, python)

    baseline = baseline or _baseline
    mutate = mutate or _mutate
    baselines: dict[tuple[str, ...], SuiteRun] = {}
    verdicts: list[Verdict] = []
    for i, mutant in enumerate(mutants, 1):
        suite = tuple(mutant.suite)
        if suite not in baselines:
            baselines[suite] = run = baseline(suite)
            culprit = run.failures[0]["nodeid"] if run.failures else f"exit code {run.returncode}"
            status = "passed" if run.returncode == 0 else f"FAILED ({culprit})"
            progress(f"baseline {' '.join(suite)}: {status} in {run.seconds:.1f}s")
        base = baselines[suite]
        if base.returncode != 0:
            first = base.failures[0] if base.failures else None
            why = (
                f"the unmutated suite fails too: {first['nodeid']}: {first['message']}"
                if first
                else f"the unmutated suite exited {base.returncode if base.returncode is not None else 'by timeout'}"
            )
            verdict = Verdict(mutant.name, mutant.section, "unjudged", "", why, 0.0)
        else:
            verdict = mutate(mutant)
        verdicts.append(verdict)
        by = short_test(verdict.killer) if verdict.killer else verdict.message
        progress(f"[{i}/{len(mutants)}] {mutant.name}: {verdict.status} in {verdict.seconds:.1f}s {by}")
    return verdicts


# --- the kill matrix ---------------------------------------------------------------------------------------


def short_test(nodeid: str) -> str:
    """`tests/test_runtime.py::test_x` → `test_runtime::test_x` (the matrix stays readable)."""
    path, _, rest = nodeid.partition("::")
    return f"{Path(path).stem}::{rest}" if rest else Path(path).stem


def matrix(verdicts: Sequence[Verdict], details: bool = False) -> str:
    """The kill matrix as a fixed-width table, one mutant per line, and a summary line."""
    name_w = max([len("mutant"), *(len(v.mutant) for v in verdicts)])
    sec_w = max([len("section"), *(len(v.section) for v in verdicts)])
    header = f"{'mutant':<{name_w}}  {'section':<{sec_w}}  {'verdict':<8}  {'seconds':>7}  killed by"
    lines = [header, "-" * len(header)]
    for v in verdicts:
        by = short_test(v.killer) if v.killer else ("-" if v.killed or v.status == "survived" else v.message)
        lines.append(f"{v.mutant:<{name_w}}  {v.section:<{sec_w}}  {v.status:<8}  {v.seconds:7.1f}  {by}")
        if details and v.message and v.killed:
            lines.append(f"{'':<{name_w}}  {'':<{sec_w}}  {'':<8}  {'':>7}    ↳ {v.message}")
    killed = sum(v.killed for v in verdicts)
    slowest = max((v.seconds for v in verdicts), default=0.0)
    lines.append("-" * len(header))
    lines.append(
        f"{killed}/{len(verdicts)} killed; slowest verdict {slowest:.1f}s; "
        f"wall time {sum(v.wall for v in verdicts):.1f}s"
    )
    return "\n".join(lines)
