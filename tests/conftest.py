import gc
import os
import tempfile

# Tests run on the CPU with deterministic float32 matmuls.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Identical programs compiled by several tests, xdist workers and the processes that tests start
# (which inherit the environment, where JAX reads these) are compiled once.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), "normattn_jax_test_cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
# Compiling dominates the suite's time: `make test` compiles for a short compile
# (normattn_jax.cli.command.QUICK_COMPILE_FLAGS: the elemental emitter, no LLVM passes; see
# `fusion_emitters` for what the fusion emitters keep), `make test-all`
# (NORMATTN_JAX_TEST_OPTIMIZED=1) as the runs do. Processes that tests start inherit it.
if os.environ.get("NORMATTN_JAX_TEST_OPTIMIZED", "0") != "1":
  from normattn_jax.cli.command import quick_compile  # noqa: E402
  quick_compile()

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "float32")

import pytest  # noqa: E402


# The files that take longest in `make test` (pytest --durations, summed per file), slowest
# first. With --dist loadfile a worker takes the next file in the collection's order whenever
# it runs short of tests, so these start first and the short files fill in at the end, instead
# of one long file running alone on one worker while the other sits idle.
HEAVIEST_FIRST = (
    "test_grid.py", "test_fused.py", "test_padding.py", "test_finetune.py", "test_fast.py",
    "test_blocks.py", "test_workdir.py", "test_module_options.py", "test_weights.py",
    "test_distributed.py", "test_export_check.py", "test_new_weights.py", "test_card_lm.py",
    "test_analysis_majority.py", "test_cell_independence.py", "test_finetune_guards.py",
    "test_module_dropin.py", "test_mixing.py", "test_retrain_arch.py", "test_weights_exact.py",
    "test_albert.py", "test_reproduction_tables.py", "test_analysis_explaining_away.py",
    "test_causality.py", "test_cli.py", "test_step_cuts.py", "test_fast_new.py",
    "test_task_registry.py", "test_estimate.py", "test_registry.py")


def file_rank(item) -> int:
  """Where the item's file starts: its place in ``HEAVIEST_FIRST``, the others after them."""
  name = item.path.name
  return HEAVIEST_FIRST.index(name) if name in HEAVIEST_FIRST else len(HEAVIEST_FIRST)


def pytest_configure(config):
  """xdist takes the files in the collection's order (``HEAVIEST_FIRST``), not by how many
  tests each holds, its default."""
  if hasattr(config.option, "loadscopereorder"):
    config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
  """``@pytest.mark.fast_subset(keep)`` on a parametrised test: ``make test`` runs the parameter
  sets for which ``keep(params)`` (a dict, argument name -> value) is true, a set that reaches
  every code path the test checks; the others are marked slow, for ``make test-all``. The
  heaviest files go first (``HEAVIEST_FIRST``), each file's tests in their order."""
  for item in items:
    marker = item.get_closest_marker("fast_subset")
    if marker is not None and not marker.args[0](item.callspec.params):
      item.add_marker(pytest.mark.slow)
  items.sort(key=file_rank)


@pytest.fixture
def fusion_emitters(monkeypatch):
  """Programs jitted during the test are compiled with XLA's fusion emitters, as in the runs: a
  model's arithmetic is then the same bits in a program of one model and of many, which the
  elemental emitter that ``make test`` compiles with does not keep."""
  jit = jax.jit

  def with_fusion_emitters(fun, *, compiler_options=None, **kwargs):
    options = dict(compiler_options or {}, xla_cpu_use_fusion_emitters=True)
    return jit(fun, compiler_options=options, **kwargs)

  monkeypatch.setattr(jax, "jit", with_fusion_emitters)


@pytest.fixture(scope="session", autouse=True)
def session_temp_dir(tmp_path_factory):
  """Temporary files go under the session's folder, which pytest prunes after a few sessions:
  TFDS leaves an empty folder in the temporary directory each time a builder finds no prepared
  data, dozens per run, which would otherwise pile up in /tmp. Processes that tests start
  inherit it through TMPDIR."""
  folder = str(tmp_path_factory.mktemp("tempfile"))
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(tempfile, "tempdir", folder)
    patch.setenv("TMPDIR", folder)
    yield folder


@pytest.fixture(scope="module", autouse=True)
def collect_then_freeze_the_heap():
  """Each test file starts with what the files before it left on the heap (mostly jax's caches
  of traced and compiled programs, half a million objects after three files) frozen: the garbage
  collector's full collections then scan only what the file creates. A frozen object dropped
  later is never freed, which left the suite's peak memory as it was."""
  gc.collect()
  gc.freeze()
