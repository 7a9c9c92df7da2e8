#!/bin/sh
# Second part of the experiment chain: more seeds (run from the repository root, one thread).
set -e
export OMP_NUM_THREADS=1
PY=${PYTHON:-python}
$PY scripts/exp_clicks.py --quick > results/clicks/quick.log 2>&1
$PY scripts/exp_clicks.py --dataset mslr --etas 1 --seeds 0-9 --name mslr_eta1 > results/clicks/mslr_eta1.log 2>&1
$PY scripts/exp_clicks.py --etas 1 --folds 1-5 --seeds 0-3 --name eta1_folds1-5 > results/clicks/eta1_folds1-5.log 2>&1
