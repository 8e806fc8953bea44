"""report.json's typed contract: its shape declared once as TypedDicts (contract.report)
and the check of a decoded report against it (contract.check), both with msgspec; the
names report.json's keys go by are schema.report's, stdlib only for the profiled process."""
