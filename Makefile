# Danqing: the two commands a newcomer needs are `make run` and `make test`.
# Both install what is missing (scripts/setup.sh) and build with CMake presets.
.PHONY: all setup build run serve test test-asan test-tsan bench format format-check clean

PRESET ?= default
CTEST_ARGS ?=

all: build

setup:
	@scripts/setup.sh

build: setup
	@cmake --preset $(PRESET) >/dev/null
	@cmake --build --preset $(PRESET)

# Shows the node's GPUs (real driver if any, else the fake 8xA100 node), then
# starts the Danqing service on localhost:8080 (scripts/serve.sh).
run: build
	@scripts/run.sh
	@scripts/serve.sh

# The Danqing service on localhost:8080 with the bundled data (scripts/serve.sh).
serve: build
	@scripts/serve.sh

test: build
	@ctest --preset $(PRESET) $(CTEST_ARGS)

# The same tests under AddressSanitizer + UndefinedBehaviorSanitizer.
test-asan: setup
	@cmake --preset asan >/dev/null
	@cmake --build --preset asan
	@ctest --preset asan $(CTEST_ARGS)

test-tsan: setup
	@cmake --preset tsan >/dev/null
	@cmake --build --preset tsan
	@ctest --preset tsan $(CTEST_ARGS)

bench: build
	@scripts/bench.sh

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

format-check:
	@git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror

clean:
	rm -rf build

# Kubernetes manifests: render and validate every overlay offline (deploy/,
# docs/operations.md); build both container images as OCI archives with buildah.
.PHONY: deploy-check images
deploy-check: build
	@scripts/deploy-check.sh --agent build/$(PRESET)/cmd/danqing-device-plugin/danqing-device-plugin

images: build
	@scripts/build-images.sh --agent build/$(PRESET)/cmd/danqing-device-plugin/danqing-device-plugin \
	  --service build/$(PRESET)/cmd/danqing/danqing --out build/images
# libFuzzer targets (preset `fuzz`, clang + ASan/UBSan), see docs/reliability.md.
# `make fuzz` runs each fuzzer FUZZ_SECONDS (default 30 s); `make fuzz-ci` is
# the short run CI does.
.PHONY: fuzz fuzz-ci
FUZZ_SECONDS ?= 30
FUZZ_CI_SECONDS ?= 45

fuzz: setup
	@scripts/fuzz.sh $(FUZZ_SECONDS)

fuzz-ci: setup
	@scripts/fuzz.sh $(FUZZ_CI_SECONDS)

# Soak (issue 10): the node agent and the service under sustained load and
# faults for SOAK_MINUTES each (default 10); prints both reports. Not in CI.
.PHONY: soak
SOAK_MINUTES ?= 10
soak: build
	@build/$(PRESET)/bench/agent_soak --minutes $(SOAK_MINUTES)
	@build/$(PRESET)/bench/service_soak --minutes $(SOAK_MINUTES)

# The CUDA backend's GPU checks (issue 11), packed for a GPU machine that has a
# driver but not this project's build dependencies: run `scripts/gpu-run.sh .gpu`
# there (docs/render.md, "GPU check").
.PHONY: gpu-bundle
gpu-bundle: build
	@scripts/gpu-bundle.sh
