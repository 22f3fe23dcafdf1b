"""The click commands as a markdown reference (``docs/commands.md``, written by ``manage.py docs``).

Read from the command objects themselves, as ``--help`` prints them: each command and group, recursively, with its
usage line, help text and options (their help with every default click knows, as if ``show_default`` were on).
Hidden commands (aliases kept for old scripts) stay out, as they do from ``--help``. Deterministic: commands in
``list_commands`` order (sorted by name), options in declaration order, no terminal width involved.
"""

from __future__ import annotations

import inspect
import re

import click


def markdown(group: click.Group, name: str, intro: str = "") -> str:
    """The reference page for ``group`` invoked as ``name``: ``intro``, then one section per command, depth first."""
    out = [f"# `{name}` commands", "", *([intro, ""] if intro else [])]
    for ctx in _walk(click.Context(group, info_name=name, show_default=True)):
        out += _section(ctx), ""
    return "\n".join(out).rstrip() + "\n"


def _walk(ctx: click.Context):
    yield ctx
    if isinstance(ctx.command, click.Group):
        for name in ctx.command.list_commands(ctx):
            sub = ctx.command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _walk(click.Context(sub, info_name=name, parent=ctx, show_default=True))


def _section(ctx: click.Context) -> str:
    cmd = ctx.command
    out = [f"## {ctx.command_path}", "", "```", f"{ctx.command_path} {' '.join(cmd.collect_usage_pieces(ctx))}",
           "```", ""]
    help_text = inspect.cleandoc((cmd.help or "").split("\f")[0])
    if help_text:
        out += [help_text, ""]
    help_option = cmd.get_help_option(ctx)
    options = [r for p in cmd.get_params(ctx)             # arguments are in the usage line; --help on every command
               if isinstance(p, click.Option) and p is not help_option and (r := p.get_help_record(ctx))]
    if options:
        out += ["| option | meaning |", "|---|---|", *(_row(f"`{opts}`", text) for opts, text in options), ""]
    if isinstance(cmd, click.Group):
        out += ["| command | what it does |", "|---|---|"]
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                path = f"{ctx.command_path} {name}"
                out.append(_row(f"[`{name}`](#{_anchor(path)})", sub.get_short_help_str(limit=200)))
        out.append("")
    return "\n".join(out).rstrip()


def _anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _row(*cells: str) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"
