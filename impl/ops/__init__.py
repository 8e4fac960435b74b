"""The operator's surface (docs/architecture.md "Layout of impl/"): the `belay` CLI (`cli.py`, `cli_ops.py`),
the operator commands' library (`operator.py`), the MCP server, replay, the dashboard, and the entry points'
helpers (`failures.py`, `lifecycle.py`, `smoke.py`). Nothing else in impl/ imports this package."""
