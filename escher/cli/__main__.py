"""``python -m escher.cli``: the `escher` command."""

from escher.cli import main

main(prog_name="escher")
