# kiln — two commands do everything on a fresh machine:
#   make run    install what is missing, build, run the bundled example and a bench table
#   make test   install what is missing, build, run every test (also under ASan+UBSan)

PYTHON ?= python3
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
# Seconds each fuzz target runs in `make test`; a longer hunt: make test-fuzz FUZZ_SECONDS=600
FUZZ_SECONDS ?= 60
KILN = $(BUILD)/bin/kiln
APT_PACKAGES = cmake gcc make pkg-config protobuf-c-compiler libprotobuf-c-dev libcmocka-dev \
               libxxhash-dev clang clang-format
PIP_PACKAGES = onnx==1.19.0 onnxruntime numpy pytest scikit-build-core tritonclient[http,grpc] \
               polygraphy onnx-graphsurgeon ml_dtypes mypy~=2.4
# The Triton tests use only the tritonserver binary and libraries this wheel carries, so its
# Python dependencies (which pin an old numpy) are left out.
PIP_NODEPS_PACKAGES = nvidia-pytriton
EXAMPLE_DIR = tests/models/mobilenetv2_mini
EXAMPLE = $(EXAMPLE_DIR)/model.onnx

.PHONY: all deps build asan run test test-unit test-conformance test-conformance-next test-models test-python test-types test-tools test-asan \
        test-tsan test-fuzz test-install test-triton test-format bench test-gpu test-gpu-models test-gpu-node \
        test-gpu-kernels build-cuda \
        format clean

all: build

deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	@$(PYTHON) -c "import onnx, onnxruntime, numpy, pytest, scikit_build_core, tritonclient.http, \
	  tritonclient.grpc, polygraphy, onnx_graphsurgeon, ml_dtypes, mypy; assert onnx.__version__ == '1.19.0'" \
	  2>/dev/null || $(PYTHON) -m pip install -q $(PIP_PACKAGES)
	@$(PYTHON) -c "import importlib.util as u; assert u.find_spec('pytriton')" 2>/dev/null || \
	  $(PYTHON) -m pip install -q --no-deps $(PIP_NODEPS_PACKAGES)

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DKILN_TRITON=ON >/dev/null
	cmake --build $(BUILD) -j$(JOBS)

asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j$(JOBS)

run: build
	@echo "== kiln inspect $(EXAMPLE)"
	$(KILN) inspect $(EXAMPLE) --shapes input:1x3x64x64,2x3x64x64,4x3x64x64
	@echo "== kiln build (dynamic batch 1..4)"
	$(KILN) build $(EXAMPLE) -o $(BUILD)/example.plan --shapes input:1x3x64x64,2x3x64x64,4x3x64x64
	@echo "== kiln run (batch 2)"
	$(KILN) run $(BUILD)/example.plan --input input=$(EXAMPLE_DIR)/case1_2x3x64x64/input.npy \
	  --output-dir $(BUILD)/example-out
	@$(PYTHON) examples/show_outputs.py $(BUILD)/example-out $(EXAMPLE_DIR)/case1_2x3x64x64
	@echo "== bench (kiln vs onnxruntime)"
	$(PYTHON) bench/bench.py --quick --kiln $(KILN)

test-unit: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# onnx's node tests, then its three other backend test sets, each against its expected list.
CONFORMANCE_SUITES = node pytorch-converted pytorch-operator simple

test-conformance: build
	for s in $(CONFORMANCE_SUITES); do \
	  $(PYTHON) tests/conformance/run_node_tests.py --suite $$s --kiln $(KILN) --jobs $(JOBS) --check \
	    || exit 1; done
	$(MAKE) --no-print-directory test-conformance-next

# onnx 1.23.2's node cases (opsets up to 28), made from its case scripts (no wheel ships them),
# against their own expected list.
ONNX_NEXT = $(BUILD)/onnx-next
ONNX_NEXT_EXPECTED = tests/conformance/expected_failures_onnx_next.txt
test-conformance-next: build
	$(PYTHON) tests/conformance/onnx_next.py $(ONNX_NEXT)
	$(PYTHON) tests/conformance/run_node_tests.py --data $(ONNX_NEXT)/data/node \
	  --expected $(ONNX_NEXT_EXPECTED) --kiln $(KILN) --jobs $(JOBS) --check

test-models: build
	KILN=$(KILN) $(PYTHON) -m pytest -q tests/models

