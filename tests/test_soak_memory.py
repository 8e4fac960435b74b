"""soak/report/memory.py: the long soak's RSS and report-size figures (issue 13) come from real /proc readings."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

from soak.report.memory import MemorySampler, describe, dir_size, rss_bytes


@dataclass
class _Slot:
    index: int
    incarnation: int
    proc: subprocess.Popen


def test_rss_of_self_and_of_a_gone_process() -> None:
    assert (rss_bytes() or 0) > 5 * 1024 * 1024
    assert rss_bytes(2**22 + 7) is None


def test_sampler_follows_a_worker_that_grows_and_names_the_longest_lived_incarnation(tmp_path) -> None:
    grow = "import sys,time\nx=[]\nfor line in sys.stdin:\n    x.append(bytearray(40*1024*1024)); print('ok', flush=True)\n"
    p = subprocess.Popen([sys.executable, "-c", grow], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        slot = _Slot(1, 3, p)
        s = MemorySampler(every=30.0)
        s.maybe_sample([slot], now=0.0)
        s.maybe_sample([slot], now=10.0)  # inside the period: no sample
        assert len(s.samples) == 1
        assert p.stdin and p.stdout
        p.stdin.write("grow\n")
        p.stdin.flush()
        p.stdout.readline()
        s.maybe_sample([slot], now=40.0)
        m = s.summary()
        start, end = m["worker_rss_mib"]["start"][0], m["worker_rss_mib"]["end"][0]
        assert end - start > 30, m  # the 40 MiB it allocated shows
        assert m["oldest_worker"] == {
            "slot": 1,
            "incarnation": 3,
            "age_s": 40,
            "rss_mib_first_seen": start,
            "rss_mib_at_oldest": end,
        }
        (tmp_path / "a").write_bytes(b"x" * 1000)
        line = describe(m, dir_size(tmp_path))
        assert "harness RSS" in line and "report size 0.0 MiB" in line
    finally:
        p.kill()
        p.wait()


# --- issue 27: the history's samples live on disk, not in the harness --------------------------------


def test_history_keeps_nothing_in_memory_and_reads_every_event_back(tmp_path) -> None:
    from soak.record.history import History

    h = History(tmp_path / "history.jsonl")
    h.record("run_start", lease_ttl=10)
    for i in range(2000):
        h.record("lease_sample", at=float(i), rows=[[i, 1, "w1-1", 1.5, "slow"]] * 20, parked=[], stranded=[])
        h.record("step_sample", rows=[[i, "s1", 1, "d" * 32]], total=1)
        if i % 100 == 0:
            h.record("worker_kill", node=f"w1-{i}")
    h.record("drain_end", drained=True)
    assert h.events == []  # nothing in memory: the history grows on disk only
    events = h.snapshot()
    assert len(events) == 2 + 2000 * 2 + 20
    assert [e["type"] for e in events[:3]] == ["run_start", "lease_sample", "step_sample"]
    assert events[1]["rows"][0] == [0, 1, "w1-1", 1.5, "slow"] and events[-1] == {**events[-1], "drained": True}
    assert sum(1 for _ in h.stream()) == len(events)  # a stream, one event at a time
    assert [e["node"] for e in h.of("worker_kill")][:2] == ["w1-0", "w1-100"]
    size = (tmp_path / "history.jsonl").stat().st_size
    h.close()
    assert not (tmp_path / "history.jsonl").exists()  # replaced by its gzip
    assert (tmp_path / "history.jsonl.gz").stat().st_size < size / 10
    assert h.snapshot() == events  # still readable after close, every event equal


def test_an_event_log_cut_short_is_read_up_to_its_last_whole_line(tmp_path) -> None:
    """A killed harness leaves a plain log ending mid-line, or (killed while compressing) a plain log and
    a partial .gz beside it; an offline re-check reads what was whole (issue 27)."""
    import gzip

    from soak.judges.refine import HarnessLedger
    from soak.record.history import History, events_path, read_events

    h = History(tmp_path / "history.jsonl")
    for i in range(50):
        h.record("cancel", job_id=i, ok=True)
    h.close(compress=False)
    with open(tmp_path / "history.jsonl", "a") as f:
        f.write('{"t": 1, "type": "cancel", "job_id": 99')  # the write the kill interrupted
    assert [e["job_id"] for e in read_events(events_path(tmp_path))] == list(range(50))
    data = gzip.compress((tmp_path / "history.jsonl").read_bytes())
    (tmp_path / "history.jsonl.gz").write_bytes(data[: len(data) // 2])  # a gzip stream without its end
    assert events_path(tmp_path) == tmp_path / "history.jsonl"  # the plain log is preferred while it exists
    (tmp_path / "history.jsonl").unlink()
    part = list(read_events(events_path(tmp_path)))
    assert 0 < len(part) < 50 and [e["job_id"] for e in part] == list(range(len(part)))
    assert len(HarnessLedger.load(tmp_path).cancels) == len(part)  # the trace validation reads the .gz too


def test_history_without_a_file_keeps_everything() -> None:
    from soak.record.history import History

    h = History()
    h.record("lease_sample", rows=[])
    assert [e["type"] for e in h.snapshot()] == ["lease_sample"]


def test_the_check_phase_peak_and_the_ten_minute_figure_are_reported() -> None:
    """The samples stop before the end-of-run check; the harness's lifetime peak (VmHWM) is read after it
    and said apart, with the sample at 10 minutes (issue 27: RSS at the end against RSS at 10 min)."""
    from soak.report.memory import add_check_peak, peak_rss_bytes

    s = MemorySampler(every=30.0)
    for t in (0.0, 300.0, 600.0, 900.0):
        s.maybe_sample([], now=t)
    m = s.summary()
    assert "at_10_min" in m["harness_rss_mib"]
    ballast = bytearray(64 * 1024 * 1024)  # the peak must count memory the samples never saw
    ballast[::4096] = b"x" * len(ballast[::4096])
    m = add_check_peak(m)
    del ballast
    peak = m["harness_rss_mib"]["peak_with_check"]
    assert peak >= m["harness_rss_mib"]["max"] + 60, m
    assert peak * 1024 * 1024 <= (peak_rss_bytes() or 0) + 1024 * 1024
    line = describe(m, 0)
    assert "at 10 min" in line and "peak with the end-of-run check" in line
