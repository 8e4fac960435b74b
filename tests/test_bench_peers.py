"""bench.peers runs end to end on a tiny workload (the figures themselves belong to bench runs)."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from bench import peers


def test_the_peer_benchmark_runs_belay_and_a_peer_counts_completion_in_the_database_and_reports_a_failing_peer(
    tmp_path, capsys, monkeypatch
):
    def drain_that_cannot_run(url: str, n: int) -> float:
        raise RuntimeError("needs an extension the embedded server lacks")

    broken = (peers.System("broken", "a peer that cannot run here", None), peers.belay_setup, peers.belay_enqueue)
    monkeypatch.setitem(peers.SYSTEMS, "broken", (*broken, drain_that_cannot_run))
    systems = ["belay-batched", "belay-unbatched", "broken"]
    if importlib.util.find_spec("pgqueuer") is not None:
        systems.append("pgqueuer-100")
    out = tmp_path / "peers.json"
    assert peers.main(["--jobs", "60", "--rounds", "1", "--systems", ",".join(systems), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["systems"]) == set(systems) - {"broken"}
    for figures in result["systems"].values():
        assert figures["drain_per_s"] > 0 and figures["enqueue_per_s"] > 0
        assert figures["db_per_job"]["rows_written"] > 0 and figures["db_per_job"]["commits"] > 0
        assert figures["enqueue_db_per_job"]["rows_written"] > 0
        cpu = figures["cpu_us_per_job"]  # observed from /proc, outside the worker process
        assert cpu["worker"] > 0 and all(r["cpu_us_per_job"]["worker"] > 0 for r in figures["rounds"])
        if "BELAY_DATABASE_URL" not in os.environ:  # the embedded server runs here: its backends are visible
            assert cpu["postgresql"] > 0
    assert result["systems"]["belay-batched"]["drain_ratio_to_belay_batched"] == pytest.approx(1.0)
    assert "needs an extension the embedded server lacks" in result["not_run"]["broken"]
    printed = capsys.readouterr().out
    assert "a peer that cannot run here" in printed and "not run: failed in round 1" in printed


def test_an_unknown_system_is_a_usage_error():
    with pytest.raises(SystemExit) as exc:
        peers.main(["--systems", "nope"])
    assert exc.value.code == 2
