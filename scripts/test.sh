#!/usr/bin/env bash
# Install everything into .venv (torch 2.13.0 CPU first, so no CUDA build is pulled; the CPU
# TensorFlow and tf-keras without its deps, which would pull the full tensorflow wheel) and run
# the whole test suite: lint/format checks, rule examples, fixtures, CLI, execution, verify, TF.
# One pytest-xdist worker per CPU; --dist loadgroup spreads the tests one by one (a long file
# such as test_apex.py no longer runs on a single worker), except the files whose
# module-scoped fixture must run once (the execution and TensorFlow runs, the differential
# snapshot, the pre-commit install): each carries an xdist_group mark that keeps it on one.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check torch==2.13.0
.venv/bin/python -m pip install -q --disable-pip-version-check tensorflow-cpu==2.21.0
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps tf-keras==2.21.0
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,verify]'
.venv/bin/python -m pytest -n auto --dist loadgroup "$@"
