"""SIGTERM or Ctrl-C during a validation, or at the training step a validation follows: the
run saves last.ckpt at that step, and resumed it runs that whole validation first, so that
it ends as the uninterrupted run does (its validations, best checkpoint, metrics.json)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import DictConfig

from cloudlstm.rundir.stops import RunInterrupted
from tests.conftest import TINY, compose_train, ctrl_c_as_in_a_terminal

# TINY: 3 training steps an epoch, a validation of 2 batches after steps 3 and 6
JOB = [*TINY, "logger=csv", "trainer.log_every_n_steps=1"]
# what metrics.json says of the training and its test (not its times or provenance)
OUTCOME = ("epochs", "steps", "val", "selection", "checkpoint", "test")


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of the uninterrupted run."""
    from cloudlstm.cli.train import train

    cfg = compose_train(tmp_path_factory.mktemp("whole"), JOB)
    train(cfg)
    return Path(cfg.paths.output_dir)


def stopped(tmp_path: Path, *signal_at: str, job: list[str] = JOB) -> tuple[DictConfig, str]:
    """The config of the run ``job`` that the callback ``signal_at`` sets signals, and its
    line."""
    from cloudlstm.cli.train import train

    cfg = compose_train(tmp_path, [*job, *signal_at])
    with ctrl_c_as_in_a_terminal(), pytest.raises(RunInterrupted) as err:
        train(cfg)
    return cfg, str(err.value)


def validations(run_dir: Path) -> list[tuple[int, float]]:
    """(step, val/mae) of every validation in the run's CSV logs, resumed ones included."""
    logs = [pd.read_csv(p) for p in sorted(run_dir.glob("csv/*/metrics.csv"))]
    log = pd.concat(logs)
    if "val/mae" not in log:
        return []
    rows = log.loc[log["val/mae"].notna(), ["step", "val/mae"]]
    return [(int(step), float(mae)) for step, mae in rows.itertuples(index=False)]


def same_end(resumed: Path, whole: Path, resumed_from: str = "checkpoints/last.ckpt") -> None:
    """The resumed run ended as the uninterrupted one: validations, metrics, weights."""
    assert validations(resumed) == validations(whole)
    metrics = [json.loads((d / "metrics.json").read_text()) for d in (resumed, whole)]
    assert metrics[0]["resumed_from"] == resumed_from
    assert {k: metrics[0][k] for k in OUTCOME} == {k: metrics[1][k] for k in OUTCOME}
    final = [torch.load(d / metrics[1]["checkpoint"], weights_only=False) for d in (resumed, whole)]
    assert final[0]["callbacks"].keys() == final[1]["callbacks"].keys()
    weights = [f["state_dict"] for f in final]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[1])


@pytest.mark.parametrize(("signum", "by"), [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "Ctrl-C")])
def test_a_signal_during_a_validation_saves_its_step_and_resumes_into_it(
    tmp_path, whole, signum, by
):
    from cloudlstm.cli.train import train

    cfg, line = stopped(
        tmp_path,
        "+callbacks.term._target_=tests.kill_callback.SignalAtValidation",
        "+callbacks.term.step=3",
        "+callbacks.term.batch=0",  # the validation's first of 2 batches
        f"+callbacks.term.signum={int(signum)}",
    )
    run_dir = Path(cfg.paths.output_dir)
    last = run_dir / "checkpoints" / "last.ckpt"
    assert f"interrupted by {by} at step 3: saved {last}." in line
    assert torch.load(last, weights_only=False)["global_step"] == 3
    assert validations(run_dir) == []  # the validation cut short logged nothing
    train(cfg)  # the same command continues it
    same_end(run_dir, whole)


def test_a_signal_at_the_step_a_validation_follows_saves_it_and_resumes_into_it(tmp_path, whole):
    from cloudlstm.cli.train import train

    cfg, line = stopped(
        tmp_path,
        "+callbacks.term._target_=tests.kill_callback.SigtermAt",
        "+callbacks.term.epoch=0",
        "+callbacks.term.batch=2",  # step 3, the epoch's last, validated after
    )
    run_dir = Path(cfg.paths.output_dir)
    last = run_dir / "checkpoints" / "last.ckpt"
    assert f"interrupted by SIGTERM at step 3: saved {last}." in line
    assert torch.load(last, weights_only=False)["global_step"] == 3
    train(cfg)
    same_end(run_dir, whole)


