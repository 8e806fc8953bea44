"""Click options shared by nsbridge's commands, each declared once."""

from __future__ import annotations

import difflib
from typing import Any, Callable, Optional, TypeVar

import click

from .guard import limits
from .guard.limits import Bound

F = TypeVar("F", bound=Callable)


class Bounded(click.ParamType):
    """A number in one of nsbridge.guard.limits' ranges (the MCP tools check the same ones);
    NaN and the infinities are refused, which click.FloatRange lets through."""

    def __init__(self, bound: Bound) -> None:
        self.bound = bound
        self.name = "integer" if bound.integer else "float"

    def convert(self, value: Any, param: Optional[click.Parameter],
                ctx: Optional[click.Context]) -> Any:
        try:
            number = (int(value) if self.bound.integer else float(value))
        except (TypeError, ValueError):
            number = value
        why = self.bound.refusal(number)
        if why:
            self.fail(why, param, ctx)
        return number


PROFILE = click.option("--profile", "profile", default="default", show_default=True,
                       help="Built-in profile (default, quick, memory, gate) or a YAML file.")
# a pass added to a run: the run's own profile unless one is named
RUN_PROFILE = click.option("--profile", "profile", default=None,
                           help="Built-in profile (default, quick, memory, gate) or a YAML "
                                "file. With --run: the run's own, as its manifest recorded "
                                "it; else default.")
DEEP_PROFILE = click.option("--deep-profile", "deep_profile", default="deep", show_default=True,
                            help="Metric set of the Nsight Compute pass (deep, deep-tensorcore, "
                                 "deep-memory) or a YAML file.")
OUT = click.option("--out", "out", type=click.Path(),
                   help="Run directory to create (must not exist).")
WINDOW = click.option("--window", "window", type=click.Choice(["steps", "trace"]),
                      default="steps", show_default=True,
                      help="What the figures cover: the measured steps, or the whole trace as "
                           "one window (totals and rates per second).")
TOP = click.option("--top", type=Bounded(limits.TOP), default=None, metavar="N",
                   help="Rows of each table in the summary (the ops first) and, for a new "
                        "run, in report.md [default: the profile's analysis.top_ops, 10].")
THREADS = click.option("--threads", type=Bounded(limits.THREADS), default=None, metavar="N",
                       help="torch's intra-op threads (and OpenMP's, MKL's, OpenBLAS's) in the "
                            "profiled process, recorded with the run. On a busy machine two "
                            "threads on two cores wait for each other; 1 is steadier. At "
                            "most the usable cores.")

TRUST = click.option("--trust", "trust", multiple=True, metavar="DIR",
                     type=click.Path(exists=True, file_okay=False),
                     help="Also run a run directory's script from DIR (repeatable); by "
                          "default only from the current folder. Trust DIR as you would "
                          "its code: a manifest names the script that runs.")


def GATE_OPTIONS(fn: F) -> F:
    """The judging options diff and gate share, each declared once."""
    for decorator in reversed([
        click.option("--fail-above", type=Bounded(limits.FAIL_ABOVE_PCT), default=10.0,
                     show_default=True, metavar="PCT",
                     help="The threshold: diff fails a slowdown whose 95% interval lies "
                          "above no change and reaches PCT percent; gate one that is "
                          "significant at its 1% false-alarm bound, at least PCT/2 percent "
                          "at its estimate and reaching PCT in its interval."),
        click.option("--min-step-share", type=Bounded(limits.MIN_STEP_SHARE_PCT), default=2.0,
                     show_default=True, metavar="PCT",
                     help="Gate an op only when the time it adds per step is at least PCT "
                          "percent of the base step time."),
        click.option("--fail-above-mib", type=Bounded(limits.FAIL_ABOVE_MIB), default=None,
                     metavar="MIB",
                     help="A peak memory this many MiB above the base's (in every process) "
                          "is a regression, named by the kind, module, op and line holding "
                          "the added bytes. Default: the larger of 20% of the base peak and "
                          "16 MiB, where both sides recorded memory; gate records it when "
                          "this is given."),
        click.option("--op", "ops", multiple=True, metavar="OP", help="Gate only these ops."),
        click.option("--allow", "allow", metavar="KIND[,KIND]",
                     help="Accept these differences between the runs instead of calling the "
                          "comparison inconclusive: args, torch, gpu, threads, cores (and "
                          "target: see --allow-different-target)."),
        click.option("--allow-different-target", is_flag=True,
                     help="Compare runs of different scripts instead of refusing (the same "
                          "as --allow target)."),
        click.option("--inconclusive", "when_inconclusive", default="exit", show_default=True,
                     type=click.Choice(["exit", "pass", "fail"]),
                     help="What an inconclusive comparison exits with: its own code 4 "
                          "(exit), 0 (pass) or 1 (fail). A refusal always exits 5."),
        click.option("--format", "fmt", type=click.Choice(["text", "md", "json"]),
                     default="text", show_default=True,
                     help="text for a terminal, md for a PR comment, json for scripts; the "
                          "exit code is the same in each."),
    ]):
        fn = decorator(fn)
    return fn


