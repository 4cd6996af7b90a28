"""Pre-training data: text corpora as TFDS datasets, a SentencePiece vocabulary, ALBERT's
MLM + SOP examples and the batches of a run."""
from normattn_jax.data.albert_examples import (FIELDS, PretrainingData, create_examples,
                                               mask_tokens, masking_statistics,
                                               prepare_pretraining_data,
                                               prepare_wikipedia_pretraining_data)
from normattn_jax.data.corpora import shakespeare_texts
from normattn_jax.data.sentencepiece_vocab import Vocab, train_sentencepiece
from normattn_jax.data.tfds_text import TextFiles, text_file_sources, wikipedia_sources

__all__ = ["FIELDS", "PretrainingData", "TextFiles", "Vocab", "create_examples", "mask_tokens",
           "masking_statistics", "prepare_pretraining_data",
           "prepare_wikipedia_pretraining_data", "shakespeare_texts", "text_file_sources",
           "train_sentencepiece", "wikipedia_sources"]