test-python: build
	KILN=$(KILN) KILN_PLUGINS=$(BUILD)/plugins KILN_LIBRARY=$(BUILD)/lib/libkiln.so \
	  KILN_BACKEND_PATH=$(CURDIR)/$(BUILD)/tests/lib \
	  PYTHONPATH=python $(PYTHON) -m pytest -q $$(ls -d tests/python tests/plugins tests/backend tests/layout 2>/dev/null)

# The package's type hints: mypy over the package and a typed user script ([tool.mypy] in
# pyproject.toml), then the script run for real against the build.
test-types: build
	$(PYTHON) -m mypy python/kiln tests/python/typed_usage.py
	KILN_LIBRARY=$(BUILD)/lib/libkiln.so PYTHONPATH=python $(PYTHON) tests/python/typed_usage.py

# Under ThreadSanitizer: the backend seam's threads (8 contexts of one engine split across
# testdev and the host), the pool (test_threads), the convs' threaded orders (test_conv: Winograd
# batches on up to 7 threads; test_conv_pixels: contexts racing to pack the pixel-row weights)
# and the model tests with a TSan kiln.
test-tsan: deps
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_TSAN=ON >/dev/null
	cmake --build $(TSAN_BUILD) -j$(JOBS) --target test_backend_seam test_threads test_conv \
	  test_conv_pixels kiln kiln_testdev kiln_test_scale_plugin
	cd $(TSAN_BUILD) && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure \
	  -R 'test_backend_seam|test_threads|test_conv$$|test_conv_pixels'
	# the model tests with a TSan kiln (threaded int8 convs, bf16 and float32 GEMMs sharing
	# packed panels): a report ends kiln with an error, which fails the test
	TSAN_OPTIONS=halt_on_error=1 KILN=$(TSAN_BUILD)/bin/kiln $(PYTHON) -m pytest -q tests/models \
	  -k 'not python'

test-tools: build
	KILN=$(BUILD)/bin/kiln KILN_PLUGINS=$(BUILD)/plugins KILN_LIBRARY=$(BUILD)/lib/libkiln.so \
	  PYTHONPATH=python $(PYTHON) -m pytest -q tests/tools

# The sanitizer pass drives the CLI only: the test_python_* cases load libkiln and backend
# modules into Python, where ASan libraries abort an uninstrumented interpreter (they run in
# test-python against the Release build).
test-asan: asan
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j$(JOBS)
	for s in $(CONFORMANCE_SUITES); do \
	  ASAN_OPTIONS=detect_leaks=1 $(PYTHON) tests/conformance/run_node_tests.py --suite $$s \
	    --kiln $(ASAN_BUILD)/bin/kiln --jobs $(JOBS) --check --timeout 120 || exit 1; done
	$(PYTHON) tests/conformance/onnx_next.py $(ONNX_NEXT)
	ASAN_OPTIONS=detect_leaks=1 $(PYTHON) tests/conformance/run_node_tests.py \
	  --data $(ONNX_NEXT)/data/node --expected $(ONNX_NEXT_EXPECTED) \
	  --kiln $(ASAN_BUILD)/bin/kiln --jobs $(JOBS) --check --timeout 120
	ASAN_OPTIONS=detect_leaks=1 KILN=$(ASAN_BUILD)/bin/kiln KILN_PLUGINS=$(ASAN_BUILD)/plugins \
	  KILN_BACKEND_PATH=$(CURDIR)/$(ASAN_BUILD)/tests/lib \
	  $(PYTHON) -m pytest -q tests/models tests/plugins tests/backend -k "not test_python_"

# Every libFuzzer target under ASan+UBSan (clang) for FUZZ_SECONDS from the checked-in corpus,
# after replaying tests/fuzz/regressions: a new crash, hang or sanitizer report fails the run.
test-fuzz: deps
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=Debug -DKILN_FUZZ=ON -DKILN_WERROR=OFF >/dev/null
	cmake --build $(FUZZ_BUILD) -j$(JOBS) --target fuzz_onnx fuzz_plan fuzz_npy fuzz_tensor_proto
	tests/fuzz/run_bounded.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(JOBS)

# cmake --install and pip install . (an outside program and plugin, a fresh virtualenv).
test-install: build
	KILN_BUILD=$(BUILD) $(PYTHON) -m pytest -q tests/install

