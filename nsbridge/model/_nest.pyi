"""Types of the C nesting sweep (nsbridge/model/_nest.c)."""

import numpy as np

def parents(codes: np.ndarray, start: np.ndarray, end: np.ndarray, top_level: np.ndarray,
            out: np.ndarray) -> None: ...
def enclosing(codes: np.ndarray, times: np.ndarray, start: np.ndarray, end: np.ndarray,
              parent: np.ndarray, bounds: np.ndarray, out: np.ndarray) -> None: ...
