# deepseek-operator: common commands. `make help` lists them.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Where the Go-built binaries and the vLLM virtualenvs are cached (the hack scripts and tests read it too).
DSO_CACHE ?= $(HOME)/.cache/deepseek-operator

.PHONY: help venv generate verify docs lint typecheck test test-prereqs test-unit image test-container kind-node test-kind corpus cluster-bins vllm-venvs vllm-newest vllm-router-venv vllm-catalog conformance bench bench-operator demo clean

help: ## show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

venv: $(BIN)/deepseek-operator ## create .venv and install the project with its dev extras

$(BIN)/deepseek-operator: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $@

generate: venv ## regenerate crds/ (and the chart's copies) and docs/reference/api.md from the pydantic models
	$(BIN)/deepseek-operator crds > crds/serving.deepseek-operator.io_deepseekservings.yaml
	$(BIN)/python -m hack.api_reference --write
	@if [ -d charts/deepseek-operator ]; then $(BIN)/python -m hack.generate_chart_files; fi

verify: generate ## fail if generated files are stale
	git diff --exit-code -- crds charts docs README.md

docs: venv ## build the documentation site (docs/ -> site/) with mkdocs --strict: broken links and anchors fail
	$(BIN)/mkdocs build --strict

lint: venv ## ruff check + format check + the import contracts (import-linter, pyproject.toml)
	$(BIN)/ruff check operator tests bench hack conformance
	$(BIN)/ruff format --check operator tests bench hack conformance
	$(BIN)/lint-imports --no-cache

typecheck: venv ## mypy (strict on the pure core)
	$(BIN)/mypy

cluster-bins: ## build the local control plane binaries (cached under ~/.cache/deepseek-operator)
	hack/build-control-plane.sh

vllm-venvs: ## install every supported vLLM release into cached virtualenvs (~/.cache/deepseek-operator/vllm)
	hack/install-vllm.sh

vllm-newest: ## install only the newest supported vLLM release (what `make test` checks)
	hack/install-vllm.sh --newest

vllm-router-venv: ## install the pinned vllm-router (router-requirements.txt) into a cached virtualenv (~/.cache/deepseek-operator/vllm-router)
	hack/install-vllm-router.sh

conformance: venv vllm-venvs vllm-router-venv ## every supported vLLM release's own code against our engine and renderer, P/D pairs and their NIXL hash included (tables per release; non-zero on any mismatch)
	$(BIN)/python -m conformance.harness
	$(BIN)/python -m conformance.pd_harness
	$(BIN)/pytest -q tests/conformance/test_router_conformance.py

vllm-catalog: vllm-venvs ## re-export catalog/vllm/<release>.json from each installed release
	@for v in $$(. hack/versions.env && echo $$VLLM_RELEASES); do \
	  $(DSO_CACHE)/vllm/$$v/bin/python -m conformance.extract --out operator/deepseek_operator/catalog/vllm || exit 1; \
	done

image: venv ## build the image from the Dockerfile (starts a Docker engine, builds a Debian Python base; cached under ~/.cache/deepseek-operator)
	PYTHON=$(abspath $(BIN)/python) hack/build-image.sh

test-container: image cluster-bins ## the image tests only: CLI, render, crds, and the operator and agent images on the local control plane with in-cluster config
	DSO_REQUIRE_CLUSTER=1 $(BIN)/pytest tests/container -q

# No make-level dependency on cluster-bins: hack/build-kind-node.sh asks hack/build-control-plane.sh
# for the binaries it needs (under that script's lock) after its own first steps, which so overlap
# with a cold control-plane build.
kind-node: ## build a kind node image with no registry, with CoreDNS, kube-network-policies, LWS and the pod network agent preloaded (hack/build-kind-node.sh; ~10 min cold, seconds warm)
	hack/build-kind-node.sh

test-kind: venv cluster-bins kind-node image ## the kind tier: the README kind recipe (4 nodes, DNS, pod network, NetworkPolicy, LWS), operator failover, a two-node LWS group
	$(BIN)/pytest tests/kind -q -s

test-unit: venv ## unit tests only (no cluster)
	$(BIN)/pytest tests/unit -q

CORPUS ?= /tmp/deepseek-operator-corpus
corpus: venv ## capture `render` over examples, fixtures and generated variants into $(CORPUS) (diff -r two captures; ~10 min)
	$(BIN)/python -m hack.render_corpus capture $(CORPUS)

# pytest-xdist workers of `make test` (tests/schedule.py says how the files are spread over them);
# `make test TEST_WORKERS=0` runs the suite in one process, in file order.
TEST_WORKERS ?= 3
# What `make test` builds and checks before pytest, BUILD_JOBS side by side (on a cold machine
# most of it waits on downloads; each hack script takes its own lock, so parallel runs are safe).
# Their logs interleave as they come, each line prefixed with its script's name and the time.
BUILD_JOBS ?= 6
test-prereqs: venv cluster-bins vllm-newest vllm-router-venv image kind-node lint typecheck

test: ## THE test command: builds, lint and types side by side, then unit + integration + e2e against a real local control plane, the built image and the kind tier (TEST_WORKERS=3 in parallel)
	$(MAKE) --no-print-directory -j $(BUILD_JOBS) test-prereqs
	DSO_REQUIRE_CLUSTER=1 $(BIN)/pytest -q -n $(TEST_WORKERS)

bench: venv ## benchmarks of the core (resolve over 5,000 nodes, render wall time)
	$(BIN)/python -m bench.bench_core

bench-operator: venv cluster-bins ## operator at scale vs a no-op kopf operator: start-up over 1k-10k nodes, latency idle + burst of 100-1,000 DeepSeekServings; writes bench/results/operator-scale.{json,png} (~8 min on 2 cores)
	$(BIN)/python -m bench.bench_operator $(BENCH_ARGS)

demo: venv ## local control plane + kwok GPU nodes + helm install + operator + example; prints `kubectl get dss` and the checks
	$(BIN)/python -m hack.demo

clean: ## remove the virtualenv and caches (not the cached binaries)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache .grimp_cache
