"""The run scripts' shared flags as parsed, for calling ``cli.run_kind`` in this process."""
from types import SimpleNamespace


def run_flags(workdir, **given):
  """``cli.RunFlags`` of a plain run of ``workdir`` (no flag but ``--workdir``); ``given``
  sets others by name, e.g. ``afresh=True``."""
  from normattn_jax.cli import command as cli
  values = dict(workdir=str(workdir), distributed=False, coordinator_address="",
                num_processes=0, process_id=-1, afresh=False, plugins=[], cpu_devices=None,
                compilation_cache=False, max_minutes=0.0)
  values.update(given)
  return cli.RunFlags(**{name: SimpleNamespace(value=value) for name, value in values.items()})
