# etcd-compute: the two commands a newcomer needs are `make demo` and `make test`.
PY := .venv/bin/python
# Extra pytest arguments, e.g. make test PYTEST_ARGS="-k scheduler -x"
PYTEST_ARGS ?=
# Python writes its bytecode (a PYTHONDONTWRITEBYTECODE=1 in the caller's environment
# would have every compute.py, schedule.py, API worker and pytest worker compile the
# package again, and pytest rewrite every test module's asserts on every run).
unexport PYTHONDONTWRITEBYTECODE
# pytest-xdist workers for the unit layer: on 2 cores, in a fresh clone (every test module's
# asserts rewritten), 22 s alone and 15 s on two (each collects: 20 s of CPU instead of 16;
# on a machine loaded by other work one process may do better). UNIT_WORKERS=0: one process.
UNIT_WORKERS ?= 2
# pytest-xdist workers for the functional tests (they mostly wait on services; measured on
# a 2-core machine, see docs/explanation/testing.md). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 4

.PHONY: help install install-tempest demo up down status test unit mutations lint docs tempest \
	bench bench-full bench-deps clean

help:
	@echo "make demo      run the whole system once on local services, then clean up"
	@echo "               (KEEP=1 keeps it running; PLAIN=1: no TLS/RBAC, for quick experiments)"
	@echo "make test      lint, import contracts, unit tests, then the functional tests against"
	@echo "               real etcd, Placement and libvirt"
	@echo "make unit      the unit layer alone (seconds, no services)"
	@echo "make docs      build the documentation site into site/ (strict: a broken link, a page"
	@echo "               out of the navigation or a reference page out of date fails it)"
	@echo "make tempest   Tempest's compute API tests against a cloud of its own (SMOKE=1: the"
	@echo "               smoke-tagged ones, as make test runs them; SCENARIO=1: its scenario"
	@echo "               tests on real TCG guests reached from outside); report in run/"
	@echo "make mutations the unit tests must kill the mutations in tools/mutations.py"
	@echo "make up/down   start/stop local etcd, Placement, Keystone, Glance, Neutron on OVN, a"
	@echo "               hypervisor host and an outside namespace for trying commands by hand"
	@echo "               (TLS and RBAC; configs, clouds.yaml and run/outside in run/; make down"
	@echo "               removes everything they made). NETWORK=libvirt: the machine's libvirtd"
	@echo "               and its NAT network instead of Neutron (schedule.py alone)"
	@echo "make status    every piece make up / make demo KEEP=1 started"
	@echo "make bench     quick benchmarks (bench/); make bench-full for the REPORT.md figures"

install:
	@tools/install.sh

install-tempest:
	@tools/install.sh tempest

demo: install
	@$(PY) tools/demo.py $(if $(KEEP),--keep) $(if $(PLAIN),--plain) \
		$(if $(NETWORK),--network $(NETWORK))

up: install
	@$(PY) -m tools.local_services up $(if $(PLAIN),--plain) $(if $(NETWORK),--network $(NETWORK))

down:
	@$(PY) -m tools.local_services down

status:
	@$(PY) -m tools.local_services status

test: lint docs install-tempest
	@$(PY) -m pytest -q -n $(UNIT_WORKERS) tests/unit
	@$(PY) -m pytest --ignore=tests/unit -n $(TEST_WORKERS) --dist loadgroup \
		--no-loadscope-reorder --durations=25 --rerun-show-tracebacks $(PYTEST_ARGS)

unit: install
	@$(PY) -m pytest -q -n $(UNIT_WORKERS) tests/unit $(PYTEST_ARGS)

tempest: install-tempest
	@$(PY) -m tools.tempest_run $(if $(SMOKE),--smoke) $(if $(SCENARIO),--scenario) \
		$(if $(REGEX),--regex '$(REGEX)') $(if $(CONCURRENCY),--concurrency $(CONCURRENCY))

mutations: install
	@$(PY) tools/mutations.py

lint: install
	@$(PY) -m ruff check etcd_compute tests tools bench compute.py schedule.py cluster.py
	@.venv/bin/lint-imports --no-cache

# The reference pages generated from the code must match it (python -m tools.docs_reference
# writes them), README's links must lead somewhere, then MkDocs in strict mode: any warning
# (a broken link or anchor, a page left out of nav) fails the build.
docs: install
	@$(PY) -m tools.docs_reference --check
	@$(PY) -m tools.docs_links README.md
	@NO_MKDOCS_2_WARNING=1 .venv-docs/bin/mkdocs build --strict

bench: install bench-deps
	@$(PY) bench/run.py --quick

bench-full: install bench-deps
	@$(PY) bench/run.py

bench-deps:
	@.venv/bin/pip install -q --disable-pip-version-check -r requirements-bench.txt

clean: down
	rm -rf run .pytest_cache site
