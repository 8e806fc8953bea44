"""`python -m nsbridge` = the `nsbridge` command."""

from nsbridge.cli import main

main()
