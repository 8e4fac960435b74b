"""Provisioning figures (issue 18): how long an embedded cluster takes to start, a fresh test database to
clone, and a crashed cluster to come back — for this checkout and, side by side, another one.

    .venv/bin/python -m bench.provision [--rounds 5] [--clones 3] [--crashes 3] [--before REV|DIR]

`--before` is what to compare with: a git revision (extracted with `git archive` into a temporary
directory, e.g. `--before 541c317`, the code before impl/provision.py became a package) or a folder
holding another checkout. Every round runs one child process per checkout (the order alternates from round to round, so both meet the
machine in the same state); each child imports `impl.provision` from its own checkout (it prints which
file) and measures, in process:

    import         `import impl.provision` (psycopg already imported)
    start          EmbeddedCluster().start() with the cached initdb'd template data dir — copy it,
                   launch postgres, wait until it accepts connections (what `provision()` does on a
                   machine that has run Belay before)
    cold start     the same with an empty cache dir, so initdb runs first (a machine's first run)
    fresh db       TemplateDatabases.clone() of a migrated template (what each test's database costs)
    crash+restart  cluster.crash() then restart() until it accepts connections, with committed rows
                   and an open connection (what each crash of the soak's process nemesis costs)

and prints the median and p95 of each figure per checkout, after/before of the medians, and the
median over rounds of each round's after/before (which a change in the machine's load during the run
moves less). Each checkout is imported once, unmeasured, before the first round so neither pays for
compiling its bytecode. The
cluster runs with default durability (fsync on), on this machine. Figures, never assertions: the
machine is shared, so read the ratio, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
FIGURES = ("import", "start", "cold start", "fresh db", "crash+restart")

# The child loads this file by path, so a checkout without bench/provision.py can be measured: only
# `impl` (and `model`) come from the checkout under test, which is the child's cwd and PYTHONPATH.
_CHILD_BOOT = (
    "import importlib.util, json, sys\n"
    "spec = importlib.util.spec_from_file_location('belay_bench_provision', sys.argv[1])\n"
    "mod = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(mod)\n"
    "print(json.dumps(mod.child(**json.loads(sys.argv[2]))))\n"
)


def child(clones: int, crashes: int) -> dict[str, Any]:
    """One round, in a fresh process: {figure: [seconds, ...]} plus where impl.provision came from."""
    t0 = time.perf_counter()
    prov = importlib.import_module("impl.provision")  # measured: a module of one file, or a package
    took: dict[str, Any] = {"import": [time.perf_counter() - t0]}
    try:  # impl/ regrouped by layer (issue 55); an earlier checkout has impl/migrate.py
        migrate = importlib.import_module("impl.store.migrate").migrate
    except ModuleNotFoundError:
        migrate = importlib.import_module("impl.migrate").migrate
    took["file"] = prov.__file__

    t0 = time.perf_counter()
    cluster = prov.EmbeddedCluster()
    cluster.start()
    took["start"] = [time.perf_counter() - t0]
    try:
        templates = prov.TemplateDatabases(cluster.url)
        template = f"bench_tpl_{os.getpid()}"
        templates.create_template(template, lambda conn: migrate(conn))
        took["fresh db"] = []
        for _ in range(clones):
            t0 = time.perf_counter()
            url = templates.clone(template)
            took["fresh db"].append(time.perf_counter() - t0)
            templates.drop(psycopg.conninfo.conninfo_to_dict(url)["dbname"])
        templates.drop(template)

        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE bench_rows (id int PRIMARY KEY, note text)")
        took["crash+restart"] = []
        for i in range(crashes):
            with psycopg.connect(cluster.url, autocommit=True) as conn:
                conn.execute(
                    "INSERT INTO bench_rows SELECT g, 'row ' || g FROM generate_series(%s::int, %s::int) g",
                    (i * 1000 + 1, i * 1000 + 1000),
                )
            idle = psycopg.connect(cluster.url, autocommit=True)
            t0 = time.perf_counter()
            cluster.crash()
            cluster.restart()
            took["crash+restart"].append(time.perf_counter() - t0)
            idle.close()
            with psycopg.connect(cluster.url, autocommit=True) as conn:
                rows = conn.execute("SELECT count(*) FROM bench_rows").fetchone()
            if rows is None or rows[0] != (i + 1) * 1000:
                raise RuntimeError(f"after crash {i + 1} the cluster holds {rows} rows, not {(i + 1) * 1000}")
    finally:
        cluster.destroy()

    cache = Path(tempfile.mkdtemp(prefix="bp-", dir="/tmp"))  # short: unix socket paths are limited
    try:
        t0 = time.perf_counter()
        cold = prov.EmbeddedCluster(prov.ClusterConfig(cache_dir=cache))
        cold.start()
        took["cold start"] = [time.perf_counter() - t0]
        cold.destroy()
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return took


def _child_env(tree: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("BELAY_DATABASE_URL", None)  # always an embedded cluster: that is what is measured
    return env


_WARM_UP = """import impl.provision
try:  # impl/ regrouped by layer (issue 55); an earlier checkout has impl/migrate.py
    import impl.store.migrate
