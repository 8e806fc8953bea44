"""Every exit code an nsbridge command ends with, and what it means: the one table the CLI,
the errors, the profiled process and docs/reference/exit-codes.md (generated from
``EXIT_CODES``) share."""

from __future__ import annotations

from typing import NamedTuple

OK = 0
ERROR = 1            # nsbridge could not do its job (errors.NsbridgeError); gate/diff: regression
USAGE = 2            # a usage error (click's own); diff: a run it cannot read
BUG = 3              # an unexpected exception in nsbridge
INCONCLUSIVE = 4     # gate/diff: the data cannot decide
REFUSED = 5          # gate/diff: nothing was compared
RECORD_NOT_WRITTEN = 74   # EX_IOERR: the profiled process could not write its record
TIMEOUT = 124        # --timeout stopped the script
INTERRUPTED = 130    # Ctrl-C (128 + SIGINT)
TERMINATED = 143     # SIGTERM (128 + SIGTERM)


class ExitCode(NamedTuple):
    """One row of the table: the code, which commands end with it, what it means."""

    code: str
    commands: str
    meaning: str


EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode(str(OK), "every command", "the script finished and was analysed; `gate`, "
             "`diff`: no regression"),
    ExitCode("the script's own", "triage, timeline, deep", "the script failed or called "
             "`sys.exit(n)`; the report (status `failed`) and any partial trace are kept"),
    ExitCode(str(ERROR), "every command", "nsbridge could not do its job: bad input, a "
             "missing tool or device, with a one-paragraph message saying what to do; "
             "`gate`, `diff`: a regression"),
    ExitCode(str(USAGE), "every command", "a usage error (an unknown option, a missing "
             "argument); `diff`: a run it cannot read"),
    ExitCode(str(BUG), "every command", "a bug in nsbridge: the traceback is printed; "
             "please report it with the command line"),
    ExitCode(str(INCONCLUSIVE), "gate, diff", "the data cannot decide; the output says what "
             "would settle it (`--inconclusive pass|fail` maps it to 0 or 1)"),
    ExitCode(str(REFUSED), "gate, diff, deep", "refused, nothing was compared: a failed, "
             "running, empty or foreign-schema run, two different scripts, or a gate process "
             "that failed; `gate`, `deep`: a run directory nsbridge will not run again (its "
             "script outside the trusted folders, a module, a variable that loads code), "
             "before any process started"),
    ExitCode(str(RECORD_NOT_WRITTEN), "the profiled process (nsbridge exits 1)", "the "
             "profiled process could not write its record (a full disk); nsbridge reports "
             "status `failed`, exits 1 and keeps what the trace holds"),
    ExitCode(str(TIMEOUT), "triage, timeline, deep", "`--timeout` stopped the script before "
             "it finished (partial trace and report kept); a script that ran to its end is "
             "`ok`, even when its process's exit outlasted the timeout"),
    ExitCode(str(INTERRUPTED), "every command", "Ctrl-C (partial trace and report kept)"),
    ExitCode(str(TERMINATED), "every command", "SIGTERM to nsbridge or to the profiled "
             "process, e.g. a launcher or scheduler ending the job (the script and the "
             "processes it started are ended too; what was recorded is kept); status "
             "`terminated`"),
    ExitCode("128+N", "triage, timeline, deep", "the script's process was killed by signal N "
             "before it could write its record: 137 is SIGKILL, what the kernel's OOM killer "
             "sends (check `dmesg`); the message says which signal and that there is no "
             "Python traceback"),
)
