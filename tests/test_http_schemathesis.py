"""Schemathesis against the served OpenAPI document: examples, coverage, generated cases and stateful
link sequences, every check on, zero failures. Bounded for CI: BELAY_ST_EXAMPLES cases per operation
(default 20) with a fixed seed (BELAY_ST_SEED); long polls are capped server-side at 0.3 s so the
generated long_poll_seconds do not stall the run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from impl.http.testing import serve_api

CONFIG = """
[generation]
# PostgreSQL text and jsonb cannot hold NUL: the API answers 400 for it, which schemathesis would
# otherwise count against "schema-valid data accepted".
allow-x00 = false
"""


def test_schemathesis_finds_no_failure_against_the_served_document(db_url, tmp_path: Path):
    examples = os.environ.get("BELAY_ST_EXAMPLES", "20")
    seed = os.environ.get("BELAY_ST_SEED", "20261130")
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    st = Path(sys.executable).with_name("schemathesis")
    with serve_api(db_url, token="st-token", sweep_interval=0.5, max_long_poll=0.3) as api:
        run = subprocess.run(
            [
                str(st),
                "--config-file",
                str(config),
                "run",
                f"{api.base}/openapi.json",
                "-H",
                "Authorization: Bearer st-token",
                "--checks",
                "all",
                "--max-examples",
                examples,
                "--seed",
                seed,
                "--phases",
                "examples,coverage,fuzzing,stateful",
                "--request-timeout",
                "10",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
        )
    summary = run.stdout[run.stdout.rfind("SUMMARY") :]
    print(run.stdout[-6000:], run.stderr[-2000:])
    assert run.returncode == 0, run.stdout[-8000:]
    assert "passed" in summary and "failed" not in summary.split("Test cases:")[-1]
