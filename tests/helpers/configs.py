"""Configs read from their files, as ``--config`` reads them."""
import importlib.util
import os


def config_from_file(path: str, *args):
  """``get_config(*args)`` of the config file at ``path``."""
  name = os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(*args)


def shipped_config(name: str, *args):
  """``get_config(*args)`` of ``normattn_jax/configs/<name>.py``."""
  configs = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__)))), "normattn_jax", "configs")
  return config_from_file(os.path.join(configs, name + ".py"), *args)
