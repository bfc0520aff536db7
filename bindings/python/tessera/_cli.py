"""The `tessera` command of an installed package: runs the command-line tool built with the bundled library.

An installed wheel holds the tool at ``tessera/bin/tessera`` beside ``tessera/lib`` (it finds the library through its
``$ORIGIN`` run path); this entry point, which pip puts on the environment's PATH, replaces itself with it.
"""

from __future__ import annotations

import os
import sys

_TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "tessera")


def main() -> None:
    if not os.access(_TOOL, os.X_OK):
        sys.exit(f"tessera: the command-line tool is not part of this installation (looked for {_TOOL}); it is "
                 "installed by `pip install` of the package or its wheel, or built by scripts/build.sh as build/bin/tessera")
    os.execv(_TOOL, [_TOOL, *sys.argv[1:]])


if __name__ == "__main__":
    main()
