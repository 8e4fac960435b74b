"""python -m soak.judges.refine <run-dir>: trace validation of a soak's captured history (soak/judges/refine/)."""

from soak.judges.refine import main

main()
