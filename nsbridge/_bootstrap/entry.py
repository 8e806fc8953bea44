"""Child-process entry: run the user's script as `python script.py args` would, profiled.

Usage (by nsbridge only): ``python -m nsbridge._bootstrap.entry CONFIG.json``. The config
names the script (or module), its arguments, the run directory, the profile and the pass:
``torch`` (torch.profiler with the schedule, sync-point records) or ``nvtx`` (NVTX op,
module and step ranges for nsys; no torch.profiler). Whatever happens to the script, the
pass's record (``child.json``, ``nvtx-child.json``, or the config's ``record``) is written into the run directory
with its status, exit code, steps and versions, and a partial trace is kept when one was
being recorded.

In a distributed job (config ``distributed``; the rank comes from the launcher's
environment) every rank writes into its own ``rank-NN/`` folder, ranks left out by
``distributed.ranks`` run unprofiled, and each rank then writes its summary.json there
(nsbridge.job.summary: the map step, in the process that captured the trace).
"""

from __future__ import annotations

import atexit
import json
import os
import platform
import runpy
import signal
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from nsbridge import schema as S
from nsbridge.schema.records import ChildRecord, Environment, RecordError


_BOOTSTRAP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")


class _Terminated(BaseException):
    """Raised in the script's thread when nsbridge stops it (timeout)."""


_SIGTERM_SEEN = False   # set by the handler: whatever the signal's exception became


def _on_sigterm(signum: int, frame: Any) -> None:
    global _SIGTERM_SEEN
    _SIGTERM_SEEN = True
    _end_family_if_orphaned(settle_s=REPARENT_S)
    raise _Terminated()


# how long a SIGTERM waits to see whether nsbridge died: the kernel sends PR_SET_PDEATHSIG
# while it moves the process's threads to their new parent one by one, so the thread that
# runs the handler may still read the old parent for a moment (seen beside two CPU hogs)
REPARENT_S = 0.5


def _orphaned(settle_s: float = 0.0) -> bool:
    """Whether the nsbridge that started this process is gone (waiting up to ``settle_s``
    for the kernel to say so)."""
    parent = os.environ.get("NSBRIDGE_PARENT_PID")
    if not parent:
        return False
    deadline = time.monotonic() + settle_s
    while os.getppid() == int(parent):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _end_family_if_orphaned(settle_s: float = 0.0) -> None:
    """nsbridge died (the SIGTERM came from PR_SET_PDEATHSIG): end what the script started
    now, as nsbridge would have once this process ended. Also run at this process's exit
    (atexit), whatever ended it: a SIGTERM that came before the kernel had reparented the
    thread that handled it, or a write to nsbridge's closed pipes, must not leave the
    script's children behind."""
    if _orphaned(settle_s):
        from nsbridge.collect.process_tree import descendants, end_leftovers

        end_leftovers(descendants(os.getpid()), grace=1.0)


def _on_sigterm_at_start(signum: int, frame: Any) -> None:
    """SIGTERM before the script runs (importing torch, starting the profiler): end at
    once with one line. Raising here could unwind through torch's C++ (a Python callback
    the profiler's start runs), which aborts the process with a C++ message."""
    _end_family_if_orphaned(settle_s=REPARENT_S)   # os._exit runs no atexit handler
    try:
        sys.stderr.write("nsbridge: SIGTERM stopped the profiled process while it started "
                         "(torch, the profiler): it wrote no record.\n")
        sys.stderr.flush()
    except (OSError, ValueError):    # nsbridge, which read it, is gone
        pass
    os._exit(S.TERMINATED)


def _die_with_parent() -> None:
    """Linux: get SIGTERM when the nsbridge that started this process dies, even by
    SIGKILL, so no profiled script is left running behind it. Armed only when nsbridge is
    the direct parent (not nsys, ncu or torchrun, whose own exits must not end the script)."""
    parent = os.environ.get("NSBRIDGE_PARENT_PID")
    if not parent or int(parent) != os.getppid():
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):   # nsbridge died before the signal was armed
        os.kill(os.getpid(), signal.SIGTERM)


