"""A model that is not among autotune's examples, for benchmarks/calibration.py when transformers is missing:
an LSTM language model on token ids (a different shape of work from the examples: recurrent, sequential)."""

from __future__ import annotations

import torch
from torch import nn

from autotune import Workload


class LSTMLanguageModel(nn.Module):
    def __init__(self, vocab: int = 2048, width: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.lstm = nn.LSTM(width, width, num_layers=layers, batch_first=True)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.lstm(self.embed(tokens))
        return self.head(hidden[:, -1])


def lstm_lm(seq_len: int = 64, vocab: int = 2048) -> Workload:
    return Workload(model=LSTMLanguageModel(vocab), example=(torch.randint(0, vocab, (seq_len,)), torch.tensor(0)))
