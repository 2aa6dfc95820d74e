#!/usr/bin/env bash
# Install everything into .venv (torch 2.13.0 CPU first, so no CUDA build is pulled; the CPU
# TensorFlow and tf-keras without its deps, which would pull the full tensorflow wheel) and run
# the whole test suite: lint/format checks, rule examples, fixtures, CLI, execution, verify, TF.
# One pytest-xdist worker per CPU; --dist loadfile keeps each test file in one worker, so a
# module-scoped fixture (the execution and TensorFlow runs, the differential snapshot) runs once.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check torch==2.13.0
.venv/bin/python -m pip install -q --disable-pip-version-check tensorflow-cpu==2.21.0
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps tf-keras==2.21.0
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,verify]'
.venv/bin/python -m pytest -n auto --dist loadfile "$@"
