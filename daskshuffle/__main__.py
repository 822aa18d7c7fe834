"""``python -m daskshuffle``: the same as the ``daskshuffle`` command."""

from ._cli import main

if __name__ == "__main__":
    main()