# The Triton backend under the real tritonserver; prints the load test's figures.
test-triton: build
	KILN_BUILD=$(BUILD) $(PYTHON) -m pytest -q tests/triton
	@cat $(BUILD)/triton/load_report.txt

test: test-format test-unit test-conformance test-models test-python test-types test-tools test-install \
      test-triton test-asan test-tsan test-fuzz

# The CUDA backend module and its tests, on a machine with a GPU and the CUDA 13 toolkit; never
# part of `make test` (CI has no GPU).
CUDA_BUILD ?= build-cuda
CUDA_HOME ?= /usr/local/cuda
build-cuda:
	cmake -S . -B $(CUDA_BUILD) -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON -DKILN_TRITON=ON \
	  -DCMAKE_CUDA_COMPILER=$(CUDA_HOME)/bin/nvcc -DCUDAToolkit_ROOT=$(CUDA_HOME)
	cmake --build $(CUDA_BUILD) -j$(JOBS) --target kiln kiln_shared kiln_cuda triton_kiln swish \
	  relu_sigmoid_mul

# Three parts, each inside one short session on a shared GPU machine: the models (fp32 against
# the CPU, replays, fp16/bf16 from .onnx and through plans), onnx's node tests (a CUDA start per
# case: run them alone), and the kernel, thread, tactic, plugin, Triton and sanitizer checks.
GPU_ENV = KILN_BACKEND_PATH=$(CURDIR)/$(CUDA_BUILD)/lib KILN_LIBRARY=$(CURDIR)/$(CUDA_BUILD)/lib/libkiln.so
GPU_KILN = --kiln $(CUDA_BUILD)/bin/kiln
test-gpu: test-gpu-models test-gpu-node test-gpu-kernels

test-gpu-models: build-cuda
	$(GPU_ENV) $(PYTHON) tests/cuda/diff_backends.py $(GPU_KILN) --replays --precision fp16 bf16 \
	  --jobs $(JOBS)

test-gpu-node: build-cuda
	$(GPU_ENV) $(PYTHON) tests/cuda/diff_backends.py $(GPU_KILN) --models resnet_mini --node-tests \
	  --jobs $(JOBS) $(if $(NODE_DATA),--node-data $(NODE_DATA))

test-gpu-kernels: build-cuda
	$(GPU_ENV) $(PYTHON) tests/cuda/attention_gpu.py
	$(GPU_ENV) $(PYTHON) tests/cuda/cnn_kernels_gpu.py $(GPU_KILN)
	$(GPU_ENV) $(PYTHON) tests/cuda/conv1x1_gpu.py
	$(GPU_ENV) $(PYTHON) tests/cuda/conv_graph_gpu.py
	$(GPU_ENV) $(PYTHON) tests/cuda/tactics.py $(GPU_KILN)
	KILN_BACKEND_PATH=$(CURDIR)/$(CUDA_BUILD)/lib $(PYTHON) tests/cuda/triton_gpu.py $(GPU_KILN) \
	  --backend-lib $(CUDA_BUILD)/triton/libtriton_kiln.so
	$(GPU_ENV) $(PYTHON) tests/cuda/plugins_gpu.py $(GPU_KILN) --plugins $(CUDA_BUILD)/plugins --torch
	$(GPU_ENV) $(PYTHON) tests/cuda/threads_gpu.py $(GPU_KILN) --precision fp32 fp16
	$(GPU_ENV) $(PYTHON) tests/cuda/codegen_gpu.py $(GPU_KILN)
	KILN_BACKEND_PATH=$(CURDIR)/$(CUDA_BUILD)/lib \
	  $(PYTHON) tests/cuda/sanitize_gpu.py $(GPU_KILN) --precision fp32 fp16 --racecheck

bench: build
	$(PYTHON) bench/bench.py --kiln $(KILN)

FORMAT_FILES = git ls-files '*.c' '*.h' '*.cu' '*.cuh'
format:
	$(FORMAT_FILES) | xargs clang-format -i

# Every C and CUDA source as .clang-format lays it out; `make format` mends what this names.
test-format: deps
	@$(FORMAT_FILES) | xargs clang-format --dry-run -Werror || \
	  { echo "test-format: the files above are not formatted (make format)"; exit 1; }

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
