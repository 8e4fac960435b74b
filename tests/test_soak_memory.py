"""soak/memory.py: the long soak's RSS and report-size figures (issue 13) come from real /proc readings."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

from soak.memory import MemorySampler, describe, dir_size, rss_bytes


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
