"""`python -m nsbridge` = the `nsbridge` command."""

from nsbridge.cli import command

command()
