# One command sets up and runs the main job; one sets up and runs the tests.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1

.PHONY: gpu-data gpu-check gpu-check-dry scale-small setup run test lint bench tables figures report check-regression train-cifar100 reproduce-cifar reproduce-imagenet-substitute voc-substitute voc-substitute-mmdet run-mmdet reproduce-voc deploy-table deploy-runtimes reproduce-fcpts-r56 baselines-r32 clean

# The mmdet detection task (tasks/voc/mmdet/) needs mmcv's compiled ops: its CPU wheel for CPython 3.11 and
# torch 2.14.1 sits in ../shared/wheels/; with it setup adds the [mmdet] extra, without it the task's tests skip.
MMCV_WHEEL ?= ../shared/wheels/mmcv-2.1.0-cp311-cp311-linux_x86_64.whl

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[all]"
	@if [ -f $(MMCV_WHEEL) ] && $(PY) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then \
	  echo "installing mmcv from $(MMCV_WHEEL) and the [mmdet] extra"; \
	  $(PY) -m pip install --quiet -c constraints.txt $(MMCV_WHEEL) -e ".[all,mmdet]"; \
	else echo "no mmcv wheel for this Python at $(MMCV_WHEEL): the mmdet detection task is not installed (docs/tasks.md)"; fi
	touch $@

setup: $(VENV)/.installed

# Main job: CIFAR-10 ResNet-56, FCPTS at 90%, fast CPU profile (a few minutes); its record goes to results/local/
# (not tracked), so the committed records stay as they are. Re-running it prints the finished record; add
# FORCE=--force to redo it; an interrupted run resumes from its checkpoint.
FORCE ?=
run: setup
	$(PY) -m tasks.cifar --dataset cifar10 --model resnet56 --methods fcpts --sparsity 0.9 --profile fast \
	  --results-dir results/local/runs $(FORCE)

# Lint, types, then every test (unit, integration on real data, results checks), on every core: one pytest-xdist
# worker a core, each test file whole in one worker (its module fixtures made once), one torch thread a worker.
test: setup lint
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q -n auto --dist loadfile

lint: setup
	$(PY) -m ruff check fcpts baselines tasks benchmarks tests
	$(PY) -m ruff format --check fcpts baselines tasks benchmarks tests
	$(PY) -m mypy

# The reproduce-* targets run their cells here, or as cluster jobs with LAUNCHER (docs/tasks.md: On a cluster), e.g.
# make reproduce-cifar LAUNCHER="--launcher submitit --cluster slurm --slurm-partition gpu --gpus-per-node 1"
LAUNCHER ?=

# Full protocol of METHOD.md for the same cell (1,600 iterations; resumable).
reproduce-fcpts-r56: setup
	$(PY) -m tasks.cifar --dataset cifar10 --model resnet56 --methods fcpts --sparsity 0.9 --profile paper $(LAUNCHER)

# The POT (L2Norm, ERK) vs FCPTS on CIFAR-10 ResNet-32, CPU budget for POT; and OBS (not in the paper).
baselines-r32: setup
	$(PY) -m tasks.cifar --dataset cifar10 --model resnet32 --all-methods --sparsity 0.7 0.8 0.9 --profile paper-cpu

# Dense CIFAR-100 ResNet-32/56 of our own (no pretrained ones exist here); resumable; 40 epochs took 3.2 h
# (R32) and 4.9 h (R56) of one shared CPU core here (their training records). Writes results/weights/cifar100/<model>.{th,json}.
train-cifar100: setup
	$(PY) -m tasks.cifar.train --dataset cifar100 --model resnet32 --epochs 40
	$(PY) -m tasks.cifar.train --dataset cifar100 --model resnet56 --epochs 40

# Table 2's grid: ResNet-32/56 x CIFAR-10/100 x 70/80/90% x POT (L2Norm, ERK), FCPTS, then OBS (not in the
# paper: rows of its own). Hours on a CPU; finished cells are skipped, an interrupted cell resumes. PROFILE=paper
# for POT's full budget.
PROFILE ?= paper-cpu
reproduce-cifar: setup
	for ds in cifar10 cifar100; do for m in resnet32 resnet56; do \
	  $(PY) -m tasks.cifar --dataset $$ds --model $$m --all-methods --sparsity 0.7 0.8 0.9 --profile $(PROFILE) $(LAUNCHER) || exit 1; \
	done; done
	$(PY) -m tasks.reporting manifest

