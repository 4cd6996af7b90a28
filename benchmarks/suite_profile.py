"""Where the test suite's time goes: per test file, the seconds its tests spent tracing programs,
lowering them to MLIR and compiling them (JAX's own monitoring events; a compile that the
persistent cache answers counts its fetch), the rest (running, Python, files, the processes
that tests start), and how many programs were compiled or fetched. A program is compiled per
function and shapes: an operation run outside ``jit`` is one program per new shape.

  python benchmarks/suite_profile.py                      # make test's suite
  python benchmarks/suite_profile.py tests/test_grid.py -n 0

pytest runs with this file as a plugin in every worker (with no arguments, as ``make test``
runs it: ``-n 2 --dist loadfile -m "not slow" tests``); each worker writes its sums to a
temporary folder, read at the end into one table, the heaviest files first, and the suite's
shares. The phases' sum is CPU work over both workers, not the wall clock.
"""
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MAKE_TEST = ["-n", "2", "--dist", "loadfile", "-m", "not slow", "tests"]
PHASES = {"/jax/core/compile/jaxpr_trace_duration": "trace",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
          "/jax/core/compile/backend_compile_duration": "compile",
          # a program the persistent cache answered: the compile it spared, and the fetch's time
          "/jax/compilation_cache/compile_time_saved_sec": "cache_saved",
          "/jax/compilation_cache/cache_retrieval_time_sec": "cache_fetch"}
COLUMNS = ("wall", "trace", "lower", "compile", "rest", "programs")  # programs: compiled or fetched
OUT_ENV = "NORMATTN_JAX_SUITE_PROFILE"

# ----- the plugin, loaded in each pytest process -----

_sums = collections.defaultdict(collections.Counter)  # test file -> column -> seconds or count
_current = ["(collection)"]


def _on_event(event: str, seconds: float, **_) -> None:
  phase = PHASES.get(event)
  if phase is not None:
    _sums[_current[0]][phase] += seconds
    if phase in ("compile", "cache_fetch"):
      _sums[_current[0]]["programs" if phase == "compile" else "fetches"] += 1


def pytest_configure(config):
  """Listen to JAX's compile events from the first test on."""
  del config
  from jax import monitoring
  monitoring.register_event_duration_secs_listener(_on_event)


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
  """Time the collection: importing the test files compiles their module-level arrays."""
  del session
  start = time.perf_counter()
  yield
  _sums["(collection)"]["wall"] += time.perf_counter() - start


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  """Name the file whose test runs now, and time the test (setup, call and teardown)."""
  del nextitem
  _current[0] = os.path.relpath(str(item.path), REPO)
  start = time.perf_counter()
  yield
  _sums[_current[0]]["wall"] += time.perf_counter() - start


def pytest_unconfigure(config):
  """This process's sums, into the runner's folder."""
  del config
  folder = os.environ.get(OUT_ENV)
  if folder:
    with open(os.path.join(folder, f"{os.getpid()}.json"), "w") as f:
      json.dump({name: dict(sums) for name, sums in _sums.items()}, f)

# ----- the runner -----


def merged(folder: str) -> dict:
  """Every process's sums added up, per test file."""
  total = collections.defaultdict(collections.Counter)
  for name in os.listdir(folder):
    with open(os.path.join(folder, name)) as f:
      for test_file, sums in json.load(f).items():
        total[test_file].update(sums)
  for sums in total.values():
    sums["rest"] = sums["wall"] - sums["trace"] - sums["lower"] - sums["compile"]
  return total


def table(total: dict, rows: int = 30) -> list[str]:
  """The heaviest ``rows`` files, then the suite's sums and each phase's share of them."""
  lines = ["| file | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
  ordered = sorted(total.items(), key=lambda item: -item[1]["wall"])
  for test_file, sums in ordered[:rows]:
    lines.append(f"| {test_file} | " + " | ".join(
        f"{sums[c]:.0f}" if c == "programs" else f"{sums[c]:.1f}" for c in COLUMNS) + " |")
  suite = sum(total.values(), collections.Counter())
  suite["rest"] = suite["wall"] - suite["trace"] - suite["lower"] - suite["compile"]
  files = sum(name != "(collection)" for name in total)
  lines.append(f"| all ({files} files) | " + " | ".join(
      f"{suite[c]:.0f}" if c == "programs" else f"{suite[c]:.1f}" for c in COLUMNS) + " |")
  wall = max(suite["wall"], 1e-9)
  lines.append("shares of the tests' time: " + ", ".join(
      f"{phase} {suite[phase] / wall:.0%}" for phase in ("trace", "lower", "compile", "rest")))
  lines.append(f"the persistent cache: {suite['fetches']:.0f} programs fetched in "
               f"{suite['cache_fetch']:.1f} s, sparing {suite['cache_saved']:.1f} s of compiling")
  lines.append(f"programs={suite['programs']:.0f} "
               f"compile_pipeline_share={1 - suite['rest'] / wall:.2f}")
  return lines


def main(argv: list[str]) -> int:
  with tempfile.TemporaryDirectory() as folder:
    env = dict(os.environ, **{OUT_ENV: folder})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, env.get("PYTHONPATH")]))
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "suite_profile",
                          *(argv or MAKE_TEST)], cwd=REPO, env=env)
    elapsed = time.perf_counter() - start
    print(f"pytest ran {elapsed:.0f} s (exit {run.returncode})")
    print("\n".join(table(merged(folder))))
  return run.returncode


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
