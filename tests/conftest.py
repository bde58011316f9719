"""Fixtures shared by the tests: a tiny tokenizer, model and batch (the helpers they use are in helpers.py)."""

import pytest
import torch
from helpers import SENTENCES, tiny_model

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
