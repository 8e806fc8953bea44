"""One module per command behind nsbridge.api, each a composition of passes into one Run:
``triage``, ``timeline``, ``deep``, ``analyze``, ``diff`` (two runs judged) and ``gate``
(both sides measured again in interleaved pairs, and ``rejudge``); ``measure`` (a script's
profiled processes into a triage run directory, the unit of both `triage` and the gate) and
``runs`` (the run a command adds its pass to) are what they share."""
