"""The ranks of a distributed job, without I/O: what collectives cost in one rank's trace
(``collectives``), the ranks' summaries reduced to the cross-rank report and the per-rank
rows of every pass (``cross_rank``), and which ranks get the per-kernel pass
(``rank_plan``)."""
