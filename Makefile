# etcd-compute: the two commands a newcomer needs are `make demo` and `make test`.
PY := .venv/bin/python
# Extra pytest arguments, e.g. make test PYTEST_ARGS="-k scheduler -x"
PYTEST_ARGS ?=

.PHONY: help install demo up down status test lint bench bench-full bench-deps clean

help:
	@echo "make demo      run the whole system once on local services, then clean up (KEEP=1 keeps it up)"
	@echo "make test      run the test suite against real etcd, Placement and libvirt"
	@echo "make up/down   start/stop local etcd, Placement and libvirtd for trying commands by hand"
	@echo "make bench     quick benchmarks (bench/); make bench-full for the REPORT.md figures"

install:
	@tools/install.sh

demo: install
	@$(PY) tools/demo.py $(if $(KEEP),--keep)

up: install
	@$(PY) -m etcd_compute.local_services up

down:
	@$(PY) -m etcd_compute.local_services down

status:
	@$(PY) -m etcd_compute.local_services status

test: install
	@$(PY) -m ruff check etcd_compute tests tools bench compute.py schedule.py
	@$(PY) -m pytest $(PYTEST_ARGS)

lint: install
	@$(PY) -m ruff check etcd_compute tests tools bench compute.py schedule.py

bench: install bench-deps
	@$(PY) bench/run.py --quick

bench-full: install bench-deps
	@$(PY) bench/run.py

bench-deps:
	@.venv/bin/pip install -q --disable-pip-version-check -r requirements-bench.txt

clean: down
	rm -rf run .pytest_cache
