"""Figures of the papers' analyses (``normattn_jax.analysis``), each drawn from what the analysis
computed and written to one file; they compute nothing of their own but the means and bands
they show. Each carries its provenance (``reporting.provenance``): the scale and seeds its data
or its run's config give, the rest from the run's folder."""
from __future__ import annotations

import os

from normattn_jax._extras import require

matplotlib = require("matplotlib", "experiments")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from normattn_jax.analysis import mixing as mx  # noqa: E402
from normattn_jax.analysis.geometry import POOLINGS  # noqa: E402
from normattn_jax.reporting import provenance  # noqa: E402

MAJORITY_COLOURS = {"with_projection": "tab:blue", "without_projection": "tab:orange",
                    "without_projection_code": "tab:green"}
MIXING_COLUMNS = ("overall",) + mx.TOKEN_TYPES
DISTANCE_COLOURS = ("tab:green", "tab:purple", "tab:brown")  # per centre distance a, in order
SCHEME_MARKERS = {"unas": "o", "dnas": "s"}
EXPLAINING_AWAY_COLOURS = {"UNAS": "tab:blue", "DNAS": "tab:red"}


def majority(curves: dict, num_seeds: int, path: str) -> None:
  """Brody et al., Fig. 2/3: training loss, test accuracy and query angle against the step,
  each variant's mean over seeds with its min-max band.

  Args:
    curves: ``analysis.majority.curves``' result.
    num_seeds: seeds per variant (the title).
    path: the image file to write.
  """
  steps = curves["steps"]
  fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
  panels = (("train_loss", "training loss"), ("test_accuracy", "test accuracy"),
            ("query_angle", "query angle to 1 (degrees)"))
  for name, m in curves["variants"].items():
    for ax, (key, label) in zip(axes, panels):
      values, shown = m[key], np.isfinite(m[key]).all(1)
      colour = MAJORITY_COLOURS.get(name)
      ax.plot(steps[shown], values[shown].mean(1), color=colour, label=name.replace("_", " "))
      ax.fill_between(steps[shown], values[shown].min(1), values[shown].max(1), color=colour,
                      alpha=0.25, linewidth=0)
      ax.set_xlabel("step")
      ax.set_ylabel(label)
      ax.grid(alpha=0.3)
  axes[0].legend()
  fig.suptitle(f"majority, {num_seeds} seeds per variant (mean, min-max band)")
  folder = os.path.dirname(path)
  config = provenance.read_json_if_any(os.path.join(folder, "config.json"))
  scale = config and (f"majority task, N = {config['seq_len']}, {config['num_types']} types, "
                      f"d = {config['d_model']}, {int(steps[-1])} steps, "
                      f"batch {config['batch_size']}")
  provenance.save(fig, path, provenance.of_figure(
      path, scale=scale, seeds=f"{num_seeds} seeds per variant"), dpi=110)


def mixing_layers(summary: dict, path: str) -> None:
  """Kobayashi et al., Fig. 3: one heat map per method, rows = layers, columns = token types.

  Args:
    summary: ``analysis.mixing.analyze_bert``'s ``summary``.
    path: the image file to write.
  """
  by_type = summary["per_layer_token_type"]
  fig, axes = plt.subplots(1, len(mx.METHODS), figsize=(3.1 * len(mx.METHODS), 4.2),
                           sharey=True)
  for ax, method in zip(axes, mx.METHODS):
    grid = np.array([[np.nan if v is None else 100 * v for v in by_type[method][c]]
                     for c in MIXING_COLUMNS]).T
    image = ax.imshow(grid, cmap="Reds", vmin=0, vmax=100, aspect="auto")
    for (row, col), value in np.ndenumerate(grid):
      if np.isfinite(value):
        ax.text(col, row, f"{value:.0f}", ha="center", va="center", fontsize=7,
                color="white" if value > 60 else "black")
    ax.set_xticks(range(len(MIXING_COLUMNS)), MIXING_COLUMNS, rotation=45, fontsize=8)
    ax.set_title(method, fontsize=10)
  axes[0].set_yticks(range(grid.shape[0]), [str(i + 1) for i in range(grid.shape[0])])
  axes[0].set_ylabel("layer")
  fig.colorbar(image, ax=axes, label="mixing ratio (%)", shrink=0.8)
  scale = summary.get("num_sequences") and (
      f"{summary['model']} ({summary['num_layers']} layers, hidden {summary['hidden_size']}), "
      f"{summary['num_sequences']} sequences, {summary['num_tokens']} tokens")
  provenance.save(fig, path, provenance.of_figure(path, scale=scale), tight=True)


