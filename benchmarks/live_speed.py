"""The live line against the throughput measured another way, in a real Hugging Face Trainer and a real
lightning.Trainer (issue 36's target: within 10%).

    python benchmarks/live_speed.py [--steps 800] [--repeat 3]

Each framework trains a small MLP (``autotune.examples:mlp``'s 512-1024-1024-1024 network, batch 64, synthetic data)
with autotune's exported callback (``autotune.callbacks.for_trainer`` / ``for_lightning``, given made-up study
figures), which says the training's samples/s once, after its warm-up and window (autotune/export/training_speed.py).
The reference is measured by a second callback of the benchmark's own: the time of every step's end, and the samples per
second from the end of step 30 to the end of the run (a longer span than the live window, and its own clock). The
Trainer's own ``train_samples_per_second`` (its whole run, the first steps included) is printed beside them.

Writes benchmarks/results/live_speed-<date>.json and .txt.
"""

from __future__ import annotations

import tempfile
import time

import harness
import torch
from harness import say
from torch import nn

import autotune.callbacks
from autotune.workloads.examples import mlp

BATCH = 64
EXPECTED = {"samples_per_s": 1000.0, "estimate": 2.0, "low": 1.8, "high": 2.2, "where": "here"}
SKIP = 30


class Data(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 512, generator=g), torch.randint(0, 10, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = mlp()

    def forward(self, x, labels=None):
        logits = self.net(x)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


def reference(ends: list[float], samples: int) -> float:
    """Samples/s from the end of step SKIP to the last step's end."""
    return samples * (len(ends) - SKIP) / (ends[-1] - ends[SKIP - 1])


def trainer(steps: int) -> dict:
    import transformers

    ends: list[float] = []

    class Clock(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            ends.append(time.perf_counter())

    said: list[str] = []
    ours = autotune.callbacks.for_trainer({}, expected=EXPECTED)
    ours.meter.say = said.append
    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=BATCH,
                                              report_to="none", save_strategy="no", logging_strategy="no",
                                              disable_tqdm=True, use_cpu=True, dataloader_num_workers=0)
        run = transformers.Trainer(model=Net(), args=args, train_dataset=Data(BATCH * steps),
                                   callbacks=[ours, Clock()]).train()
    return {"live": ours.meter.samples_per_s, "line": said[0] if said else None, "reference": reference(ends, BATCH),
            "framework_whole_run": run.metrics.get("train_samples_per_second")}


def lightning_run(steps: int) -> dict:
    import lightning

    ends: list[float] = []

    class Clock(lightning.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            ends.append(time.perf_counter())

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = Net()

        def training_step(self, batch, batch_idx):
            return self.model(**batch)["loss"]

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    said: list[str] = []
    ours = autotune.callbacks.for_lightning({}, expected=EXPECTED)
    ours.meter.say = said.append
    loader = torch.utils.data.DataLoader(Data(BATCH * steps), batch_size=BATCH)
    with tempfile.TemporaryDirectory() as out:
        trainer = lightning.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False,
                                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                    default_root_dir=out, callbacks=[ours, Clock()])
        start = time.perf_counter()
        trainer.fit(Module(), loader)
        whole = BATCH * steps / (time.perf_counter() - start)
    return {"live": ours.meter.samples_per_s, "line": said[0] if said else None, "reference": reference(ends, BATCH),
            "framework_whole_run": whole}


def main() -> None:
    ap = harness.arguments(__doc__, repeat=3)
    ap.add_argument("--steps", type=int, default=800)
    args = ap.parse_args()
    out: dict[str, list] = {}
    for name, run in (("hf Trainer", trainer), ("lightning.Trainer", lightning_run)):
        for k in range(args.repeat):
            r = run(args.steps)
            r["ratio"] = r["live"] / r["reference"] if r["live"] else None
            out.setdefault(name, []).append(r)
            say(f"{name} run {k + 1}: live line {r['live']:.1f} samples/s, reference {r['reference']:.1f} "
                f"(steps {SKIP + 1}-{args.steps}), ratio {r['ratio']:.3f}: "
                f"{'within' if abs(r['ratio'] - 1) <= 0.10 else 'NOT within'} 10%; the framework's whole run "
                f"{r['framework_whole_run']:.1f}")
        say(f"   the line: {out[name][-1]['line']}")
    ratios = [r["ratio"] for runs in out.values() for r in runs]
    say(f"every run within 10%: {all(abs(x - 1) <= 0.10 for x in ratios)} (ratios {min(ratios):.3f}-{max(ratios):.3f})")
    harness.write(args, out)


if __name__ == "__main__":
    main()
