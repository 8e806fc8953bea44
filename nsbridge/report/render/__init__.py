"""The report's renderers: the terminal summary, report.md, report.html (with its charts),
ops.csv, the merged Perfetto trace and the diff/gate answer, composed once (``compose``)
and written as the run's files (``files``)."""
