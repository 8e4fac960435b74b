"""Deliberately broken variants of the reference soak worker (soak/reference_worker.py).

Each module patches one piece of the impl/ SDK *in its own worker process only* (a store subclass, a
Worker subclass, or a patched JobContext method) and runs the reference worker's `main` with it:

    soak/run.sh --worker '"$BELAY_SOAK_PYTHON" -m tests.soak_fixtures.unfenced_ack' ...

`python -m tests.soak_fixtures.matrix` soaks every variant and checks that each ends invalid with the
invariant it breaks named (see VARIANTS there).
"""
