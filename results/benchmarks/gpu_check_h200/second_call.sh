#!/bin/bash
# Second GPU call: finish what the first gpu-check call left (R32 FCPTS from its step-1500 checkpoint, the scale
# cells past its budget, POT R32 from layer 11 for as long as time allows; its checkpoint comes back).
export PYTHONUNBUFFERED=1 FCPTS_DATA_ROOT=gpu_data HF_HUB_OFFLINE=1 PYTHONPATH=.
export FCPTS_GIT_COMMIT=9a5134bc8cd6eef16912ddda219062b3c3110091
OUT=${OUT:?}; TOTAL=${TOTAL:-255}
cp -r gpu_data/resume/records $OUT/records; cp gpu_data/resume/scale.json $OUT/scale.json
py=python3; command -v $py >/dev/null || py=python
cifar="$py -m tasks.cifar --dataset cifar10 --model resnet32 --sparsity 0.8 --profile paper --results-dir $OUT/records --device ${DEV:-cuda} --no-progress"
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
timeout 60 $cifar --methods fcpts > $OUT/r32-fcpts.log 2>&1; echo "fcpts rc=$? at ${SECONDS}s"
timeout 150 $py -m benchmarks.scale --device ${DEV:-cuda} --out $OUT/scale.json --resume --models resnet18 resnet50 vit_base --methods fcpts pot-l2norm obs --cell-timeout 30 --budget-s ${SCALE_BUDGET:-100} > $OUT/scale.log 2>&1; echo "scale rc=$? at ${SECONDS}s"
left=$(( TOTAL - SECONDS )); [ $left -gt 5 ] && timeout $left $cifar --methods pot-l2norm > $OUT/r32-pot.log 2>&1; echo "pot rc=$? at ${SECONDS}s"
tar czf $OUT/records.tar.gz -C $OUT records; rm -rf $OUT/records/models; echo "done at ${SECONDS}s"
