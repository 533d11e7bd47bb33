# The two commands of the quick start: `make run` and `make test`. Each does its own set-up
# on a fresh Debian machine (as root): Debian packages, a virtualenv, the package itself.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DATA_DIR ?= run-data
# Debian packages the project needs, as "command:package" pairs; a command given as an
# absolute path is checked as that file (the CNI plugins live in /usr/lib/cni, not on PATH).
DEB_NEEDS := etcd:etcd-server runc:runc crun:crun busybox:busybox-static umoci:umoci skopeo:skopeo mkfs.ext4:e2fsprogs /usr/lib/cni/bridge:containernetworking-plugins nft:nftables ip:iproute2 mkfs.btrfs:btrfs-progs
PYTEST_ARGS ?=

.PHONY: run test setup debs lint unit bench clean

run: setup
	$(BIN)/python -m compileall -q src
	$(BIN)/ephemera up --data-dir $(DATA_DIR) --demo

# The suite starts hundreds of Python processes (each cluster's components, kubectl's plugin):
# their modules are compiled once here, so that none of them compiles its imports again
# where PYTHONDONTWRITEBYTECODE keeps Python from caching what it compiled.
test: setup lint
	$(BIN)/python -m compileall -q src tests bench
	$(BIN)/pytest -n auto --dist loadgroup -q $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check src tests bench scripts examples
	$(BIN)/mypy
	$(BIN)/lint-imports

setup: debs $(VENV)/.installed

debs:
	@missing=""; for pair in $(DEB_NEEDS); do \
	  cmd=$${pair%%:*}; pkg=$${pair##*:}; \
	  case $$cmd in \
	    /*) test -x $$cmd || missing="$$missing $$pkg" ;; \
	    *) command -v $$cmd >/dev/null 2>&1 || missing="$$missing $$pkg" ;; \
	  esac; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(VENV)/.installed: pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

bench: setup
	$(BIN)/python -m bench.api
	$(BIN)/python -m bench.pod_start
	$(BIN)/python -m bench.eviction
	$(BIN)/python -m bench.dynamic_swap
	$(BIN)/python -m bench.warm_pool
	$(BIN)/python -m bench.accounting
	$(BIN)/python -m bench.service
	$(BIN)/python -m bench.workloads

clean:
	rm -rf $(VENV) $(DATA_DIR) .pytest_cache .mypy_cache .ruff_cache
