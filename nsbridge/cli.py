"""The `nsbridge` command: click only; each command is a call into nsbridge.api.

Exit codes: 0 ok; the script's own non-zero status when it fails; 1 an nsbridge error
(bad input, with a one-paragraph message); 2 a usage error; 3 an unexpected crash;
124 --timeout; 130 Ctrl-C; 143 SIGTERM. `gate` and `diff`: 0 no regression, 1 regression,
4 inconclusive, 5 refused (runs it cannot compare, a gate process that failed), 2 bad input.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import traceback
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, NoReturn, Optional, overload

import click

from . import __version__
from ._blas import import_numpy_on_one_thread
from .guard import limits
from ._options import (DEEP_PROFILE, FORMAT, GATE_OPTIONS, OUT, PROFILE, RUN_PROFILE,
                       SCRIPT_COMMAND, THREADS, TIMEOUT, TOP, TRUST, WINDOW, Bounded,
                       ScriptCommand, script_options)
from .errors import NsbridgeError, Stopped

if TYPE_CHECKING:
    from .api import Comparison

TRIAGE_EPILOG = """\b
Examples:
  nsbridge triage examples/train_cnn.py -- --epochs 1
  nsbridge triage --profile quick train.py --batch-size 64
  nsbridge triage -m mypkg.train -- --config cfg.yaml
  nsbridge triage --out runs/baseline --timeout 600 train.py
  nsbridge triage --runs 5 train.py        (5 processes pooled: spreads between runs too)
  nsbridge triage --threads 1 train.py     (one intra-op thread: steady on a busy machine)
  nsbridge triage --nsys train.py          (adds the Nsight Systems timeline)
  nsbridge triage --deep=3 train.py        (adds Nsight Compute on the 3 hottest ops)
  nsbridge triage --nproc-per-node 4 --nsys --deep=3 train.py   (every pass on 4 ranks)
  torchrun --nproc-per-node 4 -m nsbridge triage --out runs/ddp train.py
"""

DEEP_EPILOG = """\b
Examples:
  nsbridge deep --kernel aten::addmm                  (ops of the latest run)
  nsbridge deep --top 5 --run nsbridge-runs/20261126-120000-train_cnn
  nsbridge deep --kernel aten::mm --kernel aten::convolution_backward train.py -- --epochs 1
  nsbridge deep --profile deep-tensorcore --top 3
  nsbridge deep --top 3 --run runs/ddp --ranks 5        (a run of several ranks: ncu on rank 5)
  srun --ntasks 16 nsbridge deep --top 3 --run-dir /shared/runs/job
"""

TIMELINE_EPILOG = """\b
Examples:
  nsbridge timeline examples/train_cnn.py -- --epochs 1
  nsbridge timeline --run nsbridge-runs/20261125-120000-train_cnn   (add to a triage run)
