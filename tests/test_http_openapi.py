"""The served document: the spec verbatim plus the documented overlay, and the 14+ operations routed."""

from __future__ import annotations

from pathlib import Path

import yaml

from impl.http.openapi import served_document, spec_text

DOCS = Path(__file__).resolve().parents[1] / "docs" / "spec" / "durable-execution-api.openapi.yaml"


def test_the_vendored_spec_is_the_one_in_docs():
    assert spec_text() == DOCS.read_text(encoding="utf-8")


def extends(mine: dict | None, spec: dict | None) -> bool:
    """`mine` is `spec` with extra (documented) properties only: every spec property and `required`
    kept as they are."""
    if mine is None or spec is None:
        return mine == spec
    a, b = mine["application/json"]["schema"], spec["application/json"]["schema"]
    return (
        a.get("required") == b.get("required")
        and {k: v for k, v in a.items() if k != "properties"} == {k: v for k, v in b.items() if k != "properties"}
        and all(a["properties"].get(k) == v for k, v in b.get("properties", {}).items())
    )


def test_the_overlay_keeps_every_spec_operation_schema_and_status():
    spec = yaml.safe_load(spec_text())
    served = served_document(bearer=False)
    for path, item in spec["paths"].items():
        for method, op in item.items():
            mine = served["paths"][path][method]
            assert mine["operationId"] == op["operationId"]
            assert set(op["responses"]) <= set(mine["responses"])
            for status, response in op["responses"].items():
                kept = mine["responses"][status].get("content")
                assert kept == response.get("content") or status == "200" or extends(kept, response.get("content"))
    assert "security" not in served["paths"]["/queues"]["post"]
    assert served_document(bearer=True)["paths"]["/queues"]["post"]["security"] == [{"bearerAuth": []}]


def test_the_document_is_served(db_url):
    from impl.http.testing import serve_api

    with serve_api(db_url) as api:
        doc = api.client.get(f"{api.base}/openapi.json").json()
        assert doc["servers"] == [{"url": "/api/v1"}]
        assert len([m for item in doc["paths"].values() for m in item]) == 17  # 16 + the listTasks extension
        assert doc["paths"]["/tasks"]["get"]["x-belay-extension"] is True
        assert api.get("/openapi.json").json() == doc
