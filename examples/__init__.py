"""Runnable examples of the reference SDK and runtime (examples/README.md)."""