def _restore_umask() -> None:
    """Put back the user's umask that nsbridge passed on (nsys starts its target with umask
    0, so the script's files and nsbridge's own would otherwise be world-writable)."""
    mask = os.environ.pop("NSBRIDGE_UMASK", None)
    if mask:
        os.umask(int(mask, 8))


def main(config_path: str) -> int:
    _die_with_parent()
    atexit.register(_end_family_if_orphaned)
    _restore_umask()
    config = json.loads(Path(config_path).read_text(encoding="utf-8"))
    _set_path0(config)   # before torch: the current folder must not shadow its imports
    run_dir = Path(config["run_dir"])
    started = time.perf_counter()
    result: ChildRecord = {"status": "ok", "exit_code": 0, "error": None}
    signal.signal(signal.SIGTERM, _on_sigterm_at_start)

    import torch  # noqa: F401  (imported after the signal handler so a timeout is clean)

    if config.get("threads"):   # triage --threads N: before the script sizes anything
        torch.set_num_threads(int(config["threads"]))

    from nsbridge.errors import RunDirError
    from nsbridge.rundir import write_json

    pass_name = config.get("pass", "torch")
    rank = _rank(config)
    if rank is not None:
        run_dir = run_dir / rank.dir_name
        run_dir.mkdir(exist_ok=True)
        wanted = config["distributed"].get("ranks")
        if wanted is not None and rank.rank not in wanted:
            pass_name = "plain"
    instruments = _instruments(pass_name, config, run_dir)
    steps = instruments["steps"]
    for name in ("syncs", "nvtx", "session", "allocator"):
        if name in instruments:
            getattr(instruments[name], "install" if name in ("syncs", "nvtx") else "start")()
    steps.install()
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)   # from here on the script is stopped
        _run_target(config)
    except SystemExit as exc:
        result.update(_exit_status(exc.code))
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not stop cleanup
        result.update({"status": "interrupted", "exit_code": S.INTERRUPTED,
                       "error": {"type": "KeyboardInterrupt",
                                 "message": "interrupted (Ctrl-C)"}})
    except _Terminated:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        result.update(_terminated("the script"))
    except BaseException as exc:  # the script's own failure: report it, keep the trace
        _print_script_traceback(exc)
        result.update({"status": "failed", "exit_code": 1, "error": _script_error(exc)})
    finally:
        error = result.get("error")
        if error:
            error["at"] = time.time()   # when it ended: the first to fail is the cause
        steps.uninstall()
        if "syncs" in instruments:
            instruments["syncs"].uninstall()
        if "nvtx" in instruments:
            instruments["nvtx"].uninstall()
    result.update({"step_source": steps.source, "step_count": steps.count})
    if "session" in instruments:
        session = instruments["session"]
        try:
            note = session.finish()
        except _Terminated:           # stopped while writing the trace: it is incomplete
            note = "the profiler was stopped by SIGTERM while it wrote its trace"
            result.update(_terminated("the profiler writing its trace"))
        except BaseException as exc:  # a failing export must not lose child.json
            note = f"the profiler could not write its trace: {type(exc).__name__}: {exc}"
        if "allocator" in instruments:
            instruments["allocator"].finish()
        if session.write_error and result["status"] == "ok":
            result.update({"status": "failed", "exit_code": 1,
                           "error": {"type": "WriteError", "message": session.write_error}})
        result.update({"mode": session.mode, "steps": session.steps.records(),
                       "steps_seen": len(session.steps),
                       "steps_sampling": session.steps.sampling(), "traces": session.traces,
                       "table": session.table, "schedule_note": note,
                       "use_cuda": session.use_cuda, "syncs": instruments["syncs"].records(),
                       "machine": session.machine, "window": session.window,
                       "compile_wait_s": round(session.compile_wait_s, 3)})
    if "nvtx" in instruments:
        result["nvtx"] = instruments["nvtx"].summary()
    sys.stdout.flush()
    sys.stderr.flush()
    result.update({"env": _environment(), "wall_s": round(time.perf_counter() - started, 3)})
    try:
        write_json(run_dir / (config.get("record")
                              or (S.NVTX_CHILD_JSON if pass_name == "nvtx" else S.CHILD_JSON)),
                   result)
    except RunDirError as exc:   # nowhere to write the record: say why, in one paragraph
        print(f"nsbridge: {exc}", file=sys.stderr)
        return S.RECORD_NOT_WRITTEN
    if rank is not None:
        _write_rank_summary(run_dir, config, rank, result)
    # the record is written: a SIGTERM from now on (a --timeout during torch's teardown)
    # ends the process quietly, and the record says how the script ended
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return int(result["exit_code"])


