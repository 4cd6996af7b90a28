"""Text files of random sentences, the corpora that pre-training tests prepare (TFDS,
SentencePiece, examples) in seconds."""
import os

import numpy as np

WORDS = ("the king queen castle night sword crown river storm ghost letter garden wine honour "
         "battle daughter father mother brother sister friend enemy heart tongue").split()


def write_sentences(path, lines, rng, words=(4, 12)):
  """``lines`` sentences of ``WORDS`` in ``path``, each of ``words`` words (a half-open range),
  drawn from ``rng``."""
  with open(path, "w") as f:
    for _ in range(lines):
      f.write(" ".join(rng.choice(WORDS, rng.integers(*words))) + ".\n")


def write_corpus(folder, files=2, lines=120, seed=0):
  """``folder/play_<i>.txt`` for ``i < files``, each of ``lines`` sentences; returns the paths."""
  os.makedirs(folder, exist_ok=True)
  rng = np.random.default_rng(seed)
  paths = [os.path.join(folder, f"play_{f}.txt") for f in range(files)]
  for path in paths:
    write_sentences(path, lines, rng)
  return paths
