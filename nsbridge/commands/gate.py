"""`nsbridge gate`: both sides measured again in interleaved pairs of profiled processes
(each composed here from the torch.profiler pass, not by calling the triage command), judged
while the answer is inconclusive and more pairs could settle it; and `rejudge`, the same
judgement of an earlier gate folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence, Union

from .. import schema as S
from ..collect.ncu import gpu_names
from ..guard.confine import readable
from ..errors import DiffInputError, DiffRefusedError, GateRunError, RunDirError, Stopped
from ..profiles import as_profile, with_overrides
from ..report.document.escape import terminal
from ..rundir import load_record
from ..script_check import checked_script
from .diff import check_allow, check_gated_ops, check_thresholds, read_report
from .measure import ProfileArg, profiled
from ..contract.check import held_to_types, typed_problem
from ..contract.comparison import Comparison, Look
from ..contract.report import Report

if TYPE_CHECKING:
    from ..model.comparing.evidence import Budget


def gate(base: Union[str, Path], new: Union[str, Path], script: Optional[str] = None,
         args: Sequence[str] = (), *, module: bool = False, processes: int = 3,
         max_processes: Optional[int] = None, budget_s: Optional[float] = 600.0,
         threads: Optional[int] = None, steps: int = 25, fail_above: float = 10.0,
         min_step_share: float = 0.02, ops: Sequence[str] = (), allow: Sequence[str] = (),
         out: Optional[Union[str, Path]] = None, timeout: Optional[float] = None,
         base_env: Optional[Mapping[str, str]] = None,
         new_env: Optional[Mapping[str, str]] = None, profile: ProfileArg = "gate",
         on_progress: Optional[Callable[[str], None]] = None,
         trust: Optional[Sequence[Union[str, Path]]] = None,
         fail_above_mib: Optional[float] = None,
         environ: Mapping[str, str] = os.environ) -> Comparison:
    """Measure BASE and NEW again, interleaved, and judge them: ``processes`` pairs of
    processes (A B, B A, ...; nsbridge.commands.interleave), each a triage with the ``profile``
    (``steps`` measured steps) into one gate folder, judged on paired changes
    (model.comparing.paired; with one pair, as `diff` judges two runs). While the answer
    is inconclusive, one more pair is run and judged again, up to ``max_processes`` pairs
    (default: 10, or ``processes`` if more) and while the next pair fits in ``budget_s``
    seconds from the start (None: no limit); the false-alarm bound holds over all those
    looks (model.comparing.evidence). BASE and NEW are run
    directories (run again as their manifests recorded them) or checkouts (``script`` run
    in each). ``threads``: torch's intra-op threads in every process (default: 1 when no
    GPU is visible, where two threads on a busy machine wait for each other; else as the
    script sets them). ``base_env``/``new_env``: variables set for one side only.
    ``trust``: the folders a run directory's script and folder must lie in (None: the
    current directory; nsbridge.commands.trust says what else a manifest may not ask). What each
    side runs goes to ``on_progress`` before the first process starts.
    ``fail_above_mib``: gate the peak memory too (the processes record memory events, on
    both sides alike; a rise above this many MiB is a regression: `diff` says how).

    Returns the comparison (model.comparing.diff.compare's keys, ``mode`` "interleaved") with
    ``gate``: its folder, processes (the pairs it took), the first look's and the most
    pairs, the budget, each look's answer, why it stopped, threads, steps, the order run,
    wall seconds, notes. gate.json and gate.md are written into the folder.

    Raises:
        DiffInputError: a side is neither a run directory nor a checkout (with a script),
            an ``ops``/``allow`` entry is unknown, or a threshold is NaN, infinite or
            negative.
        GateRunError: a process failed (the runs made so far are kept).
        UntrustedRunError: a run directory names a script or folder outside ``trust``, a
            module, or a variable it may not set; a checkout's script lies outside it
            (nothing has run).
        DiffRefusedError: two run directories of different scripts or arguments, which
            ``allow`` does not accept (nothing has run: interleave.judged_apart).
        ScriptError: a side's script cannot be found or compiled.
        ProfileError: the gate's profile is not valid.
        RunDirError: the gate's folder cannot be written.
    """
    import time

    from .interleave import (DEFAULT_MAX_PROCESSES, SIDES, applied_env, describe,
                             judged_apart, order, resolve_side, run_pairs)
    from ..model.comparing.evidence import Budget
    from ..report.render.diff_render import render_diff
    from ..rundir import new_run_dir, write_json

    check_thresholds(fail_above, min_step_share, fail_above_mib)
    check_allow(allow)
    sides = {name: resolve_side(name, str(given), script, args, module, env or {}, trust,
                                environ)
             for name, given, env in zip(SIDES, (base, new), (base_env, new_env))}
    apart = judged_apart(sides, allow)
    if apart:
        raise DiffRefusedError(terminal(apart))
    prof = with_overrides(as_profile(profile), steps=steps,
                          memory=True if fail_above_mib is not None else None)
    threads_from = "--threads"
    if threads is None:
        recorded = {s.threads for s in sides.values()}
        threads, threads_from = ((recorded.pop(), "recorded by both runs")
                                 if len(recorded) == 1 and None not in recorded
                                 else (None, "a GPU is visible") if gpu_names(environ)
                                 else (1, "no GPU visible: one intra-op thread is steadier"))
    checked = [checked_script(side.target, side.args, side.module, side.cwd)
               for side in sides.values()]
    if on_progress:
        on_progress(describe(sides, threads, threads_from))
    folder = new_run_dir(Path(out) if out else None, f"gate-{checked[-1].label}")
    scripts = dict(zip(sides, checked))

    def run_one(side: Any, run_dir: Path) -> Report:
        result = profiled(scripts[side.name], prof, out=run_dir, timeout=timeout,
                          threads=threads, environ={**environ, **side.env})
        if result.status == "interrupted":     # Ctrl-C: the whole gate stops, as asked
            raise KeyboardInterrupt
        if result.status == "terminated":
            raise Stopped()
        if result.exit_code != 0 or result.status != "ok":
            raise GateRunError(terminal(
                f"the gate's {side.name} process in {run_dir} did not finish cleanly "
                f"(status '{result.status}'), so nothing was compared: "
                f"{result.failure or 'see its report.md'} The runs made so far are kept in "
                f"{folder}."))
        return result.report

    most = max(max_processes or DEFAULT_MAX_PROCESSES, processes)
    looks = Budget(first=processes, most=most)
    started = time.monotonic()
    reports = run_pairs(sides, processes, folder, run_one, on_progress, most=most)
    history: list[Look] = []
    while True:
        pairs = list(zip(reports["base"], reports["new"]))
        result = judge_pairs(pairs, fail_above=fail_above, ops=ops,
                              min_step_share=min_step_share, allow=allow, budget=looks,
                              fail_above_mib=fail_above_mib)
        history.append(_look(result))
        elapsed = time.monotonic() - started
        stopped = stop_reason(result, len(pairs), most, elapsed, budget_s)
        if stopped:
            break
        more = run_pairs(sides, len(pairs) + 1, folder, run_one, on_progress, most=most,
                         first=len(pairs) + 1)
        for side in SIDES:
            reports[side] += more[side]
    k = len(pairs)
    result["a_label"], result["b_label"] = str(base), str(new)
    result["gate"] = {
        "dir": str(folder), "processes": k, "first_look": processes, "max_processes": most,
        "budget_s": budget_s, "looks": history, "stopped": stopped,
        "threads": threads, "steps": steps,
        "order": [f"{side}-{i:02d}" for i, side in order(k)],
        "wall_s": round(time.monotonic() - started, 1),
        "threads_from": threads_from,
        "sides": {name: {"given": s.given, "target": s.target, "args": s.args,
                         "module": s.module, "cwd": str(s.cwd),
                         "env": {k: v for k, (v, _) in applied_env(s, threads).items()},
                         "env_from": {k: f for k, (_, f) in applied_env(s, threads).items()}}
                  for name, s in sides.items()},
        "notes": [note for s in sides.values() for note in s.notes]}
    held_to_types(result, Comparison, "gate.json", copied=("machine",))
    write_json(folder / S.GATE_JSON, result)
    (folder / S.GATE_MD).write_text(render_diff(result, "md") + "\n", encoding="utf-8")
    return result


def rejudge(folder: Union[str, Path], *, fail_above: float = 10.0,
            min_step_share: float = 0.02, ops: Sequence[str] = (),
            allow: Sequence[str] = (), fail_above_mib: Optional[float] = None) -> Comparison:
    """Judge the processes of an earlier gate folder again (other thresholds, other ops):
    its base-NN and new-NN run directories, paired by NN; nothing runs. Returns what
    ``gate`` returns, with ``gate.rejudged`` true; the folder is not written to.

    Raises:
        DiffInputError: not a gate folder (no base-01 and new-01), a pair missing a side,
            an ``ops``/``allow`` entry that is unknown, or a threshold that is NaN,
            infinite or negative.
        DiffRefusedError: a run in it cannot be compared (failed, still running, of another
            shape).
    """
    from ..model.comparing.comparability import SIDES, refusal
    from ..report.document.build import SCHEMA_VERSION

    check_thresholds(fail_above, min_step_share, fail_above_mib)
    path = Path(folder)
    numbers = sorted({int(p.name.split("-")[1]) for p in path.glob("*-[0-9][0-9]")
                      if p.name.split("-")[0] in SIDES and p.is_dir()})
    missing = [f"{side}-{n:02d}" for n in numbers for side in SIDES
               if not (path / f"{side}-{n:02d}").is_dir()]
    if not numbers or missing:
        raise DiffInputError(terminal(f"{path} is not a gate folder nsbridge can judge: "
                                      + (f"it lacks {', '.join(missing)}" if numbers else
                                         "it holds no base-01 and new-01 run directories")
                                      + ". Give the folder `nsbridge gate` wrote (--out)."))
    check_allow(allow)
    pairs = [(read_report(path / f"base-{n:02d}", "base"),
              read_report(path / f"new-{n:02d}", "new")) for n in numbers]
    for n, (a, b) in zip(numbers, pairs):
        why = refusal(a, b, labels=(str(path / f"base-{n:02d}"), str(path / f"new-{n:02d}")),
                      schema_version=SCHEMA_VERSION, allow=allow)
        if why:
            raise DiffRefusedError(terminal(why))
    earlier = _read_gate(path)
    result = judge_pairs(pairs, fail_above=fail_above, ops=ops,
                          min_step_share=min_step_share, allow=allow,
                          budget=_budget_of(earlier), fail_above_mib=fail_above_mib)
    result["a_label"] = earlier.get("a_label") or str(path / "base-NN")
    result["b_label"] = earlier.get("b_label") or str(path / "new-NN")
    result["gate"] = {**(earlier.get("gate") or {}), "dir": str(path),
                      "processes": len(numbers), "rejudged": True}
    return result


def judge_pairs(pairs: list[tuple[Report, Report]], *, fail_above: float,
                 ops: Sequence[str], min_step_share: float, allow: Sequence[str],
                 budget: Optional[Budget] = None,
                 fail_above_mib: Optional[float] = None) -> Comparison:
    """The gate's answer on its pairs of reports: paired from two pairs on (at ``budget``,
    model.comparing.evidence.Budget: one look by default), as `diff` judges two runs with
    one."""
    from ..model.comparing.diff import compare
    from ..model.comparing.evidence import Budget
    from ..model.comparing.paired import compare_pairs

    check_gated_ops(ops, [r for pair in pairs for r in pair])
    if len(pairs) >= 2:
        return compare_pairs(pairs, fail_above=fail_above, ops=ops,
                             min_step_share=min_step_share, allow=allow,
                             budget=budget or Budget(), fail_above_mib=fail_above_mib)
    return compare(*pairs[0], fail_above=fail_above, ops=ops, min_step_share=min_step_share,
                   allow=allow, fail_above_mib=fail_above_mib)


def _look(result: Comparison) -> Look:
    """One look of a growing gate, as gate.json keeps it: the pairs, the answer, the step
    time's change and interval."""
    step = result.get("step") or {}
    return {"pairs": result.get("pairs"), "outcome": result["outcome"],
            "step_change_pct": step.get("change_pct"), "step_ci_pct": step.get("ci_pct")}


