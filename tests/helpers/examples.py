"""How many inputs a property test draws: ``make test`` a quarter of them (at least 5), the same
checks on fewer drawn inputs; ``make test-all`` (``NORMATTN_JAX_TEST_ALL=1``) every one."""
import os

ALL = os.environ.get("NORMATTN_JAX_TEST_ALL", "0") == "1"


def examples(count: int) -> int:
  """``count`` under ``make test-all``, else a quarter of it, at least 5."""
  return count if ALL else max(5, count // 4)
