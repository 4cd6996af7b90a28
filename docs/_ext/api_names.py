"""What the API reference calls a module's public names, shared by the docs build (conf.py) and
the test that every one of them has a docstring."""
import inspect


def public_names(module) -> list:
  """A module's ``__all__``, else the functions and classes it defines not starting with ``_``."""
  if hasattr(module, "__all__"):
    return list(module.__all__)
  return [name for name, value in vars(module).items()
          if not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value))
          and value.__module__ == module.__name__]
