#!/usr/bin/env python
"""prefeed's command line: ``python manage.py --help``."""

import sys

from cli import main

if __name__ == "__main__":
    sys.exit(main())
