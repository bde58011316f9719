"""Fixtures shared by the tests: a tiny tokenizer, model and batch (the helpers they use are in helpers.py)."""

import os


# Under pytest-xdist every worker runs OpenMP's threads on the same cores: threads that spin while they wait for work
# take the cores from the other workers (the kernel tests took 16% longer on 2 cores). Read when torch loads OpenMP,
# so it is set before the first import of torch; a value of the user's own is kept.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest
import torch
from helpers import SENTENCES, tiny_model

from hf_entmax.kernels.cpu import kernel_available
from hf_entmax.modeling import modeling_adaptive_entmax_marian as modeling
from hf_entmax.training.tokenizer import train_joint_tokenizer


@pytest.fixture(scope="session")
def tokenizer():
    return train_joint_tokenizer(SENTENCES * 4, vocab_size=64)


@pytest.fixture
def model(tokenizer):
    return tiny_model(vocab_size=len(tokenizer))


@pytest.fixture
def batch():
    """Two source sentences, the second padded, and decoder inputs starting with the pad token."""
    input_ids = torch.tensor([[5, 6, 7, 8, 9, 1], [10, 11, 12, 1, 0, 0]])
    return {
        "input_ids": input_ids,
        "attention_mask": (input_ids != 0).long(),
        "decoder_input_ids": torch.tensor([[0, 5, 6, 7], [0, 8, 9, 10]]),
    }


@pytest.fixture(params=["fused kernel", "composed"])
def attention_path(request, monkeypatch):
    """Run a test on the native kernel's fused attention (skipped where it cannot build) and on the composed PyTorch
    operations."""
    if request.param == "composed":
        monkeypatch.setattr(modeling, "native_entmax_attention", None)
    elif not kernel_available():
        pytest.skip("the native kernel is not available here")
    return request.param