def _terminated(what: str) -> ChildRecord:
    """The record of a process stopped by SIGTERM (128 + 15, as a shell reports it)."""
    return {"status": "terminated", "exit_code": S.TERMINATED,
            "error": {"type": "Terminated", "message": f"SIGTERM stopped {what} (nsbridge's "
                      "--timeout, or a launcher or scheduler ending the job)"}}


def _rank(config: dict[str, Any]) -> Any:
    """This process's rank in a distributed run (None otherwise)."""
    if config.get("distributed") is None:
        return None
    from nsbridge.job.identity import detect

    return detect()


def _write_rank_summary(rank_dir: Path, config: dict[str, Any], rank: Any,
                        result: ChildRecord) -> None:
    """The map step, once the script is done: this rank's trace analysed here."""
    from nsbridge.job.summary import write_summary
    from nsbridge.profiles import Analysis

    traces = result.get("traces") or []
    try:
        write_summary(rank_dir, trace=rank_dir / traces[0] if traces else None,
                      thresholds=Analysis(**config["analysis"]), rank=rank.rank,
                      host=rank.host, world_size=rank.world_size, status=result["status"],
                      exit_code=int(result["exit_code"]), error=result.get("error"),
                      steps=result.get("steps") or [])
    except BaseException as exc:  # a failing (or stopped) analysis must not hide the status
        from nsbridge.rundir import write_json

        write_json(rank_dir / S.SUMMARY_JSON, {
            "rank": rank.rank, "host": rank.host, "world_size": rank.world_size,
            "status": result["status"], "exit_code": int(result["exit_code"]),
            "profiled": False, "trace": None,
            "error": {"type": type(exc).__name__, "message": f"summary failed: {exc}"}})