def stop_reason(result: Comparison, pairs: int, most: int, elapsed_s: float,
                 budget_s: Optional[float]) -> Optional[str]:
    """Why a growing gate stops after this look (None: run one more pair): it decided
    (a regression, or a pass that leaves no gated op undecided that ``most`` pairs could
    decide: a pass on the step time alone would stop before a slower op had the pairs to
    show it, and an op too noisy for ``most`` pairs would only spend them), more pairs
    cannot make it comparable, it has ``most`` pairs, or the next pair (as long as the
    mean pair so far) would end past ``budget_s``."""
    unsure = set(result.get("inconclusive") or [])
    settles = any(row["op"] in unsure and (row.get("pairs_to_decide") or most + 1) <= most
                  for row in result.get("ops") or [])
    if result["outcome"] == "regression" or (result["outcome"] == "pass" and not settles):
        return "decided"
    if result.get("comparability"):
        return "not comparable"
    if pairs >= most:
        return "max processes"
    if budget_s is not None and elapsed_s + elapsed_s / pairs > budget_s:
        return "budget"
    return None


def _budget_of(earlier: Comparison) -> Budget:
    """The false-alarm budget an earlier gate spent over its looks (one look when its
    gate.json does not say)."""
    from ..model.comparing.evidence import Budget

    gate = earlier.get("gate") or {}
    first, most = gate.get("first_look"), gate.get("max_processes")
    if isinstance(first, int) and isinstance(most, int) and 1 <= first <= most:
        return Budget(first=first, most=most)
    return Budget()


def _read_gate(folder: Path) -> Comparison:
    """The earlier gate's gate.json ({} when there is none).

    Raises:
        DiffInputError: it is not of its declared types (contract.comparison.Comparison).
    """
    if not (folder / S.GATE_JSON).is_file():
        return {}
    try:
        return load_record(readable(folder / S.GATE_JSON), Comparison,
                           lambda value: typed_problem(value, Comparison))
    except RunDirError as exc:
        raise DiffInputError(terminal(str(exc))) from None
