"""`nsbridge diff`: two runs (directories or report.json files) judged against each other,
and the checks every comparison makes of its inputs (the gate's too)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from .. import schema as S
from ..guard.confine import readable
from ..errors import DiffInputError, DiffRefusedError
from ..report.document.escape import terminal
from ..contract.comparison import Comparison
from ..contract.report import Report


def diff(base: Union[str, Path], new: Union[str, Path], *, fail_above: float = 10.0,
         ops: Sequence[str] = (), min_step_share: float = 0.02,
         allow: Sequence[str] = (), fail_above_mib: Optional[float] = None) -> Comparison:
    """Compare two runs (directories or report.json files) and gate on the result.

    Returns model.comparing.diff.compare's dict: ``outcome`` (pass, regression, inconclusive) with its
    ``exit_code`` (0, 1, 4), ``reasons`` and ``advice`` when inconclusive, ``regressions``
    (op or step time, source, change beyond the drift with its 95% interval, ms added per
    step), the step-time and per-op comparison, the noise figures and both machines.
    ``ops`` gates only those ops; ``allow`` accepts differences of kind target (runs of
    different scripts, refused otherwise), args, torch, gpu, threads or cores (which would
    otherwise make the comparison inconclusive). ``memory``: both runs' peak memory
    (model.comparing.memory_change): a rise above ``fail_above_mib`` MiB (None: the larger
    of 20% of the base peak and 16 MiB) is a regression naming what holds the added bytes.

    Raises:
        DiffInputError: a path is neither a run directory nor a JSON file, an ``ops`` or
            ``allow`` entry is unknown, or a threshold is NaN, infinite or negative.
        DiffRefusedError: a run diff cannot compare (model.comparing.comparability.refusal): failed,
            still running, empty, of another schema version or shape, or of another script.
    """
    from ..model.comparing.comparability import SIDES, refusal
    from ..model.comparing.diff import compare
    from ..report.document.build import SCHEMA_VERSION

    check_thresholds(fail_above, min_step_share, fail_above_mib)
    check_allow(allow)
    labels = (str(base), str(new))
    reports = [read_report(Path(p), side) for p, side in zip(labels, SIDES)]
    why = refusal(*reports, labels=labels, schema_version=SCHEMA_VERSION, allow=allow)
    if why:
        raise DiffRefusedError(terminal(why))
    check_gated_ops(ops, reports)
    result = compare(*reports, fail_above=fail_above, ops=ops, min_step_share=min_step_share,
                     allow=allow, fail_above_mib=fail_above_mib)
    result["a_label"], result["b_label"] = labels
    return result


def check_thresholds(fail_above: float, min_step_share: float,
                     fail_above_mib: Optional[float] = None) -> None:
    """DiffInputError for a threshold outside the CLI's range (limits): a NaN compares
    false with every change, so it would pass any slowdown."""
    from ..guard.limits import FAIL_ABOVE_MIB, FAIL_ABOVE_PCT, MIN_STEP_SHARE_PCT

    share = min_step_share
    pct = share * 100 if isinstance(share, (int, float)) and not isinstance(share, bool) \
        else share
    why = (FAIL_ABOVE_PCT.refusal(fail_above, "fail_above")
           or MIN_STEP_SHARE_PCT.refusal(pct, "min_step_share (as a percentage)")
           or (FAIL_ABOVE_MIB.refusal(fail_above_mib, "fail_above_mib")
               if fail_above_mib is not None else None))
    if why:
        raise DiffInputError(terminal(f"{why}. A threshold that is not a number in its "
                                      "range would judge every change wrongly."))


def check_allow(allow: Sequence[str]) -> None:
    """DiffInputError for an ``--allow`` kind that is not one."""
    from ..model.comparing.comparability import ALLOWABLE

    unknown = [k for k in allow if k not in ALLOWABLE]
    if unknown:
        raise DiffInputError(terminal(f"--allow {', '.join(unknown)}: the differences that can "
                                      f"be accepted are {', '.join(ALLOWABLE)}."))


def check_gated_ops(ops: Sequence[str], reports: Sequence[Report]) -> None:
    """DiffInputError for an ``--op`` no report has: the gate would check nothing."""
    known = {op["name"] for report in reports for op in report.get("ops") or []}
    unknown = [op for op in ops if op not in known]
    if unknown:
        raise DiffInputError(terminal(f"--op {', '.join(unknown)}: neither run has such an op, "
                                      "so the gate would check nothing. Use names as the "
                                      "reports' op tables spell them."))


def read_report(path: Path, side: str) -> Any:
    """The parsed report.json of run directory ``path``, or of the file ``path``.

    Raises:
        DiffRefusedError: a run directory (it has manifest.json) without a readable
            report.json.
        DiffInputError: anything else that is not readable JSON.
    """
    from ..model.comparing.comparability import no_report

    file = path / S.REPORT_JSON if path.is_dir() else path
    try:
        return json.loads(readable(file).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        if (file.parent / S.MANIFEST_JSON).is_file():
            raise DiffRefusedError(terminal(no_report(side, str(path)))) from None
        raise DiffInputError(terminal(f"{path} is neither an nsbridge run directory nor its "
                                      "report.json (no readable report.json). Pass two run "
                                      "directories or two report.json files.")) from None
