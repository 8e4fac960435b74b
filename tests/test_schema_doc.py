"""docs/schema.md is the migrations' DDL, rendered (issue 51: a Ruby worker written from the documents had
to introspect a migrated database, because the contract's "authoritative DDL" was nowhere in docs/)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.test_schema import TABLES

ROOT = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("schema_doc", ROOT / "scripts" / "schema_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_schema_page_is_the_migrations_ddl_as_rendered_now():
    gen = _generator()
    assert gen.DOC.read_text() == gen.render(), "docs/schema.md is stale: run `python scripts/schema_doc.py`"


def test_the_schema_page_names_every_table_and_normative_index():
    text = (ROOT / "docs" / "schema.md").read_text()
    for name in sorted(TABLES | {"belay_jobs_claim_idx"}):
        assert f'"public"."{name}"' in text or f"{name}" in text, name
