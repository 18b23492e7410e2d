"""`python -m kiln ...` and the `kiln` console script: the kiln CLI that comes with the package."""

import os
import sys

from .paths import get_cli


def main() -> None:
    cli = get_cli()
    if not os.path.exists(cli):
        sys.exit(f"kiln: the command-line tool is not at {cli}: build it (make build)")
    os.execv(cli, [cli, *sys.argv[1:]])


if __name__ == "__main__":
    main()
