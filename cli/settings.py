"""``manage.py settings``: the settings this environment gives, secrets masked."""

from __future__ import annotations

import click

from precompute.settings import markdown_table

from .group import command


@command(name="settings")
@click.option("--table", is_flag=True, help="Print every setting's default, unit and meaning (the table of "
                                           "docs/configuration.md).")
@click.pass_obj
def show_settings(obj, table: bool) -> None:
    """Print each setting's environment variable and current value (tokens and URL passwords masked)."""
    if table:
        click.echo(markdown_table())
        return
    for name, value in obj.settings.public().items():
        click.echo(f"{name}={value}")
