"""The ``manage.py`` command group; each module of this package adds the commands of one area.

Expected failures print one line (``error: ...``) on stderr and exit with the code their class declares in
``precompute.errors``; bad arguments exit 2 the same way. ``main`` is all ``manage.py`` calls. The group and the
helpers every command module uses are ``group.py``'s, so that command modules never import this package's ``__init__``.
"""

from .group import cli, main  # noqa: F401  (what manage.py and the reference page generator use)
from . import data, demo, docs, evaluate, experiments, imports, keys, models, server, settings, status, workers  # noqa: E402,F401,I001  (commands register themselves on ``cli``)
