"""The durable-execution property test's runtime side: the program interpreter (`app`), the worker node
entry point (`node`) and the harness that runs programs under real faults (`harness`). See model/durable.py."""
