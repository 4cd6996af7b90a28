"""Several processes (hosts) running one program: joining them, and the few places where they
must take turns.

Every process runs the same command; ``jax.process_index() == 0`` (the chief) alone writes a
run's files, every process saves and restores its shards of the checkpoints. Anything that
waits for the others (``sync``) must be reached by every process in the same order, or the
run blocks.
"""
from __future__ import annotations

from typing import Callable, Optional, TypeVar

import jax
import numpy as np

T = TypeVar("T")


def address_problem(address: str) -> Optional[str]:
  """Why ``address`` is not ``host:port`` (an IPv6 host in brackets, ``[::1]:1234``), or None
  when it is; "" (detected) is fine.

  Args:
    address: the coordinator's address as given.

  Returns:
    "must be host:port, ..." or None.
  """
  if not address:
    return None
  host, colon, port = address.rpartition(":")
  if host.startswith("[") and host.endswith("]"):
    host = host[1:-1]
  if not colon or not host or ":" in host and not address.startswith("["):
    return "must be host:port (e.g. 10.0.0.1:1234, [::1]:1234)"
  if not port.isdigit() or not 0 < int(port) < 65536:
    return f"must end in a port number in [1, 65535], got {port!r}"
  return None


def check_arguments(coordinator_address: str = "", num_processes: int = 0,
                    process_id: int = -1) -> None:
  """Refuse what ``initialize`` would not join with, naming the argument and its value.

  Args:
    coordinator_address: ``host:port`` of process 0, or "" (detected).
    num_processes: how many processes the run has, or 0 (detected).
    process_id: this process's index, or -1 (detected).

  Raises:
    ValueError: for an address that is not ``host:port`` or an id outside
      ``[0, num_processes)``.
  """
  problem = address_problem(coordinator_address)
  if problem:
    raise ValueError(f"coordinator_address={coordinator_address!r} {problem}")
  if num_processes < 0 or (process_id >= 0 and num_processes and process_id >= num_processes):
    raise ValueError(f"process_id={process_id}, num_processes={num_processes}: the id must "
                     "lie in [0, num_processes)")


def initialize(coordinator_address: str = "", num_processes: int = 0,
               process_id: int = -1) -> None:
  """Join the processes of a multi-host run (``jax.distributed.initialize``).

  What is left unset ("", 0, -1) ``jax.distributed.initialize`` detects: on a Cloud TPU pod
  slice, under SLURM or Open MPI's ``mpirun`` all of it; elsewhere give all three.

  Args:
    coordinator_address: ``host:port`` of process 0, which every process can reach.
    num_processes: how many processes the run has.
    process_id: this process's index, 0 to ``num_processes - 1``.

  Raises:
    ValueError: see ``check_arguments``.
  """
  check_arguments(coordinator_address, num_processes, process_id)
  jax.distributed.initialize(coordinator_address=coordinator_address or None,
                             num_processes=num_processes or None,
                             process_id=None if process_id < 0 else process_id)


def is_chief() -> bool:
  """Whether this process writes the run's files (process 0)."""
  return jax.process_index() == 0


def sync(name: str) -> None:
  """Wait until every process got here (nothing to wait for in a one-process run).

  Args:
    name: the barrier's name, the same in every process.
  """
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices(name)


def everywhere(flag: bool) -> bool:
  """Whether ``flag`` holds in every process (each gives its own): a decision they all take
  alike, e.g. that a checkpoint restored in each of them.

  Args:
    flag: this process's answer.

  Returns:
    True when every process's ``flag`` is true.
  """
  if jax.process_count() == 1:
    return bool(flag)
  from jax.experimental import multihost_utils
  return bool(np.all(multihost_utils.process_allgather(np.asarray(flag, np.int32))))


def chief_first(name: str, fn: Callable[[], T]) -> T:
  """``fn()`` in the chief, then in the others: a cache that ``fn`` builds in a directory they
  share is built once, and the others load it instead of racing to write it.

  Args:
    name: the barrier's name, the same in every process.
    fn: what every process runs; it should find the chief's work and reuse it.

  Returns:
    ``fn()``'s value in this process.
  """
  result: Optional[T] = None
  if is_chief():
    try:
      result = fn()
    finally:  # the others wait here also when it fails, and then fail by themselves
      sync(name)
    return result
  sync(name)
  return fn()
