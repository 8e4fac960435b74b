"""python -m soak.judges.replay <run-dir>: re-check a soak's captured history (soak/judges/replay/)."""

from soak.judges.replay import main

main()
