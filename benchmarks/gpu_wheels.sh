#!/usr/bin/env bash
# The wheels an offline Python 3.12 GPU machine lacks for this project, downloaded into .whl/ (ignored by git)
# on a machine that reaches PyPI, to be copied to the GPU machine along with the checkout.
#
# Usage, from the repository's root:  bash benchmarks/gpu_wheels.sh [extra-package==version ...]
# On the GPU machine, from the repository's root:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
#     --upgrade --target .site .whl/*.whl && export PYTHONPATH=$PWD/.site:$PWD
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mkdir -p .whl
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
for package in optuna sqlalchemy plotly alembic colorlog mako greenlet "$@"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "$package"
done
ls -1 .whl && du -sh .whl
