import os
import sys

# `python -m ampmigrate` puts the current directory first on sys.path; a project file there
# named like a module of the standard library (`copy.py`) would be imported in its place (and
# run). The package itself is imported already; nothing else should come from there.
if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from ampmigrate.cli import entry

entry()
