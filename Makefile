# Every target creates and reuses .venv; a requirements file newer than its stamp reinstalls.
VENV := .venv
PYTHON := $(VENV)/bin/python
PIP := $(PYTHON) -m pip install --quiet --disable-pip-version-check
RUNTIME := $(VENV)/.runtime-installed
DEV := $(VENV)/.dev-installed

.PHONY: test pretrain bench clean-venv

$(PYTHON):
	python3 -m venv $(VENV)

# seqeval ships only an sdist built with --no-build-isolation (see requirements.txt), so the
# venv needs setuptools' bdist_wheel command first: a new venv has no `wheel` package, and a
# machine whose pip cache holds a built seqeval wheel hides that (.ci/run bypasses the cache).
$(RUNTIME): requirements.txt pyproject.toml | $(PYTHON)
	$(PIP) wheel==0.45.1 setuptools_scm==8.3.1
	$(PIP) --no-build-isolation seqeval==1.2.2
	$(PIP) -r requirements.txt
	$(PIP) --no-deps -e .
	touch $@

# requirements-gpu-compile.txt: jax's CUDA plugin and ptxas (257 MB, 15 s) for the GPU kernel
# census test (tests/test_aot_gpu.py: BERT-Base's step compiled for an H100, 15-30 s).
$(DEV): $(RUNTIME) requirements-dev.txt requirements-tpu.txt requirements-beam.txt \
		requirements-gpu-compile.txt
	$(PIP) -r requirements-dev.txt -r requirements-tpu.txt -r requirements-beam.txt \
		-r requirements-gpu-compile.txt
	touch $@

# Two worker processes, each test file whole on one (module fixtures such as the MiniLM
# SavedModel export run once): 11 min instead of 15 on the 2-core machine. Not -n auto: each
# worker holds 8 simulated devices and up to ~5 GB.
test: $(DEV)
	$(PYTHON) -m pytest -q -n 2 --dist loadfile tests

bench: $(DEV)
	$(PYTHON) bench/model_step.py
	$(PYTHON) bench/learning_curve.py
	$(PYTHON) bench/create_data.py
	$(PYTHON) bench/create_data_beam.py
	$(PYTHON) bench/reader.py
	$(PYTHON) bench/tf_export.py
	$(PYTHON) bench/attention_probe.py

pretrain: $(RUNTIME)
	$(VENV)/bin/bert-jax pretrain --config configs/demo.py

clean-venv:
	rm -rf $(VENV)