def TIMEOUT(help: str) -> Callable[[F], F]:
    """--timeout SECONDS, in limits.TIMEOUT_S's range, with the command's own help."""
    return click.option("--timeout", type=Bounded(limits.TIMEOUT_S), metavar="SECONDS",
                        help=help)


FORMAT = click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
                      show_default=True,
                      help="json: one JSON document on stdout (nsbridge/agent/answer.schema.json: "
                           "status, what the exit code means, the run's files and the report's "
                           "headline, or the error); the script's own output goes to stderr.")

# commands that run the user's script: everything after the script goes to the script
SCRIPT_COMMAND = {"ignore_unknown_options": True, "allow_interspersed_args": False}


class ScriptCommand(click.Command):
    """A command that runs the user's script (SCRIPT_COMMAND): everything after the script
    is the script's, untouched, and before it every option must be nsbridge's. nsbridge's
    options may come anywhere before the script (between a gate's BASE, NEW and SCRIPT
    too); an unknown one there is a usage error (exit 2, with click's "did you mean"),
    never taken for the script's name. The script is the last single argument (TARGET,
    or a gate's SCRIPT), or the value of ``-m MODULE``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes = {name: _value_of(param) for param in self.get_params(ctx)
                 if isinstance(param, click.Option) for name in param.opts + param.secondary_opts}
        singles = sum(isinstance(p, click.Argument) and p.nargs == 1 for p in self.params)
        ours: list[str] = []
        theirs: list[str] = []
        i = 0
        while i < len(args) and len(theirs) < singles:
            token = args[i]
            if token == "--":                        # the rest is positional, as typed
                break
            if not token.startswith("-") or token == "-":
                theirs.append(token)
                i += 1
                continue
            name = token.split("=", 1)[0]
            if name not in takes and token[:2] in takes and not token.startswith("--"):
                name = token[:2]                     # -mpkg: a short option with its value
            if name not in takes:
                raise click.NoSuchOption(name, possibilities=difflib.get_close_matches(
                    name, [n for n in takes if n.startswith("--")]), ctx=ctx)
            ours.append(token)
            attached = token != name
            value = takes[name]
            if not attached and i + 1 < len(args) and (
                    value == "always" or (value == "number" and args[i + 1].isdigit())):
                ours.append(args[i + 1])
                i += 1
            i += 1
            if name == "-m" and value == "always":   # -m MODULE: the module is the script
                break
        return super().parse_args(ctx, ours + theirs + args[i:])


def _value_of(option: click.Option) -> str:
    """Whether an option takes the next argument as its value: "never" (a flag),
    "always", or "number" (an optional value, --deep [N]: only a number is its value)."""
    if option.is_flag or option.count:
        return "never"
    return "number" if getattr(option, "_flag_needs_value", False) else "always"


def script_options(fn: Optional[F] = None, *, profile: Callable[[F], F] = PROFILE) -> Any:
    """-m MODULE, --profile (``profile``: its option), --out, --timeout, --top, then TARGET
    and the script's arguments; as ``@script_options`` or ``@script_options(profile=...)``."""
    def apply(fn: F) -> F:
        decorators: list[Callable[[F], F]] = [
            click.option("-m", "module", metavar="MODULE",
                         help="Run a module, like python -m MODULE."),
            profile, OUT,
            TIMEOUT(help="Stop the script after SECONDS; it then gets a quarter of that "
                         "(10-60 s) to write what it recorded, and is killed."),
            TOP,
            click.argument("target", required=False),
            click.argument("script_args", nargs=-1, type=click.UNPROCESSED)]
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn
    return apply(fn) if fn is not None else apply
