"""numpy imported with one OpenBLAS thread in nsbridge's own processes.

nsbridge multiplies no matrices, but the OpenBLAS inside numpy's wheels starts a thread
per core when numpy is imported, and those threads spin for a while waiting for work: on
a 2-core machine about 0.1 s of CPU taken from the trace reader and the analysis. OpenBLAS
reads its thread count once, when it is loaded.
"""

from __future__ import annotations

import os
import sys

VARIABLE = "OPENBLAS_NUM_THREADS"


def import_numpy_on_one_thread() -> None:
    """Import numpy with OpenBLAS on one thread, then put the environment back as it was:
    a script nsbridge profiles (a child process) gets the user's own setting. Does nothing
    once numpy is imported. Also the initializer of analyze's worker processes."""
    if "numpy" in sys.modules:
        return
    saved = os.environ.get(VARIABLE)
    os.environ[VARIABLE] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        if saved is None:
            del os.environ[VARIABLE]
        else:
            os.environ[VARIABLE] = saved
