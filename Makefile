# Every target creates and reuses .venv; a requirements file newer than its stamp reinstalls.
VENV := .venv
PYTHON := $(VENV)/bin/python
PIP := $(PYTHON) -m pip install --quiet --disable-pip-version-check
RUNTIME := $(VENV)/.runtime-installed
DEV := $(VENV)/.dev-installed

.PHONY: test pretrain bench clean-venv

$(PYTHON):
	python3 -m venv $(VENV)

# The pinned set, then the package as a user installs it (its ranges must accept the pins, so
# the second line installs nothing more). Nothing here that `pip install .` does not do.
$(RUNTIME): requirements.txt pyproject.toml | $(PYTHON)
	$(PIP) -r requirements.txt
	$(PIP) -e .
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
