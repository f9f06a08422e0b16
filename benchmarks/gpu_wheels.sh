#!/usr/bin/env bash
# The Python packages the GPU machine lacks, as wheels in .whl/ (ignored by git), for the
# device tool to carry there: its image has torch, Triton, Lightning, numba, pandas and
# pytest, but not Hydra, nor perhaps joblib, which Hydra's joblib launcher needs to train
# several runs side by side on the one GPU. All of them are pure Python, so wheels built
# here serve its Python 3.12. Run here (it needs PyPI), then on the GPU machine, from the
# checkout:
#
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 python3 benchmarks/gpu_check.py --out $OUT
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES=(
    hydra-core==1.3.8 omegaconf==2.3.1 antlr4-python3-runtime==4.9.3
    hydra-joblib-launcher==1.2.0 joblib==1.6.0 hydra-submitit-launcher==1.2.0 submitit==1.5.4
)
rm -rf .whl && mkdir -p .whl
python3 -m pip wheel --quiet --no-deps --wheel-dir .whl "${PACKAGES[@]}"
ls .whl