def _instruments(pass_name: str, config: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """The objects a pass installs, keyed by role; 'steps' drives the others."""
    from nsbridge._bootstrap.steps import StepDetector

    if pass_name == "plain":   # a rank left out of --ranks: the script alone
        return {"steps": StepDetector(lambda: None)}
    if pass_name == "nvtx":
        from nsbridge._bootstrap.nvtx_ranges import NvtxInstrumentation

        nvtx_ranges = NvtxInstrumentation()
        return {"nvtx": nvtx_ranges, "steps": StepDetector(nvtx_ranges.boundary)}
    from nsbridge._bootstrap.session import ProfilerSession
    from nsbridge._bootstrap.syncs import SyncRecorder

    session = ProfilerSession(config["capture"], config["schedule"], run_dir)
    made: dict[str, Any] = {"session": session, "syncs": SyncRecorder(session.current_step),
                            "steps": StepDetector(session.boundary)}
    if session.use_cuda:   # the allocator's snapshot at an out-of-memory (and its history)
        from nsbridge._bootstrap.allocator import AllocatorRecord

        capture = config["capture"]
        made["allocator"] = AllocatorRecord(run_dir, history=bool(
            capture["with_stack"] and capture["profile_memory"]))
    return made


def _set_path0(config: dict[str, Any]) -> None:
    """sys.path[0] as `python script.py` (the script's folder) or `python -m module` (the
    current folder) sets it. nsbridge's own modules are found through its package, already
    imported, so they need no entry there."""
    script = config.get("script")
    sys.path[0] = os.path.dirname(os.path.abspath(script)) if script else os.getcwd()


def _run_target(config: dict[str, Any]) -> None:
    args = list(config["args"])
    if config.get("module"):
        sys.argv = [config["module"], *args]
        runpy.run_module(config["module"], run_name="__main__", alter_sys=True)
    else:
        sys.argv = [config["script"], *args]
        runpy.run_path(os.path.abspath(config["script"]), run_name="__main__")


def _print_script_traceback(exc: BaseException) -> None:
    """The script's traceback as python would print it: the frames of nsbridge's bootstrap
    and runpy that lead into the script are left out (those below it, in libraries or in
    nsbridge's hooks, are kept)."""
    tb = exc.__traceback__
    while tb is not None and _is_runner(tb.tb_frame):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def _is_runner(frame: Any) -> bool:
    """A frame of the code that starts the script: this package's or runpy's."""
    return (frame.f_code.co_filename.startswith(_BOOTSTRAP_DIR)
            or frame.f_globals.get("__name__") == "runpy")


def _exit_status(code: Any) -> ChildRecord:
    if code is None or code == 0:
        return {"status": "ok", "exit_code": 0}
    if isinstance(code, int):
        return {"status": "failed", "exit_code": code,
                "error": {"type": "SystemExit", "message": f"sys.exit({code})"}}
    print(code, file=sys.stderr)
    return {"status": "failed", "exit_code": 1,
            "error": {"type": "SystemExit", "message": str(code)}}


def _script_error(exc: BaseException) -> RecordError:
    """The script's failure, where it happened: a syntax error in a file it imports at that
    file's line; any other exception, a SyntaxError raised by code parsing text at run time
    (``ast.literal_eval`` of an argument, ``eval``) included, at the innermost line of the
    user's own code."""
    if isinstance(exc, SyntaxError) and exc.filename and not exc.filename.startswith("<"):
        return {"type": "SyntaxError", "message": str(exc.msg), "file": exc.filename,
                "line": exc.lineno}
    file, line = _innermost_user_frame(exc)
    return {"type": type(exc).__name__, "message": str(exc), "file": file, "line": line}


def _innermost_user_frame(exc: BaseException) -> tuple[str | None, int | None]:
    """The failing line in the script's own code: the innermost frame outside nsbridge,
    runpy and installed libraries (torch included), else the innermost outside nsbridge."""
    entries = traceback.extract_tb(exc.__traceback__)
    here = os.path.dirname(os.path.dirname(__file__))
    user = [e for e in entries if not e.filename.startswith(here) and "runpy" not in e.filename]
    script = [e for e in user if not _in_library(e.filename)]
    chosen = script or user
    if not chosen:
        return None, None
    return chosen[-1].filename, chosen[-1].lineno


def _in_library(path: str) -> bool:
    """A file of an installed package or the standard library."""
    import sysconfig

    roots = {os.path.join(sysconfig.get_paths()[k], "") for k in ("stdlib", "purelib", "platlib")}
    return path.startswith(tuple(roots)) or any(
        part in ("site-packages", "dist-packages") for part in path.split(os.sep))


def _environment() -> Environment:
    import torch

    env: Environment = {
        "python": platform.python_version(), "torch": torch.__version__,
        "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
        "host": socket.gethostname(), "platform": platform.platform(), "gpus": [],
    }
    if torch.cuda.is_available():
        env["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    # the math settings the script ended with: whether fp32 matmuls and convolutions may
    # run on Tensor Cores as TF32 (model/device/tensor_cores.py)
    env["math"] = {"matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
                   "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
                   "float32_matmul_precision": torch.get_float32_matmul_precision()}
    return env


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1]))
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException:   # SIGTERM outside the script (importing torch, starting the
        if not _SIGTERM_SEEN:  # profiler), whatever a library turned it into; else a bug
            raise
        print("nsbridge: SIGTERM stopped the profiled process outside the script (starting "
              "torch or the profiler): it wrote no record.", file=sys.stderr)
        sys.exit(S.TERMINATED)
