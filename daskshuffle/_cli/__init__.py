"""The ``daskshuffle`` command line: a thin layer over the public functions.

Every shuffling command starts a ``distributed.LocalCluster`` sized to the
machine, or connects to ``--scheduler ADDRESS``; the library itself never
starts a cluster. Errors are one line on stderr and a non-zero exit status,
with the traceback only under ``--debug``.

To add a command for another kind of data, write a function decorated with
``@cli.command(...)`` and ``@cluster_options`` in a module of this package
(the options several commands share are declared once, in ``_options``),
call its public shuffle inside ``with cluster_session(...)``, and import the
module here.
"""

from . import _generations, _info, _lines, _plan, _quality, _shuffles, _verify
from ._common import main

__all__ = ["main"]
del _generations, _info, _lines, _plan, _quality, _shuffles, _verify
