"""Norm-based analysis of the attention block (Kobayashi et al., EMNLP 2021) on a pretrained BERT.

Writes to --workdir: mixing.json (Table 2: `overall` method -> {mean, max, min}; Fig. 3:
`per_layer` method -> per-layer means and `per_layer_token_type`; Table 8: `expansion_rate`;
Table 3: `frequency_spearman`), mixing_layers.png (Fig. 3: layer x token type per method) and
mixing_tokens.png (Fig. 1: token-by-token contributions of one sequence, ATTN alone and with
RES and LN).

  python experiments/analyze_mixing.py --workdir results/mixing
  python experiments/analyze_mixing.py --workdir results/mixing --protocol authors

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

import matplotlib
from absl import app, flags

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from normattn_jax.analysis import mixing as mx  # noqa: E402
from normattn_jax.models import bert  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COLUMNS = ("overall",) + mx.TOKEN_TYPES

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


def read_texts(path):
  if not os.path.isfile(path):
    raise FileNotFoundError(f"--text_file must be a readable file, got {path!r}")
  texts = []
  with open(path, encoding="utf-8") as f:
    for line in f:
      line = line.strip()
      if line:
        parts = line.split("\t")
        if len(parts) > 2:
          raise ValueError(f"--text_file {path!r}: a line holds one sequence or a tab-separated "
                           f"pair, got {len(parts)} tab-separated parts")
        texts.append(tuple(parts) if len(parts) == 2 else line)
  if not texts:
    raise ValueError(f"--text_file {path!r} has no non-empty line")
  return texts


def layers_figure(summary, path):
  """Fig. 3: one heat map per method, rows = layers, columns = token types."""
  by_type = summary["per_layer_token_type"]
  fig, axes = plt.subplots(1, len(mx.METHODS), figsize=(3.1 * len(mx.METHODS), 4.2),
                           sharey=True)
  for ax, method in zip(axes, mx.METHODS):
    grid = np.array([[np.nan if v is None else 100 * v for v in by_type[method][c]]
                     for c in COLUMNS]).T
    image = ax.imshow(grid, cmap="Reds", vmin=0, vmax=100, aspect="auto")
    for (row, col), value in np.ndenumerate(grid):
      if np.isfinite(value):
        ax.text(col, row, f"{value:.0f}", ha="center", va="center", fontsize=7,
                color="white" if value > 60 else "black")
    ax.set_xticks(range(len(COLUMNS)), COLUMNS, rotation=45, fontsize=8)
    ax.set_title(method, fontsize=10)
  axes[0].set_yticks(range(grid.shape[0]), [str(i + 1) for i in range(grid.shape[0])])
  axes[0].set_ylabel("layer")
  fig.colorbar(image, ax=axes, label="mixing ratio (%)", shrink=0.8)
  fig.savefig(path, dpi=120, bbox_inches="tight")
  plt.close(fig)


def tokens_figure(model, params, tokenizer, text, path):
  """Fig. 1: |sum_h alpha f(x_j)| (ATTN) and |F_i(x_j)| (ATTN + RES + LN) for every layer,
  each row divided by its sum."""
  batch = bert.tokenize(tokenizer, [text])
  blocks = mx.trace_attention_blocks(model, {"params": params}, batch["input_ids"],
                                     attention_mask=batch["attention_mask"],
                                     token_type_ids=batch["token_type_ids"])
  vocab = {i: t for t, i in tokenizer.get_vocab().items()}
  labels = [vocab[int(i)] for i in batch["input_ids"][0]]
  n = len(labels)
  fig, axes = plt.subplots(2, len(blocks), figsize=(2.6 * len(blocks) + 1, 6.0))
  for col, block in enumerate(blocks):
    contrib = mx.token_contributions(block, 0)
    for row, key in enumerate(("attention", "block")):
      norms = np.linalg.norm(np.asarray(contrib[key], np.float64), axis=-1)
      norms /= norms.sum(1, keepdims=True)
      ax = axes[row, col]
      ax.imshow(norms, cmap="Reds", vmin=0, vmax=1)
      ax.set_xticks(range(n), labels if row == 1 else [""] * n, rotation=90, fontsize=5)
      ax.set_yticks(range(n), labels if col == 0 else [""] * n, fontsize=5)
      if row == 0:
        ax.set_title(f"layer {col + 1}", fontsize=9)
  axes[0, 0].set_ylabel("ATTN (ATTN-N)\noutput token i", fontsize=8)
  axes[1, 0].set_ylabel("ATTN + RES + LN (ATTNRESLN-N)\noutput token i", fontsize=8)
  fig.suptitle("share of |contribution of input token j| in output token i", fontsize=10)
  fig.savefig(path, dpi=150, bbox_inches="tight")
  plt.close(fig)


def main(argv):
  del argv
  model_dir = _MODEL.value or str(bert.bundled_minilm_path())
  text_file, workdir, protocol = _TEXT_FILE.value, _WORKDIR.value, _PROTOCOL.value
  try:
    texts = read_texts(text_file)
  except (OSError, ValueError) as err:
    raise app.UsageError(str(err)) from err
  if not 0 <= _FIGURE_LINE.value < len(texts):
    raise app.UsageError(f"--figure_line must lie in [0, {len(texts)}), got {_FIGURE_LINE.value}")
  os.makedirs(workdir, exist_ok=True)
  start = time.perf_counter()
  model, params = bert.from_pretrained(model_dir)
  tokenizer = bert.load_tokenizer(model_dir)
  result = mx.analyze_bert(model, params, tokenizer, texts, protocol=protocol,
                           mask_rate=_MASK_RATE.value, mask_prob=_MASK_PROB.value,
                           seed=_SEED.value, batch_size=_BATCH_SIZE.value,
                           max_length=_MAX_LENGTH.value)
  summary = result["summary"]
  out = {
      "model": os.path.relpath(model_dir, ROOT) if _MODEL.value else "bundled all-MiniLM-L6-v2",
      "text_file": os.path.relpath(os.path.abspath(text_file), ROOT),
      "num_layers": model.config.num_hidden_layers, "hidden_size": model.config.hidden_size,
      "num_heads": model.config.num_attention_heads,
      "protocol": protocol, "mask_rate": result["mask_rate"],
      "mask_prob": result["mask_prob"], "count_rounding": result["count_rounding"],
      "per_sequence_means": summary["per_sequence_means"], "seed": _SEED.value,
      "num_sequences": result["num_sequences"], "num_tokens": result["num_tokens"],
      "num_masked": result["num_masked"],
      "per_layer": summary["per_layer"], "overall": summary["overall"],
      "per_layer_token_type": summary["per_layer_token_type"],
      "token_counts_per_layer": summary["token_counts"],
      "expansion_rate": result["expansion_rate"],
      "frequency_spearman": result["frequency_spearman"],
      "frequency_source": "wordfreq (en) word frequencies; [CLS]/[SEP] at their share of the "
                          "analysed tokens; word pieces and tokens unknown to wordfreq left out",
  }
  suffix = "" if protocol == "paper" else f"_{protocol}"
  # Fig. 1 shows one unmasked sequence, the same under every protocol: one file.
  names = {"mixing": f"mixing{suffix}.json", "mixing_layers": f"mixing_layers{suffix}.png",
           "mixing_tokens": "mixing_tokens.png"}
  layers_figure(summary, os.path.join(workdir, names["mixing_layers"]))
  tokens_figure(model, params, tokenizer, texts[_FIGURE_LINE.value],
                os.path.join(workdir, names["mixing_tokens"]))
  out["seconds"] = round(time.perf_counter() - start, 1)
  with open(os.path.join(workdir, names["mixing"]), "w") as f:
    json.dump(out, f, indent=1)
  print(f"{out['num_sequences']} sequences, {out['num_tokens']} tokens "
        f"({out['num_masked']} masked), {out['seconds']} s")
  print(f"{'method':<12} {'mean':>6} {'max':>6} {'min':>6}   (%)  Spearman rho vs frequency rank")
  for method in mx.METHODS:
    o = summary["overall"][method]
    rho = result["frequency_spearman"]
    rho_text = "" if rho is None else (f"{rho[method]['with_special']:+.2f} "
                                       f"(w/o special {rho[method]['without_special']:+.2f})")
    print(f"{method:<12} {100 * o['mean']:6.1f} {100 * o['max']:6.1f} {100 * o['min']:6.1f}"
          f"        {rho_text}")
  e = result["expansion_rate"]
  print(f"expansion rate: mean {e['mean']:.2f}, min {e['min']:.2f}, max {e['max']:.2f}; "
        f"per layer {', '.join(f'{r:.2f}' for r in e['per_layer'])}")
  print(f"wrote {workdir}/" + ", ".join(names.values()))


if __name__ == "__main__":
  app.run(main)
