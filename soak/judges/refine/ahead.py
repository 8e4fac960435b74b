"""`python -m soak.judges.refine.ahead <history.bin>`: the second process of feed.decode_ahead — decodes the
capture file and writes the batches to stdout (feed.produce)."""

import sys
from pathlib import Path

from soak.judges.refine.feed import produce

if __name__ == "__main__":
    produce(Path(sys.argv[1]), sys.stdout.buffer)
