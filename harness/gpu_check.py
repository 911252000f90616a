"""`python -m harness.gpu_check --out DIR`: the device check of harness/bench/gpu_check.py under the name that
the README and a session lent a GPU use."""

import sys

from harness.bench.gpu_check import main

if __name__ == "__main__":
    sys.exit(main())
