"""``python -m mixpert.cli ...``: the ``mixpert`` command (benchmarks/device_run.sh runs it so,
from a source tree on ``PYTHONPATH``, with no console script installed)."""

from . import main

main()
