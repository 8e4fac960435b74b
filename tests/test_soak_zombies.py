"""Zombie stops (soak/zombies.py): when the nemesis may SIGCONT a node that froze `slow` attempts in their
paid step, and when the window without database crashes may end. Pure: rows as the nemesis reads them."""

from __future__ import annotations

from soak.zombies import _settled

HELD = [(7, 1), (9, 2)]


def rows(**by_job: tuple) -> dict:
    return {int(k[1:]): v for k, v in by_job.items()}


def test_a_stopped_zombie_stays_frozen_until_another_node_claims_its_job_again():
    reclaimed_not_claimed = rows(j7=("ready", 1, None, False), j9=("running", 3, "w2-1", False))
    assert not _settled(reclaimed_not_claimed, HELD, after_cont=False)
    claimed_again = rows(j7=("running", 2, "w3-1", False), j9=("running", 3, "w2-1", False))
    assert _settled(claimed_again, HELD, after_cont=False)


def test_a_job_that_ended_while_its_zombie_was_frozen_needs_no_later_attempt():
    assert _settled(rows(j7=("cancelled", 1, None, False), j9=("running", 3, "w2-1", False)), HELD, after_cont=False)
    assert _settled(rows(j9=("running", 3, "w2-1", True)), HELD, after_cont=True)  # job 7 pruned: gone


def test_after_the_sigcont_the_window_lasts_until_each_later_attempt_wrote_its_pre_ack():
    napping = rows(j7=("running", 2, "w3-1", False), j9=("running", 3, "w2-1", True))
    assert not _settled(napping, HELD, after_cont=True)
    assert _settled(rows(j7=("running", 2, "w3-1", True), j9=("succeeded", 3, None, True)), HELD, after_cont=True)
