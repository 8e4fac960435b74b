"""Judge any SDK operation by operation through the adapter protocol (docs/sdk-adapter.md)."""
