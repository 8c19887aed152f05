"""``python -m escher.cli``: the `escher` command."""

from escher.cli import main

if __name__ == "__main__":
    main(prog_name="escher")
