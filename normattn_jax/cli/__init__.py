"""The commands: one module per command (``python -m normattn_jax.cli.<command>``, or its
console script ``normattn-<command>``), the flags they share (``flags``) and the export check.
The top floor: it loads every built-in kind of run (``flags.load_builtin_kinds``), which nothing
below it names.

It needs the ``[experiments]`` extra; checked here, before any submodule imports it.
"""
from normattn_jax._extras import require

require("absl", "experiments")
require("ml_collections", "experiments")
