"""engine/progress_log.py: one line in the run's log at every validation of a training,
with a real Trainer: the position against the budget, the monitored score and the best so
far (in the metric's direction), the pace and the training time left."""

import logging
import re

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

from cloudlstm.engine.callbacks import EpochTimer
from cloudlstm.engine.progress_log import ProgressLog, _duration

LOGGER = "cloudlstm.engine.progress_log"


class Scripted(L.LightningModule):
    """Trains a linear layer on noise; its validations report the given scores in turn."""

    def __init__(self, scores: list[float]) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.scores = list(scores)
        self.validations = 0

    def training_step(self, batch, batch_idx):
        return self.layer(batch["x"]).square().mean()

    def validation_step(self, batch, batch_idx):
        pass

    def on_validation_epoch_end(self) -> None:
        score = self.scores[min(self.validations, len(self.scores) - 1)]
        self.log("val/mae", score)
        if not self.trainer.sanity_checking:
            self.validations += 1

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def loader(batches: int) -> torch.utils.data.DataLoader:
    windows = [{"x": torch.randn(2)} for _ in range(4 * batches)]  # batches as the pipeline's
    return torch.utils.data.DataLoader(windows, batch_size=4)


def fit(tmp_path, scores, mode="min", stopping=True, **trainer_args) -> list[str]:
    callbacks = [
        EpochTimer(),
        ModelCheckpoint(dirpath=tmp_path, monitor="val/mae", mode=mode),
        ProgressLog(),
    ]
    if stopping:
        callbacks.append(
            EarlyStopping(monitor="val/mae", mode=mode, patience=10, check_on_train_epoch_end=False)
        )
    trainer = L.Trainer(
        callbacks=callbacks, logger=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path, **trainer_args,
    )  # fmt: skip
    model = Scripted(scores)
    trainer.fit(model, loader(4), loader(1))
    return model, trainer


def progress_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_a_line_at_every_validation_with_the_best_score_so_far(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        fit(tmp_path, [3.0, 2.0, 2.5], max_steps=6, val_check_interval=2, num_sanity_val_steps=1)
    lines = progress_lines(caplog)
    assert len(lines) == 3  # not at the sanity check
    sooner = r" at most \(early stopping may end it sooner\)"
    pace = r"; [0-9.e-]+ s a step, \d+ s of training left" + sooner
    assert re.fullmatch(r"step 2 of 6 \(epoch 0\): val/mae 3, best 3" + pace, lines[0]), lines[0]
    assert lines[1].startswith("step 4 of 6 (epoch 0): val/mae 2, best 2;")
    assert lines[2].startswith("step 6 of 6 (epoch 1): val/mae 2.5, best 2;")
    assert lines[2].endswith(", 0 s of training left at most (early stopping may end it sooner)")


def test_the_best_follows_the_metrics_direction(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        fit(tmp_path, [20.0, 25.0, 22.0], mode="max", max_steps=6, val_check_interval=2)
    assert [line.split(";")[0].split(": ")[1] for line in progress_lines(caplog)] == [
        "val/mae 20, best 20", "val/mae 25, best 25", "val/mae 22, best 25",
    ]  # fmt: skip


def test_an_epoch_budget_counts_its_steps_and_left_time_follows_the_pace(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        model, trainer = fit(tmp_path, [1.0], stopping=False, max_epochs=3)
    lines = progress_lines(caplog)
    # 4 batches an epoch, 3 epochs: 12 steps; validation at each epoch's end
    assert [line.split(":")[0] for line in lines] == [
        "step 4 of 12 (epoch 0)", "step 8 of 12 (epoch 1)", "step 12 of 12 (epoch 2)",
    ]  # fmt: skip
    assert lines[0].endswith(" s of training left")  # no early stopping: no "at most"


def test_validation_alone_writes_nothing(tmp_path, caplog):
    model, trainer = fit(tmp_path, [1.0], max_steps=2)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        trainer.validate(model, loader(1), verbose=False)
    assert progress_lines(caplog) == []


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0.4, "0 s"), (40, "40 s"), (59.4, "59 s"), (765, "13 min"), (3599, "1 h 0 min"),
     (15_300, "4 h 15 min")],
)  # fmt: skip
def test_durations_read_as_a_person_says_them(seconds, shown):
    assert _duration(seconds) == shown
