"""Click options shared by nsbridge's commands, each declared once."""

from __future__ import annotations

from typing import Callable, TypeVar

import click

F = TypeVar("F", bound=Callable)

PROFILE = click.option("--profile", "profile", default="default", show_default=True,
                       help="Built-in profile (default, quick, memory) or a YAML file.")
DEEP_PROFILE = click.option("--deep-profile", "deep_profile", default="deep", show_default=True,
                            help="Metric set of the Nsight Compute pass (deep, deep-tensorcore, "
                                 "deep-memory) or a YAML file.")
OUT = click.option("--out", "out", type=click.Path(),
                   help="Run directory to create (must not exist).")
WINDOW = click.option("--window", "window", type=click.Choice(["steps", "trace"]),
                      default="steps", show_default=True,
                      help="What the figures cover: the measured steps, or the whole trace as "
                           "one window (totals and rates per second).")
TOP = click.option("--top", type=int, default=10, show_default=True,
                   help="Ops in the summary table.")
# commands that run the user's script: everything after the script goes to the script
SCRIPT_COMMAND = {"ignore_unknown_options": True, "allow_interspersed_args": False}


def script_options(fn: F) -> F:
    """-m MODULE, --profile, --out, --timeout, --top, then TARGET and the script's arguments."""
    for decorator in reversed([
        click.option("-m", "module", metavar="MODULE", help="Run a module, like python -m MODULE."),
        PROFILE, OUT,
        click.option("--timeout", type=float, metavar="SECONDS",
                     help="Stop the script after SECONDS; it then gets a quarter of that "
                          "(10-60 s) to write what it recorded, and is killed."),
        TOP,
        click.argument("target", required=False),
        click.argument("script_args", nargs=-1, type=click.UNPROCESSED),
    ]):
        fn = decorator(fn)
    return fn