except ModuleNotFoundError:
    import impl.migrate
"""


def warm_up(tree: Path) -> None:
    """Import once, unmeasured, so no checkout's first round pays for compiling its bytecode."""
    subprocess.run(
        [sys.executable, "-c", _WARM_UP],
        cwd=tree,
        env=_child_env(tree),
        check=True,
        timeout=120,
    )


def run_child(tree: Path, clones: int, crashes: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD_BOOT, str(HERE), json.dumps({"clones": clones, "crashes": crashes})],
        cwd=tree,
        env=_child_env(tree),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if out.returncode != 0:
        raise SystemExit(f"the round in {tree} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[math.ceil(0.95 * len(ordered)) - 1]


def extract(rev: str, into: Path) -> Path:
    """`git archive` of revision *rev* of this repository, unpacked into *into*."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, timeout=120)
    if archive.returncode != 0:
        raise SystemExit(f"--before {rev!r} is neither a folder nor a git revision: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True, timeout=120)
    return into


def measure(trees: dict[str, Path], rounds: int, clones: int, crashes: int) -> None:
    labels = list(trees)
    samples: dict[str, dict[str, list[float]]] = {label: {f: [] for f in FIGURES} for label in labels}
    paired: dict[str, list[float]] = {f: [] for f in FIGURES}  # per round: median after / median before
    files: dict[str, str] = {}
    for tree in trees.values():
        warm_up(tree)
    for r in range(rounds):
        order = labels if r % 2 == 0 else labels[::-1]
        this_round: dict[str, dict[str, list[float]]] = {}
        for label in order:
            took = run_child(trees[label], clones, crashes)
            files[label] = took.pop("file")
            this_round[label] = took
            for figure in FIGURES:
                samples[label][figure] += took[figure]
        if len(labels) == 2:
            for figure in FIGURES:
                after, before = (statistics.median(this_round[k][figure]) for k in ("after", "before"))
                paired[figure].append(after / before)
        print(f"round {r + 1}/{rounds} done ({' then '.join(order)})", file=sys.stderr)

    for label in labels:
        print(f"{label}: impl.provision from {files[label]}")
    print(f"rounds {rounds}, {clones} clones and {crashes} crashes per round; milliseconds")
    print(f"{'figure':<15}{'checkout':<10}{'n':>4}{'median':>10}{'p95':>10}")
    for figure in FIGURES:
        for label in labels:
            vals = samples[label][figure]
            med, top = statistics.median(vals) * 1000, p95(vals) * 1000
            print(f"{figure:<15}{label:<10}{len(vals):>4}{med:>10.1f}{top:>10.1f}")
        if len(labels) == 2:
            ratio = statistics.median(samples["after"][figure]) / statistics.median(samples["before"][figure])
            print(
                f"{'':<15}after/before: of the medians {ratio:.2f}, "
                f"median of the rounds' {statistics.median(paired[figure]):.2f} "
                f"(rounds: {' '.join(f'{x:.2f}' for x in paired[figure])})"
            )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="child processes per checkout (default 5)")
    ap.add_argument("--clones", type=int, default=3, help="fresh databases cloned per round (default 3)")
    ap.add_argument("--crashes", type=int, default=3, help="crash+restart cycles per round (default 3)")
    ap.add_argument("--before", help="a git revision or a folder to measure side by side (shown as 'before')")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.clones < 1 or args.crashes < 1:
        ap.error("--rounds, --clones and --crashes must be at least 1")
    if args.before is None:
        measure({"after": REPO}, args.rounds, args.clones, args.crashes)
        return
    with tempfile.TemporaryDirectory(prefix="bench-provision-") as tmp:
        before = Path(args.before)
        before = before.resolve() if before.is_dir() else extract(args.before, Path(tmp))
        if not (before / "impl").is_dir():
            ap.error(f"--before {args.before}: {before} holds no impl/ folder")
        measure({"before": before, "after": REPO}, args.rounds, args.clones, args.crashes)


if __name__ == "__main__":
    main()