def mixing_tokens(tokens: list, shares: list, path: str) -> None:
  """Kobayashi et al., Fig. 1: the share of each input token's contribution in each output
  token, ATTN alone (top row) and with RES and LN (bottom row), a column per layer.

  Args:
    tokens: the sequence's token strings.
    shares: ``analysis.mixing.token_contribution_shares``' per-layer shares.
    path: the image file to write.
  """
  n = len(tokens)
  fig, axes = plt.subplots(2, len(shares), figsize=(2.6 * len(shares) + 1, 6.0))
  for col, layer in enumerate(shares):
    for row, key in enumerate(("attention", "block")):
      ax = axes[row, col]
      ax.imshow(layer[key], cmap="Reds", vmin=0, vmax=1)
      ax.set_xticks(range(n), tokens if row == 1 else [""] * n, rotation=90, fontsize=5)
      ax.set_yticks(range(n), tokens if col == 0 else [""] * n, fontsize=5)
      if row == 0:
        ax.set_title(f"layer {col + 1}", fontsize=9)
  axes[0, 0].set_ylabel("ATTN (ATTN-N)\noutput token i", fontsize=8)
  axes[1, 0].set_ylabel("ATTN + RES + LN (ATTNRESLN-N)\noutput token i", fontsize=8)
  fig.suptitle("share of |contribution of input token j| in output token i", fontsize=10)
  provenance.save(fig, path, provenance.of_figure(path), dpi=150, tight=True)


def clusters(clouds: dict, counts: dict, labels: np.ndarray, title: str, path: str) -> None:
  """Ding et al., Fig. 6, 8, 9: the clouds of each scheme (a row) after each update, coloured
  by the cluster each point started in.

  Args:
    clouds: ``analysis.mode_collapse.trajectories``' result.
    counts: ``cluster_counts`` of it.
    labels: each point's cluster (0 or 1).
    title: the figure's title.
    path: the image file to write.
  """
  fig, axes = plt.subplots(2, 5, figsize=(14, 5.6), sharex=True, sharey=True)
  for row, (scheme, steps) in enumerate(clouds.items()):
    for step, cloud in enumerate(steps):
      ax = axes[row, step]
      ax.scatter(*cloud[labels == 0].T, s=4, c="tab:red")
      ax.scatter(*cloud[labels == 1].T, s=4, c="tab:blue")
      ax.set_title(f"{scheme.upper()} step {step}: {counts[scheme][step]} cluster(s)",
                   fontsize=8)
  fig.suptitle(title)
  provenance.save(fig, path, provenance.of_figure(path), dpi=110)


def center_distances(check: dict, path: str) -> None:
  """Ding et al., Fig. 7: Eq. 13 (UNAS, solid) and Eq. 14 (DNAS, dashed) over r = N0 / N1 per
  centre distance a, the simulated updates as open markers.

  Args:
    check: ``analysis.mode_collapse.center_distance_check``' result.
    path: the image file to write.
  """
  ratios = check["ratios"]
  fig, ax = plt.subplots(figsize=(6, 4))
  for (a, scale), colour in zip(check["scales"].items(), DISTANCE_COLOURS):
    ax.plot(ratios, scale["unas"], color=colour, label=f"UNAS, a={a}")
    ax.plot(ratios, scale["dnas"], "--", color=colour, label=f"DNAS, a={a}")
    for point in scale["simulated"]:
      ax.plot(point["r"], point["simulated"], SCHEME_MARKERS[point["scheme"]], color=colour,
              markersize=4, fillstyle="none")
  ax.set_xscale("log")
  ax.set_xlabel("r = N0 / N1")
  ax.set_ylabel("centre distance after one update")
  ax.legend(fontsize=6)
  provenance.save(fig, path, provenance.of_figure(path))


def unselectable(result: dict, path: str) -> None:
  """Brody et al., Fig. 1c/1d: the fraction of draws with an unselectable key over d x n,
  without and with LayerNorm.

  Args:
    result: ``{"dims", "ns"}`` and ``analysis.unselectable.fraction_grids``' grids.
    path: the image file to write.
  """
  dims, ns = result["dims"], result["ns"]
  fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
  for ax, (name, title) in zip(axes, (("without_layer_norm", "without LayerNorm (Fig. 1c)"),
                                      ("with_layer_norm", "with LayerNorm (Fig. 1d)"))):
    image = ax.imshow(np.array(result[name]), origin="lower", aspect="auto", vmin=0, vmax=1,
                      cmap="viridis", extent=(ns[0] - 0.5, ns[-1] + 0.5, dims[0] - 0.5,
                                              dims[-1] + 0.5))
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("number of keys n")
  axes[0].set_ylabel("dimension d")
  fig.colorbar(image, ax=axes, label="fraction of runs with an unselectable key")
  draws = (f", {result['runs']} draws of n standard-normal vectors per cell"
           if "runs" in result else "")
  scale = f"d = {dims[0]}-{dims[-1]}, n = {ns[0]}-{ns[-1]}{draws}"
  provenance.save(fig, path, provenance.of_figure(path, scale=scale), tight=True)