# ImageNet task on this workplace's stand-in: EfficientNet-Lite0 (real weights, 1,300 real val images),
# POT (L2Norm, ERK), ProbMask, FCPTS at 50-90% (Table 3), STR at 50-70% (Table 1), FCPTS with ERK rates
# held at 70/90% (Figure 4); CPU profile; 11-32 min a cell of one shared core here and 2.1 h for STR's search
# (about 16 core-hours in all, the records' wall times), resumable. --all-methods also runs OBS (not in the
# paper) at 50-90%: 24-44 min a cell by its records, 3.0 h more.
reproduce-imagenet-substitute: setup
	$(PY) -m tasks.imagenet --models efficientnet_lite0 --all-methods --profile cpu $(LAUNCHER)
	$(PY) -m tasks.imagenet --models efficientnet_lite0 --methods str --sparsity 0.5 0.6 0.7 --profile cpu $(LAUNCHER)
	$(PY) -m tasks.imagenet --models efficientnet_lite0 --methods fcpts-fixed --sparsity 0.7 0.9 --profile cpu $(LAUNCHER)
	$(PY) -m tasks.reporting manifest

# Table 5's CPU substitute (no VOC or pytorch-ssd checkpoint here): CIFAR-10 objects on CIFAR-100 scene
# canvases in the VOC layout, our MobileNetV2-SSD-Lite at 160 px (2.6 h of one shared core here, its training
# record; resumable), then POT (L2Norm, ERK) and FCPTS at 90%.
VOC_SUB ?= data/voc-cifar
voc-substitute: setup
	$(PY) -m tasks.voc.make_set --out $(VOC_SUB)
	$(PY) -m tasks.voc.train --data-root $(VOC_SUB) --model mb2-ssd-lite --image-size 160 --epochs 60
	$(PY) -m tasks.voc --data-root $(VOC_SUB) --models mb2-ssd-lite --image-size 160 --all-methods --profile cpu

# The same substitute set with mmdet's SSDLite-MobileNetV2 (its config adapted: 10 classes, 160 px), trained dense
# with mmengine's Runner (14 epochs of 125 iterations, resumable per epoch; skipped when its weights are committed),
# then POT (L2Norm, ERK) and FCPTS at 50% and 90%. Needs the [mmdet] extra (make setup installs it with the mmcv
# wheel in ../shared/wheels/). `make run-mmdet`: one FCPTS cell of that detector from its committed weights (minutes),
# its record in results/local/ (not tracked).
MMDET_SSDLITE := tasks/voc/mmdet/configs/ssdlite_mobilenetv2_voc-cifar10-160.py
MMDET_WEIGHTS := results/weights/voc-cifar10/mmdet-ssdlite_mobilenetv2_voc-cifar10-160.pth
VOC_SUB_SET := $(VOC_SUB)/VOCdevkit/VOC2007/substitute.json
$(VOC_SUB_SET): | setup
	$(PY) -m tasks.voc.make_set --out $(VOC_SUB)

$(MMDET_WEIGHTS): | setup $(VOC_SUB_SET)
	OMP_NUM_THREADS=1 $(PY) -m tasks.voc.mmdet.train --data-root $(VOC_SUB) --config $(MMDET_SSDLITE)

voc-substitute-mmdet: setup $(VOC_SUB_SET) $(MMDET_WEIGHTS)
	$(PY) -m tasks.voc --framework mmdet --data-root $(VOC_SUB) --config $(MMDET_SSDLITE) --all-methods \
	  --sparsity 0.5 0.9 --profile cpu $(LAUNCHER)
	$(PY) -m tasks.reporting manifest

run-mmdet: setup $(VOC_SUB_SET) $(MMDET_WEIGHTS)
	$(PY) -m tasks.voc --framework mmdet --data-root $(VOC_SUB) --config $(MMDET_SSDLITE) --methods fcpts \
	  --sparsity 0.9 --profile cpu --results-dir results/local/runs $(FORCE)

# Table 5 on PASCAL VOC: VOCdevkit/VOC2007 under VOC_ROOT, pytorch-ssd's released checkpoints in
# $(VOC_ROOT)/weights/voc/ (mobilenet-v1-ssd-mp-0_675.pth, mb2-ssd-lite-mp-0_686.pth). VOC_PROFILE=paper: GPU protocol.
VOC_ROOT ?= ../shared/data
VOC_PROFILE ?= cpu
reproduce-voc: setup
	$(PY) -m tasks.voc --data-root $(VOC_ROOT) --all-methods --profile $(VOC_PROFILE) $(LAUNCHER)

