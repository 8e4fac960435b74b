"""bench.peers runs end to end on a tiny workload (the figures themselves belong to bench runs)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from bench import peers


def test_the_peer_benchmark_runs_belay_and_a_peer_and_counts_completion_in_the_database(tmp_path, capsys):
    systems = ["belay-batched", "belay-unbatched"]
    if importlib.util.find_spec("pgqueuer") is not None:
        systems.append("pgqueuer-100")
    out = tmp_path / "peers.json"
    assert peers.main(["--jobs", "60", "--rounds", "1", "--systems", ",".join(systems), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["systems"]) == set(systems)
    for figures in result["systems"].values():
        assert figures["drain_per_s"] > 0 and figures["enqueue_per_s"] > 0
        assert figures["db_per_job"]["rows_written"] > 0
    assert result["systems"]["belay-batched"]["drain_ratio_to_belay_batched"] == pytest.approx(1.0)
    printed = capsys.readouterr().out
    assert "skipped procrastinate" in printed


def test_an_unknown_system_is_a_usage_error():
    with pytest.raises(SystemExit) as exc:
        peers.main(["--systems", "nope"])
    assert exc.value.code == 2
