"""The built wheel works on its own (issue 18): `belay migrate` and `belay smoke` from a fresh
virtualenv outside the checkout, with no source tree on the path, and with the SQL and YAML package
data the commands need.

How it stays fast and offline (about 15 s): the wheel is built from a copy of the packaged sources
with the running interpreter's setuptools (`pip wheel --no-deps --no-build-isolation`, so no
download); the fresh virtualenv is made `--without-pip`, the wheel is installed into it by this
interpreter's pip (`pip --python <venv> install --no-deps`, a real, non-editable install with its
`belay` console script), and the third-party dependencies come from this test environment through a
plain path line in a `.pth` file. A plain path line adds that one directory; it does not process
the `.pth` files inside it, so an editable install of the checkout living there stays inactive —
the test asserts that `impl` and `model` are imported from the virtualenv's own site-packages.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("model", "impl", "properties", "soak")  # pyproject's [tool.setuptools.packages.find]
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """A wheel built from a copy of the sources, installed into a fresh virtualenv outside the checkout."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, src / package, ignore=IGNORE)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(work / "dist"),
            str(src),
        ],
        cwd=work,
        env=env,
    )
    (wheel,) = (work / "dist").glob("belay_toolkit-*.whl")
    venv = work / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=work, env=env)
    python = venv / "bin" / "python"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        cwd=work,
        env=env,
    )
    purelib = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=work, env=env
        ).stdout.strip()
    )
    deps = [
        p
        for p in dict.fromkeys(
            [*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
        )
        if Path(p).is_dir()
    ]
    (purelib / "zz_belay_test_deps.pth").write_text("".join(f"{p}\n" for p in deps))
    return {"work": work, "wheel": wheel, "venv": venv, "python": python, "purelib": purelib, "env": env}


def test_the_wheel_holds_the_four_packages_and_the_sql_and_yaml_package_data(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == set(PACKAGES), f"unexpected top-level names in the wheel: {sorted(tops)}"
    for data in [*(ROOT / "impl" / "store" / "sql").glob("*.sql"), *(ROOT / "impl" / "http").glob("*.yaml")]:
        assert data.relative_to(ROOT).as_posix() in names, f"{data.name} is missing from the wheel"


def test_the_installed_packages_come_from_the_virtualenv_not_the_checkout(installed):
    out = _run(
        [
            str(installed["python"]),
            "-c",
            "import impl, model, impl.store, model.ops; print(impl.__file__); print(model.__file__)",
        ],
        cwd=installed["work"],
        env=installed["env"],
    ).stdout.split()
    for path in out:
        assert Path(path).is_relative_to(installed["purelib"]), path
        assert not Path(path).is_relative_to(ROOT), path


def test_belay_migrate_then_smoke_run_from_the_installed_wheel(installed, blank_db_url):
    belay = str(installed["venv"] / "bin" / "belay")
    env = {**installed["env"], "BELAY_DATABASE_URL": blank_db_url}
    migrated = _run([belay, "migrate"], cwd=installed["work"], env=env)
    with psycopg.connect(blank_db_url) as conn:
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE 'belay_%'"
            )
        }
    assert {"belay_jobs", "belay_steps", "belay_signals"} <= tables, (tables, migrated.stdout)
    smoke = _run([belay, "smoke"], cwd=installed["work"], env=env)
    assert smoke.stdout.startswith("provisioning: env"), smoke.stdout  # the test's database, not a new one
    assert "throwaway schema belay_smoke_" in smoke.stdout, smoke.stdout  # never the real schema (issue 29)
    assert "smoke passed" in smoke.stdout, smoke.stdout


def test_a_foreign_model_package_ahead_on_the_path_is_a_clear_error_not_silently_used(installed):
    foreign = installed["work"] / "foreign"
    (foreign / "model").mkdir(parents=True, exist_ok=True)
    (foreign / "model" / "__init__.py").write_text("RAISED = 'someone else'\n")
    env = {**installed["env"], "PYTHONPATH": str(foreign)}
    done = subprocess.run(
        [str(installed["venv"] / "bin" / "belay"), "--help"],
        cwd=installed["work"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "another distribution or directory on sys.path provides a `model` package" in done.stderr, done.stderr
