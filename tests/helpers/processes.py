"""The environment of the processes tests start."""
import os

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)
FIXTURES = os.path.join(TESTS, "fixtures")


def subprocess_env(*paths, **variables) -> dict:
  """This process's environment with JAX on the CPU, the repository and ``paths`` first on
  PYTHONPATH and the caller's PYTHONPATH kept after them: where packages come through
  PYTHONPATH (a GPU machine's), a process started without it finds none. ``variables`` are
  set on top."""
  kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
  path = os.pathsep.join([REPO, *map(str, paths), *kept])
  return dict(os.environ, JAX_PLATFORMS="cpu", **variables, PYTHONPATH=path)