"""

ANALYZE_EPILOG = """\b
Examples:
  nsbridge analyze trace.json.gz
  nsbridge analyze traces/            (every rank's trace in the folder)
  nsbridge analyze rank0.json.gz rank1.json.gz --out runs/job42
  nsbridge analyze --jobs 8 traces/   (8 processes, one rank's trace each at a time)
  nsbridge analyze --cluster tcp://scheduler:8786 /shared/traces/   (on a Dask cluster)
  nsbridge analyze oom.pickle        (a CUDA allocator snapshot: what held memory, the OOM)
  nsbridge analyze capture.sqlite          (an nsys SQLite export; .nsys-rep with nsys installed)
  nsbridge analyze trace.json.gz kernels.ncu-rep   (ncu numbers in the op rows; CSV exports too)
"""


def command() -> NoReturn:
    """The ``nsbridge`` console command: ``main``, then a quick exit. Python's own exit
    frees every object and module one by one: 0.07-0.1 s with pandas loaded, waited for
    after the report is written. Once the exit handlers have run (child processes reaped,
    logs flushed) the process can end at once. ``main`` stays a plain click group, for
    tests and for embedding."""
    try:
        main()
        code: Any = 0
    except SystemExit as exc:
        code = exc.code
    _exit_now(code)


def _exit_now(code: Any) -> NoReturn:
    """Exit with ``code`` as sys.exit would, without tearing the interpreter down; the
    normal exit where that could differ: a message for a code, threads still running
    (Python joins them), or output that cannot be flushed."""
    status = 0 if code is None else code
    if not isinstance(status, int) or threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)
    os._exit(status & 0xFF)


def _guard(fn: Callable[[], Any], answer_as: Optional[str] = None) -> Any:
    """Run a command body; turn nsbridge errors into a message and an exit code (and, for
    ``answer_as`` COMMAND under --format json, an error answer on stdout)."""
    try:
        return fn()
    except NsbridgeError as exc:
        _error_answer(answer_as, exc)
        click.echo(f"nsbridge: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("nsbridge: interrupted", err=True)
        sys.exit(130)
    except Stopped:
        click.echo("nsbridge: stopped by SIGTERM (the profiled process was ended too)", err=True)
        sys.exit(143)
    except Exception as exc:  # a bug in nsbridge: say so, show where
        _error_answer(answer_as, exc)
        click.echo("nsbridge: unexpected error (a bug in nsbridge; please report it with "
                   "the traceback below):\n" + traceback.format_exc(), err=True)
        sys.exit(3)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nsbridge")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
@click.option("-v", "--verbose", is_flag=True,
              help="Also pass on the profiler's own noise from the script's stderr (USDT "
                   "lines, the CPU allocator warning); without -v it goes only to "
                   "profiler-noise.log in the run directory.")
@click.option("--confine", "confine", multiple=True, hidden=True, metavar="FOLDER",
              help="Read and run only under these folders (nsbridge.guard.confine): how the MCP "
                   "server starts each command.")
def main(quiet: bool, verbose: bool, confine: tuple[str, ...]) -> None:
    """nsbridge: torch.profiler triage, Nsight timelines and kernel deep dives in one report."""
    from . import progress
    from .guard.confine import confined_to
    from .errors import stop_on_sigterm

    if confine:
        click.get_current_context().with_resource(confined_to(confine))
    progress.enable(not quiet)
    import_numpy_on_one_thread()   # before any command imports it (not for --help)
    if verbose:
        from .api import show_profiler_noise
        show_profiler_noise()
    stop_on_sigterm()


def _error_answer(command: Optional[str], exc: BaseException) -> None:
    if command is not None:
        from .agent.answer import dumps, error_answer

        click.echo(dumps(error_answer(command, exc)))


def _answer(command: str, fmt: str, top: Optional[int], call: Callable[[], Any]) -> None:
    """Run a command that makes a run: its summary, or with --format json its answer alone
    on stdout (the script's output, and any plan, go to stderr meanwhile), its tables cut
    to ``top`` rows (None: the run's ``analysis.top_ops``, as its report.md)."""
    if fmt != "json":
        _guard(lambda: _finish(call(), top))
        return
    from .agent.answer import dumps, run_answer

    def body() -> None:
        with _stdout_to_stderr():
            result = call()
        click.echo(dumps(run_answer(command, result, _rows(result, top))))
        if result.exit_code != 0:
            _say_failure(result)
            sys.exit(result.exit_code)

    _guard(body, command)


@main.command(cls=ScriptCommand, epilog=TRIAGE_EPILOG, context_settings=SCRIPT_COMMAND)
@click.option("--nsys", is_flag=True, help="Also run the Nsight Systems timeline pass.")
@click.option("--deep", "deep_top", is_flag=False, flag_value="default", default=None,
              metavar="[=N]", help="Also run Nsight Compute on the N hottest ops (default: "
                                   "the deep profile's top).")
@DEEP_PROFILE
@click.option("--nproc-per-node", type=Bounded(limits.NPROC_PER_NODE), metavar="N",
              help="Start N ranks through torch.distributed.run (torchrun), each profiled.")
@click.option("--nnodes", metavar="M", help="torchrun --nnodes (several machines).")
@click.option("--node-rank", type=Bounded(limits.NODE_RANK), help="torchrun --node-rank.")
@click.option("--rdzv-endpoint", metavar="HOST:PORT", help="torchrun --rdzv-endpoint.")
@click.option("--ranks", "ranks", metavar="0,3",
              help="Profile only these ranks under torch.profiler and nsys (the others run "
                   "unprofiled).")
@click.option("--deep-ranks", "deep_ranks", metavar="1,5",
              help="Run Nsight Compute on these ranks (default: the median and the slowest).")
@click.option("--runs", type=Bounded(limits.RUNS), default=1, show_default=True, metavar="N",
              help="Run the script N times and pool the steps: the spread between processes, "
                   "the largest on a busy machine, then shows in every interval.")
@THREADS
@click.option("--steps", type=Bounded(limits.STEPS), metavar="N",
              help="Measure N steps (the profile's schedule.active; the script must run "
                   "about N+3).")
@WINDOW
@FORMAT
@script_options
def triage(module: Optional[str], profile: str, out: Optional[str], timeout: Optional[float],
           top: Optional[int], nsys: bool, deep_top: Optional[str], deep_profile: str,
           nproc_per_node: Optional[int], nnodes: Optional[str], node_rank: Optional[int],
           rdzv_endpoint: Optional[str], ranks: Optional[str], deep_ranks: Optional[str],
           runs: int, threads: Optional[int], steps: Optional[int], window: str, fmt: str,
           target: Optional[str], script_args: tuple[str, ...]) -> None:
    """Profile SCRIPT (or -m MODULE) with torch.profiler and say what bounds it.

    Arguments after the script (or after --) go to the script. Under torchrun, srun or
    mpirun (or with --nproc-per-node) every rank is profiled into one run directory and
    rank 0 merges the cross-rank report.
    """
    from .api import triage as run_triage

    deep_n, target, script_args = _split_deep(deep_top, target, script_args)
    name, args = _target(module, target, script_args, required=True)
    chosen = _rank_list(ranks, "--ranks")
    for_deep = _rank_list(deep_ranks, "--deep-ranks")
    _answer("triage", fmt, top, lambda: run_triage(
        name, args, module=bool(module), profile=profile, out=out, timeout=timeout, nsys=nsys,
        deep_top=deep_n, deep_profile=deep_profile, on_plan=_echo_plan,
        nproc_per_node=nproc_per_node, nnodes=nnodes, node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint, ranks=chosen, deep_ranks=for_deep, runs=runs,
        window=window, threads=threads, steps=steps, top=top))


def _rank_list(text: Optional[str], option: str) -> Optional[list[int]]:
    if not text:
        return None
    try:
        return sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of rank numbers "
                                 "(like 0,3)", param_hint=option) from None


@main.command(cls=ScriptCommand, epilog=DEEP_EPILOG, context_settings=SCRIPT_COMMAND)
@click.option("--kernel", "kernels", multiple=True, metavar="OP",
              help="An op whose kernels to profile (as the report spells it); repeatable.")
@click.option("--top", "deep_n", type=Bounded(limits.DEEP_TOP),
              help="Profile the N ops with the most device time.")
@click.option("--run", "--run-dir", "run", type=click.Path(),
              help="The run to add to (default: the latest). Under torchrun spell it "
                   "--run-dir: torchrun's parser takes --run for its own --run-path.")
@click.option("-m", "module", metavar="MODULE", help="Run a module, like python -m MODULE.")
@click.option("--profile", "profile", default="deep", show_default=True,
              help="Deep profile (deep, deep-tensorcore, deep-memory) or a YAML file.")
@OUT
@TIMEOUT(help="Stop ncu after SECONDS (what it wrote is kept).")
@click.option("--ranks", "ranks", metavar="1,5",
              help="On a run of several ranks: run ncu on these (default: the median and "
                   "the slowest rank).")
@THREADS
@TRUST
@FORMAT
@click.argument("target", required=False)
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def deep(kernels: tuple[str, ...], deep_n: Optional[int], run: Optional[str],
         module: Optional[str], profile: str, out: Optional[str], timeout: Optional[float],
         ranks: Optional[str], threads: Optional[int], trust: tuple[str, ...], fmt: str,
         target: Optional[str], script_args: tuple[str, ...]) -> None:
    """Nsight Compute on the kernels of chosen ops, merged into the run's report.

    Ops come from --kernel or --top N; the run from --run, else a triage of SCRIPT made
    first, else the latest run (whose script runs again only from the current folder or
    a --trust DIR). What runs, and the plan, are printed before ncu starts.
    """
    from .api import deep as run_deep

    name, args = _target(module, target, script_args, required=False)
    chosen = _rank_list(ranks, "--ranks")
    _answer("deep", fmt, 10, lambda: run_deep(name, args, kernels=kernels, top=deep_n, run=run,
                                              module=bool(module), profile=profile, out=out,
                                              timeout=timeout, on_plan=_echo_plan,
                                              ranks=chosen, threads=threads,
                                              trust=[os.getcwd(), *trust]))


@main.command(cls=ScriptCommand, epilog=TIMELINE_EPILOG, context_settings=SCRIPT_COMMAND)
@click.option("--run", "--run-dir", "run", type=click.Path(),
              help="Add the timeline to this triage run (--run-dir under torchrun): its "
                   "script runs again with the threads, variables and profile it recorded.")
@THREADS
@TRUST
@FORMAT
@script_options(profile=RUN_PROFILE)
def timeline(module: Optional[str], profile: Optional[str], out: Optional[str],
             run: Optional[str], threads: Optional[int], trust: tuple[str, ...], fmt: str,
             timeout: Optional[float], top: Optional[int], target: Optional[str],
             script_args: tuple[str, ...]) -> None:
    """Run SCRIPT under Nsight Systems with NVTX op ranges; join kernels to ops."""
    from .api import timeline as run_timeline

    name, args = _target(module, target, script_args, required=run is None)
    _answer("timeline", fmt, top, lambda: run_timeline(
        name, args, module=bool(module), profile=profile, out=out, run=run, timeout=timeout,
        threads=threads, trust=[os.getcwd(), *trust], on_plan=_echo_plan, top=top))


@main.command()
@FORMAT
def doctor(fmt: str) -> None:
    """Check torch, CUDA, GPU, nsys, ncu, counter permissions and an NVTX round trip."""
    from .api import doctor as run_checks

    def body() -> None:
        checks = run_checks()
        if fmt == "json":
            from .agent.answer import doctor_answer, dumps

            answer = doctor_answer(checks)
            click.echo(dumps(answer))
            sys.exit(answer["exit_code"])
        for check in checks:
            click.echo(f"{check.level:<4} {check.name}: {check.detail}"
                       + (f"\n     fix: {check.fix}" if check.fix else ""))
        if any(c.level == "FAIL" for c in checks):
            sys.exit(1)

    _guard(body, "doctor" if fmt == "json" else None)


@main.command()
@TOP
@FORMAT
@click.argument("run_dir", type=click.Path())
def show(top: Optional[int], fmt: str, run_dir: str) -> None:
    """Print a run's summary again (nsbridge.load), or with --format json its answer."""
    from .api import load

    _answer("show", fmt, top, lambda: load(run_dir))


@overload
def _target(module: Optional[str], target: Optional[str], script_args: tuple[str, ...],
            required: Literal[True]) -> tuple[str, list[str]]: ...
@overload
def _target(module: Optional[str], target: Optional[str], script_args: tuple[str, ...],
            required: bool) -> tuple[Optional[str], list[str]]: ...
def _target(module: Optional[str], target: Optional[str], script_args: tuple[str, ...],
            required: bool) -> tuple[Optional[str], list[str]]:
    if module and target is not None:
        script_args = (target, *script_args)
    if required and not module and target is None:
        raise click.UsageError("give a script to profile (or -m MODULE)")
    args = [a for i, a in enumerate(script_args) if not (i == 0 and a == "--")]
    return module or target, args


def _rows(result: Any, top: Optional[int]) -> int:
    """``top``, else the rows the run's profile chose (``analysis.top_ops``)."""
    from .profiles import summary_rows

    if top is not None:
        return top
    try:
        return summary_rows(result.manifest)
    except (OSError, ValueError):    # a rank's result without a manifest of its own
        return summary_rows({})


def _finish(result: Any, top: Optional[int]) -> None:
    from .report.render.terminal import terminal_summary

    click.echo(terminal_summary(result.report, str(result.run_dir), top=_rows(result, top)))
    if result.exit_code != 0:
        _say_failure(result)
        sys.exit(result.exit_code)


def _say_failure(result: Any) -> None:
    """The run's failure paragraph on stderr, and, when the script stopped on a usage
    error with options of this command after it, that they went to the script."""
    click.echo(f"nsbridge: error: {result.failure}", err=True)
    misplaced = _options_given_to_script(result)
    if misplaced:
        ctx = click.get_current_context()
        them = "them" if len(misplaced) > 1 else "it"
        click.echo(f"nsbridge: hint: {', '.join(misplaced)} came after the script, so the "
                   f"script got {them} (what follows the script is the script's); give "
                   f"nsbridge's options before it: {ctx.command_path} {misplaced[0]} ... "
                   "SCRIPT [ARGS]", err=True)


def _options_given_to_script(result: Any) -> list[str]:
    """Options of the running command that the script received, when the script then
    exited with status 2 (how argparse and click refuse an argument they do not know)."""
    ctx = click.get_current_context(silent=True)
    error = result.report.get("error") or {}
    if ctx is None or error.get("type") != "SystemExit" or "(2)" not in str(
            error.get("message")):
        return []
    options = {o for p in ctx.command.params for o in getattr(p, "opts", ())
               if o.startswith("--")}
    given = [str(a).split("=", 1)[0] for a in (result.manifest or {}).get("args") or []]
    return [a for a in dict.fromkeys(given) if a in options]


@main.command(epilog=ANALYZE_EPILOG)
@PROFILE
@DEEP_PROFILE
@OUT
@TOP
@WINDOW
@click.option("--jobs", type=Bounded(limits.JOBS), default=None, metavar="N",
              help="Worker processes for several torch traces, each reading one trace at a "
                   "time (default: one per CPU).")
@click.option("--cluster", default=None, metavar="ADDRESS",
              help="Read and analyse the torch traces on the Dask distributed cluster whose "
                   "scheduler is at ADDRESS (tcp://HOST:8786); its workers need nsbridge and "
                   "the traces' paths. This process keeps one small summary per trace.")
@FORMAT
@click.argument("paths", nargs=-1, required=True)
def analyze(profile: str, deep_profile: str, out: Optional[str], top: Optional[int], window: str,
            jobs: Optional[int], cluster: Optional[str], fmt: str,
            paths: tuple[str, ...]) -> None:
    """Analyse files captured elsewhere: torch.profiler traces (.json/.json.gz or folders),
    nsys exports (.sqlite, .nsys-rep), Nsight Compute reports (.ncu-rep, CSV)."""
    from . import read_ahead

    if len(paths) == 1:   # a large trace is read while the analysis modules load
        read_ahead(paths[0])
    from .api import analyze as run_analyze

    _answer("analyze", fmt, top, lambda: run_analyze(paths, profile=profile,
                                                     deep_profile=deep_profile, out=out,
                                                     window=window, jobs=jobs, top=top,
                                                     cluster=cluster))


DIFF_EPILOG = """\b
Exit codes: 0 no regression; 1 a regression (named, with its source), or refused: a run
that failed, is still running, measured nothing, is of another report version or shape, or
the runs profiled different scripts (the reason is printed; no --inconclusive choice makes
this 0); 4 inconclusive: the data cannot decide (why, and what to do, are printed); 2 bad
input; 3 a bug in nsbridge.
\b
Examples:
  nsbridge diff runs/main runs/pr
  nsbridge diff runs/main runs/pr --fail-above 5 --format md > comment.md
  nsbridge diff runs/main runs/pr --fail-above 10 --format json > diff.json   (for scripts)
  nsbridge diff runs/main runs/pr --op aten::mm --op aten::addmm
  nsbridge diff runs/main runs/pr --inconclusive fail          (CI: cannot tell = fail)
  nsbridge diff runs/main runs/pr --allow args,threads         (accept intended differences)
  nsbridge diff runs/old-script runs/new-script --allow-different-target
"""


@main.command(name="diff", epilog=DIFF_EPILOG)
@click.argument("base", type=click.Path())
@click.argument("new", type=click.Path())
@GATE_OPTIONS
def diff_command(base: str, new: str, fail_above: float, min_step_share: float,
                 fail_above_mib: Optional[float], ops: tuple[str, ...], allow: Optional[str], allow_different_target: bool,
                 when_inconclusive: str, fmt: str) -> None:
    """Compare run NEW against run BASE as they were recorded (directories or report.json
    files): work first (calls, shapes, dtypes), then per-op time beyond the run-wide drift,
    judged with 95% intervals; exit 1 on a regression, 4 when the data cannot decide, 5
    when the runs cannot be compared. To measure both sides again, interleaved, use gate."""
    from .api import diff as run_diff

    kinds = _allowed(allow, allow_different_target)
    _guard(lambda: _gate_exit("diff", run_diff(base, new, fail_above=fail_above, ops=ops,
                                               min_step_share=min_step_share / 100.0,
                                               allow=kinds, fail_above_mib=fail_above_mib),
                                      fmt, when_inconclusive),
           "diff" if fmt == "json" else None)


GATE_EPILOG = """\b
BASE and NEW are run directories (each run again as its manifest recorded it: script,
arguments, folder, environment) or checkouts (folders of the code: SCRIPT, a path inside
each, runs there with the checkout first on PYTHONPATH). Exit codes as diff's: 0 no
regression, 1 a regression or a process that failed, 4 inconclusive, 2 bad input.
\b
Examples:
  nsbridge gate runs/main runs/pr
  nsbridge gate ../main . bench/train.py -- --steps 40     (CI: merge-base checkout vs PR)
  nsbridge gate runs/main runs/pr --max-processes 16 --fail-above 5
  nsbridge gate runs/main runs/pr --processes 5 --max-processes 5  (exactly 5 pairs)
  nsbridge gate runs/x runs/x                              (unchanged code: expect PASS)
  nsbridge gate . . train.py --new-env USE_FP64=1          (one setting, two ways)
  nsbridge gate runs/main runs/pr --format md > comment.md
  nsbridge gate --rejudge nsbridge-runs/20261127-120000-gate-train --fail-above 5
"""


@main.command(cls=ScriptCommand, epilog=GATE_EPILOG, context_settings=SCRIPT_COMMAND)
@click.option("--processes", type=Bounded(limits.PROCESSES), default=3, show_default=True,
              metavar="K", help="Processes per side to start with, run in pairs (A B, B A, "
                                "...); one more pair at a time while the answer is "
                                "inconclusive.")
@click.option("--max-processes", "max_processes", type=Bounded(limits.MAX_PROCESSES),
              default=10, show_default=True, metavar="M",
              help="The most processes per side an inconclusive gate grows to (M = K: "
                   "exactly K).")
@click.option("--budget", "budget", type=Bounded(limits.BUDGET_S), default=600.0,
              show_default=True, metavar="SECONDS",
              help="Start no pair that would end past SECONDS from the first process.")
@click.option("--steps", type=Bounded(limits.STEPS), default=25, show_default=True,
              metavar="N", help="Measured steps per process (the script must run about N+3).")
@THREADS
@click.option("-m", "module", is_flag=True,
              help="SCRIPT is a module (python -m SCRIPT), in each checkout.")
@OUT
@TIMEOUT(help="Stop any one process after SECONDS (the gate then fails; its runs are kept).")
@click.option("--base-env", "base_env", multiple=True, metavar="NAME=VALUE",
              help="Set a variable for the base side's processes only (repeatable).")
@click.option("--new-env", "new_env", multiple=True, metavar="NAME=VALUE",
              help="Set a variable for the new side's processes only (repeatable).")
@click.option("--rejudge", "rejudge", type=click.Path(), metavar="GATE_DIR",
              help="Judge an earlier gate's processes again (other --fail-above, --op, ...): "
                   "nothing runs; BASE and NEW are not given.")
@TRUST
@GATE_OPTIONS
@click.argument("base", required=False)
@click.argument("new", required=False)
@click.argument("script", required=False)
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def gate(processes: int, max_processes: int, budget: float, steps: int,
         threads: Optional[int], module: bool, out: Optional[str],
         timeout: Optional[float], base_env: tuple[str, ...], new_env: tuple[str, ...],
         rejudge: Optional[str], trust: tuple[str, ...], fail_above: float,
         min_step_share: float, fail_above_mib: Optional[float],
         ops: tuple[str, ...], allow: Optional[str], allow_different_target: bool,
         when_inconclusive: str, fmt: str, base: Optional[str], new: Optional[str],
         script: Optional[str], script_args: tuple[str, ...]) -> None:
    """Measure BASE and NEW again, interleaved in one session, and gate on paired changes:
    unchanged code passes, the same work made slower or different work is caught, and
    pairs are added while the answer is inconclusive (up to --max-processes, within
    --budget), with unchanged code called a regression in at most 1% of gates; still
    "inconclusive" says how many more processes would settle it. Exit 0 pass, 1
    regression, 4 inconclusive, 5 refused (a process failed, runs it cannot compare, or a
    run directory whose script lies outside the current folder and every --trust DIR).
    What each side runs is printed first."""
    from .api import gate as run_gate
    from .api import rejudge as run_rejudge

    kinds = _allowed(allow, allow_different_target)
    args = [a for i, a in enumerate(script_args) if not (i == 0 and a == "--")]
    if script == "--":
        script, args = (args[0], args[1:]) if args else (None, [])
    if rejudge is not None:
        if base is not None:
            raise click.UsageError("--rejudge judges an earlier gate folder: give no BASE or NEW")
        _guard(lambda: _gate_exit("gate", run_rejudge(rejudge, fail_above=fail_above,
                                                      ops=ops, allow=kinds,
                                                      min_step_share=min_step_share / 100.0,
                                                      fail_above_mib=fail_above_mib),
                                  fmt, when_inconclusive), "gate" if fmt == "json" else None)
        return
    if base is None or new is None:
        raise click.UsageError("give BASE and NEW: run directories, or checkouts and SCRIPT")

    def body() -> None:
        with _stdout_to_stderr():   # the scripts' own output: stdout holds the answer only
            result = run_gate(base, new, script, args, module=module, processes=processes,
                              max_processes=max_processes, budget_s=budget, threads=threads, steps=steps, fail_above=fail_above, ops=ops,
                              min_step_share=min_step_share / 100.0, allow=kinds, out=out,
                              timeout=timeout, base_env=_env_pairs(base_env, "--base-env"),
                              new_env=_env_pairs(new_env, "--new-env"),
                              on_progress=_echo_plan, trust=[os.getcwd(), *trust],
                              fail_above_mib=fail_above_mib)
        _gate_exit("gate", result, fmt, when_inconclusive)

    _guard(body, "gate" if fmt == "json" else None)


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 pointed at stderr for a while (the processes started meanwhile
    inherit it), then back."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _gate_exit(command: str, result: Comparison, fmt: str,
               when_inconclusive: str) -> None:
    """Print a comparison and exit with its code (4 mapped by --inconclusive); as json, the
    comparison with the answer's head (agent/answer.py) in front."""
    from .report.render.diff_render import render_diff

    code = result["exit_code"]
    if result["outcome"] == "inconclusive" and when_inconclusive != "exit":
        code = 0 if when_inconclusive == "pass" else 1
    if fmt == "json":
        import json

        from .agent.answer import comparison_answer, dumps

        click.echo(dumps(comparison_answer(command, json.loads(render_diff(result, fmt)),
                                           code)))
    else:
        click.echo(render_diff(result, fmt))
    sys.exit(code)


def _allowed(allow: Optional[str], allow_different_target: bool) -> list[str]:
    kinds = [k.strip() for k in (allow or "").split(",") if k.strip()]
    return kinds + (["target"] if allow_different_target else [])


def _env_pairs(pairs: tuple[str, ...], option: str) -> dict[str, str]:
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint=option)
        env[name] = value
    return env


@main.command(name="mcp")
@click.option("--root", "roots", multiple=True, type=click.Path(exists=True, file_okay=False),
              metavar="FOLDER", help="A folder whose scripts, traces and runs the tools may use "
                                     "(repeatable; default: the current folder).")
def mcp(roots: tuple[str, ...]) -> None:
    """Serve nsbridge's tools to an agent over the Model Context Protocol (stdio): doctor,
    triage, analyze, deep, diff, gate, and queries over a run (top_ops, op, sync_points,
    memory, ranks). Needs the MCP SDK, nsbridge's `agent` extra: pip install 'mcp>=2.3,<3'."""
    def body() -> None:
        try:
            from .agent.mcp_server import serve
        except ImportError as exc:
            raise click.ClickException(
                f"nsbridge mcp needs the MCP SDK ({exc}): pip install 'mcp>=2.3,<3' (nsbridge's agent extra)") from None
        serve(list(roots) or [os.getcwd()])

    _guard(body)


@main.command(name="agent-skill")
def agent_skill() -> None:
    """Print the skill file that teaches an agent nsbridge's loop (doctor, triage, timeline,
    deep, gate) and its stop rules; the MCP server gives it to clients too."""
    from .agent.skill import skill_text

    click.echo(skill_text(), nl=False)


@main.command(name="make-targets")
def make_targets() -> None:
    """Print nsbridge's Make targets (profile-triage, profile-timeline, profile-deep,
    perf-gate): nsbridge make-targets > nsbridge.mk, then `include nsbridge.mk`."""
    from importlib.resources import files

    click.echo(files("nsbridge").joinpath("make/nsbridge.mk").read_text(encoding="utf-8"),
               nl=False)


def _split_deep(value: Optional[str], target: Optional[str],
                script_args: tuple[str, ...]) -> tuple[Optional[int], Optional[str],
                                                        tuple[str, ...]]:
    """``--deep`` takes an optional number: a bare ``--deep train.py`` gave click the
    script as its value, which goes back in front of the script's arguments."""
    if value is None:
        return None, target, script_args
    if value == "default":
        return 0, target, script_args
    if value.isdigit():
        why = limits.DEEP_TOP.refusal(int(value))
        if why:
            raise click.BadParameter(why, param_hint="--deep")
        return int(value), target, script_args
    rest = (target, *script_args) if target is not None else script_args
    return 0, value, rest


def _echo_plan(text: str) -> None:
    click.echo(text, err=True)
