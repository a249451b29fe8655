"""Built-in example workloads, pure torch, small enough to step in well under a second on a CPU.

- ``cnn``: a small ResNet-like classifier on 3x32x32 images (4-D inputs).
- ``mlp``: a plain multi-layer perceptron classifier (an ``nn.Module`` with ``example_input``).
- ``transformer``: a small decoder-only language model on token ids.
- ``images``: a dataset whose every item costs real CPU work (decode-like synthesis,
  crop, flip, normalise), so that the DataLoader knobs matter.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from autotune.workloads.contract import Workload


__all__ = ["MLP", "SmallResNet", "SyntheticImages", "TinyLM", "cnn", "images", "mlp", "resnet", "resnet18", "resnet50",
           "transformer"]

class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.skip(x))


class SmallResNet(nn.Module):
    """A ResNet-like net: stem, a ModuleList of residual blocks, pooled linear head."""

    def __init__(self, num_classes: int = 10, width: int = 32) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.blocks = nn.ModuleList(
            [_Block(width, width, 1), _Block(width, 2 * width, 2), _Block(2 * width, 4 * width, 2)]
        )
        self.head = nn.Linear(4 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def cnn(num_classes: int = 10, width: int = 32, image_size: int = 32) -> Workload:
    """A small ResNet-like image classifier (train)."""
    example = (torch.zeros(3, image_size, image_size), torch.tensor(num_classes - 1))
    return Workload(model=SmallResNet(num_classes, width), example=example, task="train")


class MLP(nn.Module):
    def __init__(self, in_features: int = 512, hidden: int = 1024, depth: int = 3, num_classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        dim = in_features
        for _ in range(depth):
            layers += [nn.Linear(dim, hidden), nn.GELU()]
            dim = hidden
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(dim, num_classes)
        self.example_input = torch.zeros(in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def mlp(in_features: int = 512, hidden: int = 1024, depth: int = 3) -> nn.Module:
    """A plain MLP; a bare module with an ``example_input`` (synthetic data; the loss is the output's mean square
    unless --num-classes)."""
    return MLP(in_features, hidden, depth)


class _DecoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    """A small decoder-only language model: token ids in, next-token logits out."""

    def __init__(self, vocab: int = 1024, dim: int = 128, depth: int = 2, heads: int = 4, seq_len: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(seq_len, dim))
        self.blocks = nn.ModuleList([_DecoderBlock(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def transformer(vocab: int = 1024, dim: int = 128, depth: int = 2, seq_len: int = 64) -> Workload:
    """A small decoder LM on token ids (train); the target is the next token."""
    ids = torch.full((seq_len,), vocab - 1, dtype=torch.long)
    return Workload(model=TinyLM(vocab, dim, depth, seq_len=seq_len), example=(ids, ids.clone()), task="train")


class SyntheticImages(Dataset):
    """Images made per item with real CPU work, as a JPEG decode plus augmentation would cost.

    Each item synthesises a ``source``-sized uint8 image from its index, blurs it,
    takes a random crop, flips it and normalises it to ``size``.
    """

    def __init__(self, length: int = 1 << 16, size: int = 32, source: int = 48, num_classes: int = 10) -> None:
        self.length = length
        self.size = size
        self.source = source
        self.num_classes = num_classes
        self.kernel = torch.ones(3, 1, 5, 5) / 25.0
        self.mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
        self.std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(index)
        raw = torch.randint(0, 256, (3, self.source, self.source), generator=gen, dtype=torch.uint8)
        img = raw.float().div_(255.0).unsqueeze(0)
        img = F.conv2d(F.pad(img, (2, 2, 2, 2), mode="reflect"), self.kernel, groups=3)
        top, left = (int(v) for v in torch.randint(0, self.source - self.size + 1, (2,), generator=gen))
        img = img[..., top : top + self.size, left : left + self.size]
        if bool(torch.rand((), generator=gen) < 0.5):
            img = img.flip(-1)
        img = (img.squeeze(0) - self.mean) / self.std
        return img.contiguous(), torch.tensor(index % self.num_classes)


def images(length: int = 1 << 16, size: int = 32) -> Dataset:
    """A CPU-bound image dataset for the cnn example: ``--data autotune.examples:images``."""
    return SyntheticImages(length=length, size=size)


def resnet(arch: str = "resnet50", num_classes: int = 1000, image_size: int = 224) -> Workload:
    """One of torchvision's ResNets by name (``resnet18`` ... ``resnet152``), training at ``image_size`` (needs the
    ``vision`` extra: pip install -e '.[vision]')."""
    try:
        import torchvision
    except Exception as exc:  # noqa: BLE001 - a broken torchvision raises all sorts
        from autotune.errors import WorkloadError

        raise WorkloadError(f"autotune.examples:{arch} needs torchvision ({type(exc).__name__}: {exc})") from None
    example = (torch.zeros(3, image_size, image_size), torch.tensor(num_classes - 1))
    return Workload(model=getattr(torchvision.models, arch)(num_classes=num_classes), example=example, task="train")


def resnet50(num_classes: int = 1000, image_size: int = 224) -> Workload:
    """torchvision's ResNet-50 (needs the ``vision`` extra: pip install -e '.[vision]')."""
    return resnet("resnet50", num_classes, image_size)


def resnet18(num_classes: int = 1000, image_size: int = 64) -> Workload:
    """torchvision's ResNet-18 at small images (64x64 by default; needs the ``vision`` extra)."""
    return resnet("resnet18", num_classes, image_size)


# The examples go by their public name (``autotune.examples:cnn``, as numpy sets its functions' module to ``numpy``):
# a spec made from one of these objects (``tune(autotune.examples.cnn)``) names the module users name.
for _name in __all__:
    globals()[_name].__module__ = "autotune.examples"
del _name
