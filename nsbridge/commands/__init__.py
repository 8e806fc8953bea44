"""The commands that are more than one pass: ``measure`` (a script's profiled processes
into a triage run directory, the unit of both `triage` and the gate), ``diff`` (two runs
judged) and ``gate`` (both sides measured again in interleaved pairs, and ``rejudge``).
nsbridge.api is their thin public face."""