def test_a_signal_during_a_validation_within_an_epoch_resumes_into_it(tmp_path):
    """As in a long run validated every N steps: the epoch goes on after the validation."""
    from cloudlstm.cli.train import train

    one_epoch = [a for a in JOB if not a.startswith(("trainer.max_epochs", "trainer.limit_train"))]
    job = [*one_epoch, "trainer.max_epochs=1", "trainer.limit_train_batches=6"]
    whole_cfg = compose_train(tmp_path / "whole", job)
    train(whole_cfg)
    cfg, line = stopped(
        tmp_path / "stopped",
        "+callbacks.term._target_=tests.kill_callback.SignalAtValidation",
        "+callbacks.term.step=3",  # the validation of step 3, of the epoch's 6
        job=job,
    )
    run_dir = Path(cfg.paths.output_dir)
    assert f"at step 3: saved {run_dir / 'checkpoints' / 'last.ckpt'}." in line
    train(cfg)
    same_end(run_dir, Path(whole_cfg.paths.output_dir))
    # the epoch's later checkpoint resumes after its validation, not into it again
    loops = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["loops"]
    validated = loops["fit_loop"]["epoch_loop.val_loop.batch_progress"]["total"]
    assert validated == dict(ready=4, started=4, processed=4, completed=4)


def test_a_signal_during_the_last_validation_saves_and_the_run_finishes_as_a_whole(tmp_path, whole):
    from cloudlstm.cli.train import train

    cfg, line = stopped(
        tmp_path,
        "+callbacks.term._target_=tests.kill_callback.SignalAtValidation",
        "+callbacks.term.step=6",  # after the last training step
    )
    run_dir = Path(cfg.paths.output_dir)
    assert f"at step 6: saved {run_dir / 'checkpoints' / 'last.ckpt'}." in line
    assert not (run_dir / "metrics.json").exists()
    train(cfg)
    same_end(run_dir, whole)


def test_a_signal_during_the_sanity_check_saves_nothing(tmp_path):
    cfg, line = stopped(
        tmp_path,
        "+callbacks.term._target_=tests.kill_callback.SignalAtValidation",
        "+callbacks.term.sanity_check=true",  # before any training step
    )
    assert "at step 0: no checkpoint yet." in line
    assert not (Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt").exists()


def test_loop_states_of_another_form_are_refused():
    """Another Lightning's loop state: nothing is rewritten (the run saves nothing)."""
    from cloudlstm.rundir.pending_validation import rewound_to_validation

    at_step_end = {
        "epoch_loop.batch_progress": {
            "total": dict(ready=3, started=3, processed=3, completed=2),
            "current": dict(ready=3, started=3, processed=3, completed=2),
        },
        "epoch_loop.val_loop.batch_progress": {
            "total": dict(ready=0, started=0, processed=0, completed=0),
            "current": dict(ready=0, started=0, processed=0, completed=0),
        },
    }
    rewound = rewound_to_validation(at_step_end, during_validation=False)
    assert rewound["epoch_loop.batch_progress"]["total"]["completed"] == 3
    assert rewound["epoch_loop.val_loop.batch_progress"]["total"] == dict(
        ready=1, started=1, processed=0, completed=0
    )
    with pytest.raises(ValueError, match="not at a step's end"):
        rewound_to_validation(at_step_end, during_validation=True)
    with pytest.raises(KeyError):
        rewound_to_validation({"epoch_loop.progress": {}}, during_validation=False)


@pytest.mark.parametrize(
    "signal_at",
    [
        # at step 3, validated after: the step saved holds the average's update of that
        # step, as the save comes after the other callbacks' step-end hooks
        ("SigtermAt", "+callbacks.term.epoch=0", "+callbacks.term.batch=2"),
        # during that validation, where the average stands in the model's place: the live
        # weights and the average are saved each in its own place
        ("SignalAtValidation", "+callbacks.term.step=3"),
    ],
    ids=["step", "validation"],
)
def test_a_run_averaging_its_weights_resumes_from_the_step_with_its_average(tmp_path, signal_at):
    """callbacks=ema, stopped at or during the validation of step 3."""
    from cloudlstm.cli.train import train

    job = [*JOB, "callbacks=ema"]
    whole_cfg = compose_train(tmp_path / "whole", job)
    train(whole_cfg)
    callback, *where = signal_at
    target = f"+callbacks.term._target_=tests.kill_callback.{callback}"
    cfg, line = stopped(tmp_path / "stopped", target, *where, job=job)
    run_dir = Path(cfg.paths.output_dir)
    assert f"at step 3: saved {run_dir / 'checkpoints' / 'last.ckpt'}." in line
    train(cfg)
    same_end(run_dir, Path(whole_cfg.paths.output_dir))


def test_a_weight_averaging_of_other_validation_hooks_is_refused():
    """Its swap is not the one undone for the save (the run then saves nothing)."""
    import lightning as L
    from lightning.pytorch.callbacks import WeightAveraging

    from cloudlstm.engine.weight_averaging import EMAWeights, check_averaging_hooks

    class SwapsElsewhere(WeightAveraging):
        def on_validation_epoch_start(self, trainer, pl_module):
            pass

    check_averaging_hooks(L.Trainer(callbacks=[EMAWeights()], logger=False))
    with pytest.raises(TypeError, match="SwapsElsewhere.on_validation_epoch_start"):
        check_averaging_hooks(L.Trainer(callbacks=[SwapsElsewhere()], logger=False))
