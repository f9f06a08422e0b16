"""callbacks=ema: an exponential moving average of the weights is what is validated,
checkpointed, tested and evaluated, for any model; a resumed run continues it bit for bit
(tests/test_resume_mid_epoch.py, case "ema")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel

from cloudlstm.assembly.assemble import assemble
from cloudlstm.cli.evaluate import evaluate
from cloudlstm.cli.train import train
from cloudlstm.engine.weight_averaging import check_decay, ema_update
from cloudlstm.errors import UserError
from tests.conftest import TINY, compose_train
from tests.test_eval import compose_eval

EMA = [*TINY, "logger=none", "callbacks=ema", "trainer.max_epochs=3", "optimizer.lr=3e-2"]


class Scalar(nn.Module):
    """One weight and one buffer, set by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))


def test_the_average_is_the_warmed_up_ema_computed_by_hand():
    """decay 0.5: the first update copies; the n-th after it weighs the average by
    d = min(0.5, (1 + n) / (10 + n)), i.e. 2/11, 3/12 and 4/13, then 0.5 from n = 8 on."""
    live = Scalar()
    average = AveragedModel(live, avg_fn=ema_update(0.5), use_buffers=False)
    expected, a = [], None
    for n, w in enumerate([1.0, 3.0, 7.0, 15.0, *[2.0] * 8]):
        with torch.no_grad():
            live.w.fill_(w)
            live.count.fill_(10 * n + 7)
        average.update_parameters(live)
        d = min(0.5, (1 + n) / (10 + n)) if n else None
        a = w if d is None else d * a + (1 - d) * w
        expected.append(a)
        assert average.module.w.item() == pytest.approx(a, rel=1e-6)
        assert average.module.count.item() == 10 * n + 7  # buffers follow the live model
    assert expected[1:4] == pytest.approx([29 / 11, 65 / 11, 1745 / 143])


@pytest.mark.parametrize("decay", [0, 1, 1.5, -0.1, True, "0.9", float("nan")])
def test_a_decay_outside_0_1_is_refused_naming_the_key(decay):
    with pytest.raises(UserError, match=r"callbacks\.ema_weights\.decay=.*number in \(0, 1\)"):
        check_decay(decay)


@pytest.mark.parametrize(
    ("value", "message"),
    [("1.5", r"decay=1\.5: use a number in \(0, 1\)"), ("abc", r"decay='abc': use a finite")],
)
def test_train_refuses_a_bad_decay_in_one_line(tmp_path, value, message):
    with pytest.raises(UserError, match=message):
        train(compose_train(tmp_path, [*EMA, f"callbacks.ema_weights.decay={value}"]))


@pytest.fixture(scope="module")
def ema_run(tmp_path_factory) -> Path:
    cfg = compose_train(tmp_path_factory.mktemp("ema"), EMA)
    train(cfg)
    return Path(cfg.paths.output_dir)


def metrics(path: Path) -> dict:
    return json.loads((path / "metrics.json").read_text())


def live_weights_checkpoint(run: Path) -> Path:
    """The tested checkpoint with its live weights where the average was."""
    ckpt = torch.load(run / metrics(run)["checkpoint"], weights_only=False)
    ckpt["state_dict"] = ckpt.pop("current_model_state")
    del ckpt["averaging_state"]
    path = run / "live.ckpt"
    torch.save(ckpt, path)
    return path


def test_checkpoints_hold_the_average_and_the_live_weights_beside_it(ema_run):
    ckpt = torch.load(ema_run / metrics(ema_run)["checkpoint"], weights_only=False)
    average, live = ckpt["state_dict"], ckpt["current_model_state"]
    assert average.keys() == live.keys()
    assert any(not torch.equal(average[k], live[k]) for k in average)
    assert ckpt["averaging_state"]["n_averaged"].item() == ckpt["global_step"]


def test_the_average_is_what_the_run_tested_and_eval_tests(ema_run, tmp_path):
    evaluate(compose_eval(ema_run, tmp_path / "average"))
    assert metrics(tmp_path / "average")["test"] == metrics(ema_run)["test"]
    live = live_weights_checkpoint(ema_run)
    evaluate(compose_eval(ema_run, tmp_path / "live", f"ckpt={live}"))
    live_mae = metrics(tmp_path / "live")["test"]["overall"]["mae"]["mean"]
    assert live_mae != metrics(ema_run)["test"]["overall"]["mae"]["mean"]


def test_the_checkpoint_was_selected_by_the_average_s_validation(ema_run, tmp_path):
    """The selection score is the validation MAE of the checkpoint's average, not of the
    live weights that trained."""

    def val_mae(ckpt: Path) -> float:
        job = assemble(compose_eval(ema_run, tmp_path), tmp_path, ckpt, with_loggers=False)
        (result,) = job.trainer.validate(job.module, datamodule=job.datamodule, verbose=False)
        return result["val/mae"]

    selected = metrics(ema_run)["selection"]["score"]
    assert val_mae(ema_run / metrics(ema_run)["checkpoint"]) == pytest.approx(selected, rel=1e-6)
    assert val_mae(live_weights_checkpoint(ema_run)) != pytest.approx(selected, rel=1e-6)
