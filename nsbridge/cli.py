"""The `nsbridge` command: click only; each command is a call into nsbridge.api.

Exit codes: 0 ok; the script's own non-zero status when it fails; 1 an nsbridge error
(bad input, with a one-paragraph message); 2 a usage error; 3 an unexpected crash;
124 --timeout; 130 Ctrl-C.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any, Callable, Optional

import click

from . import __version__
from .errors import NsbridgeError

TRIAGE_EPILOG = """\b
Examples:
  nsbridge triage examples/train_cnn.py -- --epochs 1
  nsbridge triage --profile quick train.py --batch-size 64
  nsbridge triage -m mypkg.train -- --config cfg.yaml
  nsbridge triage --out runs/baseline --timeout 600 train.py
"""

ANALYZE_EPILOG = """\b
Examples:
  nsbridge analyze trace.json.gz
  nsbridge analyze traces/            (every rank's trace in the folder)
  nsbridge analyze rank0.json.gz rank1.json.gz --out runs/job42
"""


def _guard(fn: Callable[[], Any]) -> Any:
    """Run a command body; turn nsbridge errors into a message and an exit code."""
    try:
        return fn()
    except NsbridgeError as exc:
        click.echo(f"nsbridge: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("nsbridge: interrupted", err=True)
        sys.exit(130)
    except Exception:  # a bug in nsbridge: say so, show where
        click.echo("nsbridge: unexpected error (a bug in nsbridge; please report it with "
                   "the traceback below):\n" + traceback.format_exc(), err=True)
        sys.exit(3)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nsbridge")
def main() -> None:
    """nsbridge: torch.profiler triage, Nsight timelines and kernel deep dives in one report."""


@main.command(epilog=TRIAGE_EPILOG,
              context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-m", "module", metavar="MODULE", help="Run a module, like python -m MODULE.")
@click.option("--profile", "profile", default="default", show_default=True,
              help="Built-in profile name (default, quick, memory) or a YAML file.")
@click.option("--out", "out", type=click.Path(), help="Run directory to create (must not exist).")
@click.option("--timeout", type=float, help="Stop the script after SECONDS (partial trace kept).")
@click.option("--top", type=int, default=10, show_default=True, help="Ops in the summary table.")
@click.argument("target", required=False)
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def triage(module: Optional[str], profile: str, out: Optional[str], timeout: Optional[float],
           top: int, target: Optional[str], script_args: tuple[str, ...]) -> None:
    """Profile SCRIPT (or -m MODULE) with torch.profiler and say what bounds it.

    Arguments after the script (or after --) go to the script.
    """
    from .api import triage as run_triage
    from .report.render import terminal_summary

    if module and target is not None:
        script_args = (target, *script_args)
    if not module and target is None:
        raise click.UsageError("give a script to profile (or -m MODULE)")
    args = [a for i, a in enumerate(script_args) if not (i == 0 and a == "--")]

    def body() -> None:
        result = run_triage(module or target, args, module=bool(module), profile=profile,
                            out=out, timeout=timeout)
        click.echo(terminal_summary(result.report, str(result.run_dir), top=top))
        if result.exit_code != 0:
            click.echo(f"nsbridge: error: {_failure_paragraph(result.report, result.run_dir)}",
                       err=True)
            sys.exit(result.exit_code)

    _guard(body)


@main.command(epilog=ANALYZE_EPILOG)
@click.option("--profile", "profile", default="default", show_default=True,
              help="Profile whose analysis thresholds apply.")
@click.option("--out", "out", type=click.Path(), help="Run directory to create (must not exist).")
@click.option("--top", type=int, default=10, show_default=True, help="Ops in the summary table.")
@click.argument("paths", nargs=-1, required=True)
def analyze(profile: str, out: Optional[str], top: int, paths: tuple[str, ...]) -> None:
    """Analyse torch.profiler traces (.json/.json.gz files or folders) captured elsewhere."""
    from .api import analyze as run_analyze
    from .report.render import terminal_summary

    def body() -> None:
        result = run_analyze(paths, profile=profile, out=out)
        click.echo(terminal_summary(result.report, str(result.run_dir), top=top))

    _guard(body)


def _failure_paragraph(report: dict[str, Any], run_dir: Any) -> str:
    status, err = report["status"], report.get("error") or {}
    kept = (f"What was recorded is kept in {run_dir} (report.json has status '{status}'"
            + (", the partial trace is there" if (report.get("files") or {}).get("trace") else "")
            + ").")
    if status == "timeout":
        return f"The script did not finish within --timeout and was stopped. {kept}"
    if status == "interrupted":
        return f"Interrupted with Ctrl-C. {kept}"
    if err.get("type") == "SyntaxError":
        return (f"The script has a syntax error at {err.get('file')}:{err.get('line')}: "
                f"{err.get('message')}. Fix it and run again (plain python shows the same "
                f"error). {kept}")
    if err.get("type") == "SystemExit":
        return (f"The script exited with {err.get('message')}, so nsbridge exits non-zero too. "
                f"{kept}")
    where = f" at {err['file']}:{err['line']}" if err.get("file") else ""
    return (f"The script failed{where} with {err.get('type')}: {err.get('message')} (its "
            f"traceback is above). {kept}")