# Table 7: deploy the FCPTS ResNet-56 90% model (ONNX export, sparse storage, ONNX vs PyTorch top-1 on the
# 10,000 test images; the checkpoint is re-made from its record only when missing), then latency, memory and
# file size on every runtime that is installed (make deploy-runtimes adds DeepSparse and OpenVINO), with the
# real sparse EfficientNet-Lite0 of the FCPTS 50-70% cpu cells (sparse models are not committed: a missing
# 70% one is re-made by re-running its cell, about 20 min by its record, which rewrites it; missing 50/60% ones are
# skipped with the command that re-makes them). About 30 min on 2 busy cores.
DEPLOY_CKPT := results/deploy/cifar10-resnet56-fcpts-sp90-fast-seed0.pt
$(DEPLOY_CKPT): | setup
	$(PY) -m tasks.deploy --record results/runs/cifar/cifar10/resnet56/fcpts-sp90-fast-seed0.json

LITE0_SPARSE := results/runs/models/imagenet/imagenet-val1300/efficientnet_lite0/fcpts-sp70-cpu-seed0.pt
$(LITE0_SPARSE): | setup
	$(PY) -m tasks.imagenet --models efficientnet_lite0 --methods fcpts --sparsity 0.7 --profile cpu --force

deploy-table: setup $(DEPLOY_CKPT) $(LITE0_SPARSE)
	OMP_NUM_THREADS=1 $(PY) -m tasks.deploy --sparse-weights $(DEPLOY_CKPT)
	OMP_NUM_THREADS=1 $(PY) -m benchmarks inference

# Optional runtimes, each in its own virtual environment (found by tasks.deploy; or set FCPTS_DEEPSPARSE_PYTHON /
# FCPTS_OPENVINO_PYTHON). DeepSparse pins onnx 1.14.1 and numpy 1.26, needs Python <= 3.11; licence: evaluation only.
deploy-runtimes:
	python3.11 -m venv .venv-deepsparse && .venv-deepsparse/bin/pip install --quiet deepsparse==1.8.0
	$(PYTHON) -m venv .venv-openvino && .venv-openvino/bin/pip install --quiet openvino==2026.4.1

# Re-run a few real cells of Tables 2, 3 and 5 at a small budget and compare with the committed reference
# records (tolerances per task, measured: docs/tasks.md).
check-regression: setup
	$(PY) -m tasks.regression

# Paper figures from the committed records into paper_figures/.
figures: setup
	$(PY) -m tasks.reporting figures

# Paper tables from the committed records, beside the paper's numbers, and the README's generated blocks (the
# methods table from the registry, the results summary from the records); seconds, runs nothing.
tables: setup
	$(PY) -m tasks.reporting tables
	$(PY) -m tasks.reporting readme

# The results explorer: tables, figures, then a static site of them and of every run in results/site/ (open
# results/site/index.html in a browser; no server, no network). Not committed: about 1 min of CPU for the site
# from empty, seconds once its run plots are drawn (kept across builds, redrawn when their record changes).
report: tables figures
	$(PY) -m tasks.reporting site

# Time and operators of one FCPTS step over one plain training step (benchmarks, not tests; `python -m benchmarks
# --list` names the others).
bench: setup
	OMP_NUM_THREADS=1 $(PY) -m benchmarks step-time --model resnet56 --batch-size 64
	OMP_NUM_THREADS=1 $(PY) -m benchmarks step-ops

clean:
	rm -rf $(VENV) .pytest_cache results/checkpoints

# The scale benchmark's CPU mode: every registered method on the paper's seven ImageNet models at 224 px, tiny
# probes projected to the paper's budget (docs/notebook/benchmarks.md); about an hour of one shared core here.
scale-small: setup
	OMP_NUM_THREADS=1 $(PY) -m benchmarks scale --small --threads 1

# The GPU check (docs/notebook/benchmarks.md): `make gpu-data` here copies the CIFAR-10 subset and weights it needs into
# gpu_data/ (git-ignored, small enough to travel with the checkout); `make gpu-check GPU_OUT=DIR` on the GPU
# machine runs what fits in 8 minutes with only torch, torchvision and timm (no venv, no install), and
# GPU_CONTINUE=<the first call's gpu_check.tar.gz, copied into gpu_data/> finishes the rest in a second call;
# `make gpu-check-dry` runs it on a CPU with tiny sizes.
GPU_OUT ?= results/local/gpu_check
gpu-data: setup
	$(PY) -m benchmarks gpu-check prepare

gpu-check:
	PYTHONPATH=. $(PYTHON) -m benchmarks gpu-check run --out $(GPU_OUT) $(if $(GPU_CONTINUE),--continue-from $(GPU_CONTINUE))

gpu-check-dry:
	PYTHONPATH=. $(PYTHON) -m benchmarks gpu-check run --out $(GPU_OUT)-dry --dry-run
