"""Frames in, findings out, without I/O, grouped by the question each part answers:

- ``host``: where the host's time goes (ops, nesting, steps and phases, syncs, overhead);
- ``device``: what the device did (kernels to ops, busy and idle, memory, Tensor Cores,
  nsys's timeline joined to ops);
- ``nsight``: what Nsight Compute should profile and what its numbers say (plan, roofline,
  findings);
- ``judging``: what bounds the run and what to do (verdict, contention, recommendations);
- ``comparing``: two runs or several processes (comparability, diff, the gate, pooling);
- ``ranks``: the ranks of a job (collectives, the cross-rank report, which ranks ncu takes).

``analysis`` is the one-trace facade that runs them in order for `triage` and `analyze`;
``stats`` (intervals), ``strings`` (name tests once per distinct name) and ``keys`` (id
lookups) are shared by all.
"""
