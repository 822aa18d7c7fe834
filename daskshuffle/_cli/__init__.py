"""The ``daskshuffle`` command line: a thin layer over the public functions.

Shuffling commands start a ``LocalCluster`` (or connect to ``--scheduler``): the library
never starts one. A new command is a ``@cli.command`` in a module of this package, imported here.
"""

from . import _generations, _info, _lines, _plan, _quality, _shuffles, _verify
from ._common import main

__all__ = ["main"]
del _generations, _info, _lines, _plan, _quality, _shuffles, _verify
