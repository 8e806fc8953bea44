"""Where the host's time goes in one trace: which op encloses which (``nesting``, in numpy),
the hot-op table as torch counts it (``ops``) and finer by shape and by the script's
function (``op_groups``), steps and their phases (``steps``), the script's sync points with
their lines (``syncs``, ``python_lines``) and the profiler's own cost (``overhead``)."""
