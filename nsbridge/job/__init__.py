"""A job of several processes, as each of its processes sees it: who am I (``identity``,
stdlib only, imported in the profiled process), what rank 0 and the other ranks tell each
other through the job's own store (``store``), what they leave in the run directory for
rank 0 (``mailbox``), each rank's summary of its own trace (``summary``, the map step), and
many traces read as a map and a reduce (``trace_map``) wherever it runs (``executors``).
Below everything that uses them: the profiled process, the passes and the fan-out
(distributed/) that drives passes on the ranks."""
