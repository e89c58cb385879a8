"""``python -m latsim.cli``: the command line."""

from latsim.cli import main

main()
