import os
import tempfile

# Tests run on the CPU with deterministic float32 matmuls.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Identical programs compiled by several tests, xdist workers and the processes that tests start
# (which inherit the environment, where JAX reads these) are compiled once.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), "normattn_jax_test_cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "float32")
