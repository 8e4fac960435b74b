"""One quoting function for every logfmt line Belay writes (issue 53): the dashboard's audit log and the
telemetry logger. Its promise (impl/ops/dashboard/audit.py, impl/telemetry/logfmt.py): a value "cannot forge a field
or a line" — every line is one line and parses back to exactly its fields, whatever the text."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from impl import telemetry
from impl.ops.dashboard import audit

TEXT = st.text(st.characters(codec=None, exclude_categories=["Cs"]), max_size=40)


def test_the_audit_log_and_telemetry_share_one_quoting_function():
    assert audit.quote("a b") == telemetry.logfmt_value("a b")
    assert audit.parse is telemetry.parse_logfmt


def test_a_value_ending_in_a_newline_is_quoted():
    assert audit.quote("abc\n") == '"abc\\n"'
    assert "\n" not in audit.line({"action": "signal", "name": "abc\n"})


@settings(max_examples=500, deadline=None)
@given(values=st.lists(TEXT, min_size=1, max_size=4))
def test_any_text_stays_one_line_and_parses_back_to_its_fields(values):
    fields = {f"k{i}": v for i, v in enumerate(values)}
    for text in (audit.line(fields), " ".join(f"{k}={telemetry.logfmt_value(v)}" for k, v in fields.items())):
        assert text.splitlines() == [text] and "\u2028" not in text and "\x85" not in text
        assert telemetry.parse_logfmt(text) == fields
