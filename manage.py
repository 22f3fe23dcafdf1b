#!/usr/bin/env python
"""prefeed's command line: ``python manage.py --help``."""

from cli import cli

if __name__ == "__main__":
    cli()
