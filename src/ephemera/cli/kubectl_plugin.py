"""`kubectl-dynamic`: the `ephemera dynamic` command as a kubectl plugin. Installed with the
package as a console script, so with the virtualenv's bin on PATH `kubectl dynamic ACTION ...`
runs it (kubectl execs `kubectl-dynamic` with the arguments after `dynamic`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ephemera.cli import dynamic


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `kubectl dynamic` arguments and run the action; the exit code."""
    parser = argparse.ArgumentParser(
        prog="kubectl dynamic",
        description="Add and remove a running pod's volumes and containers "
                    "(pods/NAME/dynamic) and show desired, allocated and actuated state.")
    dynamic.configure_parser(parser)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
