"""Norm-based analysis of the attention block (Kobayashi et al., EMNLP 2021) on a pretrained BERT.

Writes to --workdir: mixing.json (Table 2: `overall` method -> {mean, max, min}; Fig. 3:
`per_layer` method -> per-layer means and `per_layer_token_type`; Table 8: `expansion_rate`;
Table 3: `frequency_spearman`), mixing_layers.png (Fig. 3: layer x token type per method) and
mixing_tokens.png (Fig. 1: token-by-token contributions of one sequence, ATTN alone and with
RES and LN).

  normattn-mixing --workdir results/mixing
  normattn-mixing --workdir results/mixing --protocol authors

--protocol picks the masking and Fig. 3's averaging (``mixing.PROTOCOLS``): "paper" (the paper's
words: round(15%) of each sequence's ordinary tokens chosen, each [MASK] with probability 0.8;
every token counts once) or "authors" (the authors' scripts: max(1, floor(12%)) tokens, all
[MASK]; Fig. 3 averaged per sentence first). Another protocol than "paper" writes its files
with the protocol's name appended (mixing_authors.json, mixing_layers_authors.png); Fig. 1 is
unmasked, the same under both.

--model is a HuggingFace BERT folder (config.json, model.safetensors, tokenizer.json; default:
the bundled all-MiniLM-L6-v2), --text_file has one sequence per line (a tab splits a line into a
sentence pair; default: data/sample_text.txt).
"""
import json
import os
import time

from absl import app, flags

from normattn_jax.cli.command import first_sentence, parse_flags
from normattn_jax.analysis import mixing as mx
from normattn_jax.models import bert
from normattn_jax.reporting import analysis_figures, provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_MODEL = flags.DEFINE_string("model", None,
                             "HuggingFace BERT folder (default: the bundled all-MiniLM-L6-v2)")
_TEXT_FILE = flags.DEFINE_string("text_file", os.path.join(ROOT, "data", "sample_text.txt"),
                                 "One sequence per line; a tab splits a line into a sentence pair.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for the json and the figures.")
_PROTOCOL = flags.DEFINE_enum(
    "protocol", "paper", list(mx.PROTOCOLS),
    "masking and Fig. 3 averaging: the paper's words or the authors' code")
_MASK_RATE = flags.DEFINE_float(
    "mask_rate", None,
    "share of ordinary tokens chosen for masking (0: none; default: the protocol's)",
    lower_bound=0.0, upper_bound=1.0)
_MASK_PROB = flags.DEFINE_float(
    "mask_prob", None, "probability that a chosen token becomes [MASK] (default: the protocol's)",
    lower_bound=0.0, upper_bound=1.0)
_SEED = flags.DEFINE_integer("seed", 0, "Seeds the choice of masked tokens.")
_MAX_LENGTH = flags.DEFINE_integer("max_length", 128, "Longest sequence in tokens (longer ones are "
                                   "truncated).", lower_bound=2)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 16, "Sequences per forward pass.", lower_bound=1)
_FIGURE_LINE = flags.DEFINE_integer("figure_line", 0,
                                    "0-based line of --text_file shown token by token (Fig. 1)")
flags.mark_flags_as_required(["workdir"])


def _main(argv):
  del argv
  model_dir = _MODEL.value or str(bert.bundled_minilm_path())
  text_file, workdir, protocol = _TEXT_FILE.value, _WORKDIR.value, _PROTOCOL.value
  try:
    texts = mx.read_texts(text_file)
  except (OSError, ValueError) as err:
    raise app.UsageError(str(err)) from err
  if not 0 <= _FIGURE_LINE.value < len(texts):
    raise app.UsageError(f"--figure_line must lie in [0, {len(texts)}), got {_FIGURE_LINE.value}")
  os.makedirs(workdir, exist_ok=True)
  provenance.write_note(workdir, experiment=first_sentence(__doc__))
  start = time.perf_counter()
  model, params = bert.from_pretrained(model_dir)
  tokenizer = bert.load_tokenizer(model_dir)
  result = mx.analyze_bert(model, params, tokenizer, texts, protocol=protocol,
                           mask_rate=_MASK_RATE.value, mask_prob=_MASK_PROB.value,
                           seed=_SEED.value, batch_size=_BATCH_SIZE.value,
                           max_length=_MAX_LENGTH.value)
  out = mx.run_record(
      result, model.config, protocol=protocol, seed=_SEED.value,
      model=os.path.relpath(model_dir, ROOT) if _MODEL.value else "bundled all-MiniLM-L6-v2",
      text_file=os.path.relpath(os.path.abspath(text_file), ROOT))
  names = mx.output_names(protocol)
  analysis_figures.mixing_layers(result["summary"], os.path.join(workdir, names["mixing_layers"]))
  analysis_figures.mixing_tokens(
      *mx.token_contribution_shares(model, params, tokenizer, texts[_FIGURE_LINE.value]),
      os.path.join(workdir, names["mixing_tokens"]))
  out["seconds"] = round(time.perf_counter() - start, 1)
  with open(os.path.join(workdir, names["mixing"]), "w") as f:
    json.dump(out, f, indent=1)
  print(f"{out['num_sequences']} sequences, {out['num_tokens']} tokens "
        f"({out['num_masked']} masked), {out['seconds']} s")
  print("\n".join(mx.table_lines(result)))
  print(f"wrote {workdir}/" + ", ".join(names.values()))


def main():
  """The console script ``normattn-mixing``."""
  app.run(_main, flags_parser=parse_flags)


if __name__ == "__main__":
  main()
