"""Job-code applications the runtime tests run, in-process and in `belay worker` subprocesses."""
