"""A job of several processes, as each of its processes sees it: who am I (``identity``,
stdlib only, imported in the profiled process), what rank 0 and the other ranks tell each
other through files (``mailbox``), and each rank's summary of its own trace, gathered by
rank 0 (``summary``, the map step). Below everything that uses them: the profiled process,
the passes and the fan-out (distributed/) that drives passes on the ranks."""
