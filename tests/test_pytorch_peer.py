"""benchmarks/pytorch_peer.py: the PyTorch peer trains our network on our task, so the
benchmark compares like with like."""
import importlib.util
import os
import sys

import pytest

torch = pytest.importorskip("torch")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_script():
  benchmarks = os.path.join(REPO, "benchmarks")
  sys.path.insert(0, benchmarks)  # the script imports its sibling grid_throughput
  try:
    spec = importlib.util.spec_from_file_location(
        "pytorch_peer", os.path.join(benchmarks, "pytorch_peer.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
  finally:
    sys.path.remove(benchmarks)
  return module


peer = _load_script()


@pytest.fixture(autouse=True)
def one_torch_thread():
  """PyTorch's threads busy-wait for each other: on cores shared with other tests, one thread is
  many times faster than two."""
  threads = torch.get_num_threads()
  torch.set_num_threads(1)
  yield
  torch.set_num_threads(threads)


@pytest.mark.parametrize("d_model", [32, 128])
def test_same_network_and_task(d_model):
  check = peer.check_same_network(d_model)
  assert check["params_torch"] == check["params_ours"]
  assert check["max_logit_diff"] <= peer.LOGIT_TOLERANCE, check
  assert check["logit_scale"] > 1000 * peer.LOGIT_TOLERANCE  # the logits are not all ~0
  assert check["labels_equal"]


def test_check_catches_a_wrong_bias(monkeypatch):
  load = peer.load_flax_params

  def off_by_a_little(module, params):
    load(module, params)
    with torch.no_grad():
      bias = module.blocks[0].attention.qkv.bias
      bias[:bias.shape[0] // 3] += 0.01  # the query bias only
  monkeypatch.setattr(peer, "load_flax_params", off_by_a_little)
  assert peer.check_same_network(32)["max_logit_diff"] > 5 * peer.LOGIT_TOLERANCE


def test_ensemble_trains_as_torch_adam():
  """One model in the torch.func ensemble (Adam over the stacks) follows torch.optim.Adam on the
  same batches; Adam's first steps amplify the rounding of gradients near 0, hence the mean."""
  setup = peer.setup_for(32, 32)
  sequential = peer.sequential_trainer(setup, 1, 3)
  ensemble = peer.ensemble_trainer(setup, 1, 3)
  sequential()
  ensemble()
  reference = dict(sequential.models[0].named_parameters())
  diff = torch.cat([(stacked[0] - reference[name].detach()).abs().flatten()
                    for name, stacked in ensemble.params.items()])
  assert diff.mean() < 1e-6 and (diff > 1e-5).float().mean() < 0.01
