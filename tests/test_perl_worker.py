"""The foreign Perl soak worker (soak/workers/perl), written from the documents alone by an author who read no
other worker's code, certified by a default-length soak like the Ruby and Node workers
(soak/workers/perl/README.md says how it was written and which gaps the documents left).

Skipped, saying why, when `perl` with ithreads or DBD::Pg (Debian: libdbd-pg-perl) is missing — unless
BELAY_REQUIRE_PERL=1, which CI sets after `apt-get install -y libdbd-pg-perl`: then a missing toolchain
fails the test instead."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.foreign_soak import soak_is_never_invalid, toolchain_ready

ROOT = Path(__file__).resolve().parents[1]
WORKER_PL = ROOT / "soak" / "workers" / "perl" / "worker.pl"
WORKER = "perl soak/workers/perl/worker.pl"


def _perl_ready() -> None:
    toolchain_ready(
        "BELAY_REQUIRE_PERL",
        "perl",
        [(["perl", "-Mthreads", "-MDBI", "-MDBD::Pg", "-MJSON::PP", "-e", "1"], "perl lacks ithreads, DBI or DBD::Pg")],
        "apt-get install -y libdbd-pg-perl",
    )


def test_the_perl_worker_compiles():
    _perl_ready()
    out = subprocess.run(["perl", "-c", str(WORKER_PL)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "syntax OK" in out.stderr, out.stderr


def test_a_default_soak_of_the_perl_worker_is_never_invalid(tmp_path: Path):
    _perl_ready()
    soak_is_never_invalid(WORKER, tmp_path)
