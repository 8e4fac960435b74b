"""The default logger's lines parse back to their fields (issue 29, item 11): kind, queue, node and
error are logfmt-quoted, so a producer cannot forge a line — a kind containing a newline, a space or
`state=succeeded` stays inside its own value — and `--log-format json` writes one JSON object a line."""

from __future__ import annotations

import io
import json
import logging

import pytest

from impl import telemetry

HOSTILE = [
    "summarize",
    "x state=succeeded",
    "x\nbelay job=1 kind=k queue=q state=succeeded attempt=1 duration=1ms",
    "x\rbelay job=1 state=succeeded",
    'x" state="succeeded',
    "back\\slash\\",
    "=",
    "a=b",
    "",
    " ",
    "tab\there",
    "\x1b[31mred\x1b[0m",
    "line\u2028separator\u2029para\x85nel",
    "naïve ☃ 日本",
    '"',
    "\\n",
    "\x00nul",
]


def _meta(kind: str, queue: str, node: str | None, error: str | None) -> dict:
    meta = {"job_id": 812, "kind": kind, "queue": queue, "attempt": 3, "state": "failed", "duration_ms": 7}
    if node is not None:
        meta["node"] = node
    if error is not None:
        meta["error"] = error
    return meta


@pytest.mark.parametrize("value", HOSTILE)
def test_every_job_line_is_one_line_that_parses_back_to_its_fields(value):
    for meta in (
        _meta(value, "ai", "n1", None),
        _meta("k", value, "n1", f"RuntimeError: {value}"),
        _meta("k", "q", value or "n", value or None),
    ):
        line = telemetry.format_job_line(meta)
        assert len(line.splitlines()) == 1 and "\n" not in line and "\r" not in line, repr(line)
        assert line.startswith("belay job=812 "), line
        fields = telemetry.parse_logfmt(line.removeprefix("belay "))
        expected = {
            "job": "812",
            "kind": meta["kind"],
            "queue": meta["queue"],
            "state": "failed",
            "attempt": "3",
            "duration": "7ms",
        }
        if meta.get("node"):
            expected["node"] = meta["node"]
        if meta.get("error"):
            expected["error"] = meta["error"]
        assert fields == expected, (line, fields)


def test_plain_values_stay_bare_and_others_are_quoted():
    assert (
        telemetry.format_job_line(_meta("summarize", "ai", "n1", None))
        == "belay job=812 kind=summarize queue=ai state=failed attempt=3 duration=7ms node=n1"
    )
    assert (
        telemetry.format_job_line(_meta("x state=succeeded", "ai", None, "E: 'a'\nb"))
        == 'belay job=812 kind="x state=succeeded" queue=ai state=failed attempt=3 duration=7ms error="E: \'a\'\\nb"'
    )


def test_a_queue_scale_line_is_quoted_too():
    stream = io.StringIO()
    logger = logging.getLogger("belay.test.logfmt.scale")
    logger.propagate = False
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        telemetry.DefaultLogger(logger=logger)("queue.scale", {"queue": "q\nbelay job=1 state=succeeded", "limit": 4})
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert telemetry.parse_logfmt(lines[0].removeprefix("belay ")) == {
        "queue": "q\nbelay job=1 state=succeeded",
        "limit": "4",
    }


def test_the_parser_refuses_what_the_formatter_never_writes():
    for bad in ('kind="unterminated', "kind=a b", 'kind="x"y', "=v", 'kind="\\q"', "k=v  k2=v"):
        with pytest.raises(ValueError):
            telemetry.parse_logfmt(bad)


def test_json_lines_format_one_object_a_line_with_the_fields():
    record = logging.LogRecord(
        "belay", logging.WARNING, __file__, 1, telemetry.format_job_line(_meta("x\ny", "q", "n1", "E: z")), None, None
    )
    other = logging.LogRecord("belay", logging.INFO, __file__, 1, "belay worker n1 running queues q", None, None)
    fmt = telemetry.JsonLinesFormatter()
    job, plain = json.loads(fmt.format(record)), json.loads(fmt.format(other))
    assert "\n" not in fmt.format(record)
    assert {k: job[k] for k in ("level", "event", "job", "kind", "queue", "node", "error")} == {
        "level": "WARNING",
        "event": "job",
        "job": 812,
        "kind": "x\ny",
        "queue": "q",
        "node": "n1",
        "error": "E: z",
    }
    assert job["attempt"] == 3 and job["duration_ms"] == 7 and "time" in job
    assert plain["message"] == "belay worker n1 running queues q" and plain["level"] == "INFO"
