#!/usr/bin/env python
"""prefeed's command line: ``python manage.py --help``."""

import sys

import click

from cli import cli


def main() -> int:
    try:
        result = cli.main(standalone_mode=False)
    except click.ClickException as exc:          # bad arguments: one line, exit 2
        click.echo(f"error: {exc.format_message()}", err=True)
        return exc.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        return 130
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
