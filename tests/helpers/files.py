"""Damaged files, as a crash or a full disk leaves them."""
import os


def halve(paths):
  """Cut each of ``paths`` (at least one) to half its size."""
  assert paths
  for path in paths:
    with open(path, "r+b") as f:
      f.truncate(os.path.getsize(path) // 2)
