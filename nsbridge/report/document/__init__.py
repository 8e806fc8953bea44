"""The report as a document: report.json built from a pass's numbers (``build``), the
vocabulary every view and renderer shares (sections, tables, formats, wording, escaping),
and the sentences of its head (the verdict, the machine, a failure)."""
