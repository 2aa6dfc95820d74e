#!/usr/bin/env bash
# Install ampmigrate into .venv and run it on the bundled example project: the findings, then the
# fixes it would make (nothing is written). Both commands exit 1 because findings remain.
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e . || exit 2
echo "\$ ampmigrate check fixtures/example_project"
.venv/bin/ampmigrate check fixtures/example_project
echo
echo "\$ ampmigrate fix --diff fixtures/example_project"
.venv/bin/ampmigrate fix --diff fixtures/example_project
exit 0
