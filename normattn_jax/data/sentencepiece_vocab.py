"""A SentencePiece vocabulary trained as ALBERT's: unigram model, <pad> = 0, <unk> = 1, no
<s>/</s>, and [CLS] = 2, [SEP] = 3, [MASK] = 4 as control symbols; lower-cased through the
``nmt_nfkc_cf`` normalisation (ALBERT's uncased models lower-case before SentencePiece)."""
from __future__ import annotations

import dataclasses
import io
import os
from typing import Iterable

import numpy as np

from normattn_jax._extras import require
from normattn_jax.validation import int_problem

spm = require("sentencepiece", "pretrain")

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
NUM_SPECIAL = 5
WORD_START = "\u2581"  # SentencePiece marks the first piece of a word with it


@dataclasses.dataclass(frozen=True)
class Vocab:
  """A loaded SentencePiece model with ALBERT's special ids."""
  path: str
  processor: spm.SentencePieceProcessor = dataclasses.field(repr=False)

  @classmethod
  def load(cls, path: str) -> "Vocab":
    """Load a SentencePiece model with ALBERT's special pieces.

    Args:
      path: the ``.model`` file.

    Returns:
      The ``Vocab``.

    Raises:
      ValueError: if ids 0..4 are not <pad>, <unk>, [CLS], [SEP], [MASK].
    """
    processor = spm.SentencePieceProcessor(model_file=path)
    pieces = [processor.id_to_piece(i) for i in range(NUM_SPECIAL)]
    if pieces != ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]:
      raise ValueError(f"{path!r} is not an ALBERT-style vocabulary: its first pieces are "
                       f"{pieces}")
    return cls(path, processor)

  @property
  def size(self) -> int:
    """The number of pieces (ids), special ones included."""
    return self.processor.get_piece_size()

  def encode(self, texts: list[str]) -> list[list[int]]:
    """Tokenise a batch of texts.

    Args:
      texts: the texts.

    Returns:
      One list of piece ids per text.
    """
    return self.processor.encode(texts)

  def word_starts(self) -> np.ndarray:
    """Per id: whether the piece begins a word (whole-word masking groups the others with
    the piece before them); special ids count as word starts."""
    starts = np.array([self.processor.id_to_piece(i).startswith(WORD_START)
                       for i in range(self.size)])
    starts[:NUM_SPECIAL] = True
    return starts


def train_sentencepiece(sentences: Iterable[str], model_path: str, vocab_size: int) -> Vocab:
  """Train on ``sentences`` (one per line) and write ``model_path`` atomically. The vocabulary
  is a soft limit (``hard_vocab_limit=false``): a small corpus may yield fewer pieces. The
  sentences are streamed to the trainer, so the model records no file path: the same sentences
  give the same bytes wherever the run is.

  Args:
    sentences: the training sentences (newlines inside one become spaces).
    model_path: where the ``.model`` goes (its folder is created).
    vocab_size: the vocabulary size asked for, an integer > ``NUM_SPECIAL``.

  Returns:
    The trained ``Vocab``.

  Raises:
    ValueError: if ``vocab_size`` is not an integer > ``NUM_SPECIAL``.
  """
  if int_problem(vocab_size, NUM_SPECIAL + 1):
    raise ValueError(f"vocab_size must be an integer > {NUM_SPECIAL}, got {vocab_size!r}")
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=(sentence.replace("\n", " ") for sentence in sentences),
      model_writer=model, vocab_size=vocab_size, model_type="unigram", pad_id=PAD, unk_id=UNK,
      bos_id=-1, eos_id=-1, control_symbols="[CLS],[SEP],[MASK]",
      normalization_rule_name="nmt_nfkc_cf", hard_vocab_limit=False, num_threads=1,
      input_sentence_size=2_000_000, shuffle_input_sentence=False, minloglevel=2)
  os.makedirs(os.path.dirname(os.path.abspath(model_path)), exist_ok=True)
  partial = model_path + ".partial"
  with open(partial, "wb") as f:
    f.write(model.getvalue())
  os.replace(partial, model_path)
  return Vocab.load(model_path)
