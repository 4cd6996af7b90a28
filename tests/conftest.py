import os
import tempfile

# Tests run on the CPU with deterministic float32 matmuls.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "float32")
# Identical programs compiled by several tests (and xdist workers) are compiled once.
jax.config.update("jax_compilation_cache_dir",
                  os.path.join(tempfile.gettempdir(), "normattn_jax_test_cache"))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