def causal_lm_loss(summary: dict, path: str) -> None:
  """Brody et al., Fig. 4a: the training loss of both variants of the causal LM (the mean over
  seeds of each logged chunk of steps).

  Args:
    summary: ``analysis.causal_lm_keys.run``'s summary.
    path: the image file to write.
  """
  fig, ax = plt.subplots(figsize=(5.5, 3.6))
  every = summary["log_every"]
  for variant in summary["variants"].values():
    curve = np.asarray(variant["train_loss_curve"], np.float64)  # [chunks, seeds]
    steps = every * np.arange(1, len(curve) + 1)
    ax.plot(steps, curve.mean(axis=1), label=variant["label"])
  ax.set_xlabel("step")
  ax.set_ylabel("training loss (nats / token)")
  ax.legend()
  folder = os.path.dirname(path)
  config = provenance.read_json_if_any(os.path.join(folder, "config.json"))
  scale = config and (f"GPT-2-style LM, {config['model']['num_layers']} layers, d = "
                      f"{config['model']['d_model']}, windows of {summary.get('window')} tokens, "
                      f"{config['train']['num_steps']} steps, "
                      f"batch {config['train']['batch_size']}")
  first = next(iter(summary["variants"].values()))
  seeds = provenance.seeds_text(len(first["seeds"])) if "seeds" in first else None
  provenance.save(fig, path, provenance.of_figure(path, scale=scale, seeds=seeds), tight=True)


def sinkhorn(residuals: dict, path: str) -> None:
  """Ding et al., Section 3.2: the largest |column sum - 1| after each Sinkhorn iteration, per
  logit scale.

  Args:
    residuals: ``analysis.geometry.sinkhorn_by_logit_scale``' result.
    path: the image file to write.
  """
  fig, ax = plt.subplots(figsize=(5, 3.5))
  for name, res in residuals.items():
    ax.semilogy(range(1, len(res["column"]) + 1), res["column"],
                label=f"columns, logit std {name.partition('=')[2]}")
  ax.set_xlabel("Sinkhorn iterations (1 = DNAS)")
  ax.set_ylabel("max |column sum - 1|")
  ax.legend(fontsize=7)
  provenance.save(fig, path, provenance.of_figure(path))


def pooling_scale(scales: dict, path: str) -> None:
  """Richter & Wattenhofer, Fig. 1: the standard deviation and mean norm of each pooling's
  output against the sequence length N, log-log.

  Args:
    scales: ``analysis.geometry.pooled_output_scales``' result.
    path: the image file to write.
  """
  lengths = list(scales)
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
  for method in POOLINGS:
    for ax, key in zip(axes, ("std", "norm")):
      ax.loglog(lengths, [scales[n][method][key] for n in lengths], "o-", label=method,
                markersize=3)
  for ax, key in zip(axes, ("standard deviation", "mean norm")):
    ax.set_xlabel("sequence length N")
    ax.set_ylabel(f"{key} of the pooled output")
  axes[0].legend(fontsize=7)
  provenance.save(fig, path, provenance.of_figure(path))


def explaining_away(sums: dict, seq_len: int, path: str) -> None:
  """Ding et al., Fig. 1: histograms of log sum_i pi_ij over every key of the trained models,
  per scheme, with log(1/S).

  Args:
    sums: ``{"UNAS" | "DNAS": per-key weight sums}`` (``analysis.explaining_away``).
    seq_len: the sequence length S.
    path: the image file to write.
  """
  fig, ax = plt.subplots(figsize=(6, 3.8))
  low = min(np.log(s[s > 0].min()) for s in sums.values())
  bins = np.linspace(max(low, -40), np.log(seq_len) + 0.5, 80)
  for name, colour in EXPLAINING_AWAY_COLOURS.items():
    ax.hist(np.log(np.maximum(sums[name], 1e-300)), bins=bins, alpha=0.6, color=colour,
            label=name)
  ax.axvline(np.log(1.0 / seq_len), color="k", linestyle=":", label="log(1/S)")
  ax.set_xlabel("log of a key's total attention weight")
  ax.set_ylabel("keys (all layers and heads)")
  ax.legend()
  provenance.save(fig, path, provenance.of_figure(path))
