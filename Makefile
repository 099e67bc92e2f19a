# verlfit: images, tests and shortcuts. `make` or `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV ?= .venv
PYTEST_ARGS ?=

.PHONY: help
help: ## list targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: test
test: ## run the whole CPU test suite (creates $(VENV) with pinned packages first)
	bash tests/bootstrap.sh
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)
