"""Several processes, GPUs and machines, one module per role: who am I (``identity``,
stdlib only, imported in the profiled process), starting the ranks (``launch``), the rank 0
<-> ranks file protocol (``mailbox``), each rank's summary and gathering them (``summary``,
the map step), one rank's share of a pass (``share``), a pass run on chosen ranks and
reduced (``fan_out``), the torch.profiler pass on every rank and its reduce (``triage``).
Cross-rank analysis (no I/O) is model/'s: cross_rank, rank_plan, collectives."""
