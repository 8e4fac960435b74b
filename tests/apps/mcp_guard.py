"""Authorizers for tests/test_mcp.py: `belay mcp --authorizer tests.apps.mcp_guard:only_retry`."""

from __future__ import annotations

from typing import Any

CALLS: list[tuple[str, dict[str, Any]]] = []


def only_retry(tool: str, arguments: dict[str, Any]) -> bool:
    """Allow retries; refuse cancels with a reason; refuse everything else silently."""
    if tool == "cancel_job":
        raise PermissionError(f"cancelling job {arguments['job_id']} needs a human")
    return tool == "retry_job"
