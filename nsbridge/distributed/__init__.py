"""Driving passes on the ranks of a job, one module per role: starting the ranks
(``launch``), the machines of a job nsbridge starts on several (``nodes``), one rank's
share of a pass (``share``), a pass run on chosen ranks and reduced (``fan_out``), the torch.profiler pass on every rank and its reduce (``triage``).
What each rank knows of itself and tells the others is job/'s; cross-rank analysis (no
I/O) is model/'s: cross_rank, rank_plan, collectives. A single-process run never enters
this package."""
