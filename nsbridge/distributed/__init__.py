"""Several processes, GPUs and machines: rank detection (``ranks``), each rank's own
summary written where its trace was captured (``summary``, the map step)."""
