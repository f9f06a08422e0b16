"""A monitored metric's direction comes from its declaration (engine/metrics.py): checkpoint
selection, early stopping, a plateau scheduler, an Optuna search and its pruning follow it,
and a contrary mode given is refused in one line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest
import torch

from cloudlstm.assembly.build import check_monitored
from cloudlstm.cli.train import train
from cloudlstm.engine.declared_metrics import monitor_mode
from cloudlstm.engine.objective import check_optimized_metric
from cloudlstm.errors import UserError
from tests.conftest import TINY, compose_train, one_line, run_python


@pytest.mark.parametrize(
    ("key", "mode"),
    [
        ("val/mae", "min"),
        ("val/loss", "min"),
        ("val/mae_best", "min"),
        ("val/ssim", "max"),
        ("val/psnr", "max"),
        ("test/rmse_h03", "min"),
    ],
)
def test_a_keys_direction_is_its_metrics_declaration(key, mode):
    assert monitor_mode(key) == mode


def test_an_undeclared_key_has_no_direction_of_its_own():
    assert monitor_mode("val/my_metric", default=None) is None
    assert monitor_mode("val/my_metric") == "min"  # Lightning's and Optuna's default


def test_an_ssim_run_keeps_its_best_checkpoint_and_follows_its_rise(tmp_path):
    """recipe=paper: checkpoint, early stopping and the plateau scheduler on val/ssim."""
    base = [o for o in TINY if not o.startswith("trainer.max_epochs")]
    cfg = compose_train(
        tmp_path,
        [
            *base,
            "recipe=paper",
            "monitor=val/ssim",
            "trainer.max_epochs=4",
            "optimizer.lr=0.3",  # large steps: SSIM goes up and down between validations
            "module.diverge_factor=null",
            "logger=csv",
            "report.figures=false",
        ],
    )
    assert (cfg.callbacks.model_checkpoint.mode, cfg.scheduler.mode) == ("max", "max")
    results = train(cfg)
    run = Path(cfg.paths.output_dir)
    log = pd.read_csv(next(run.glob("csv/version_*/metrics.csv")))
    ssim = log.dropna(subset=["val/ssim"]).set_index("epoch")["val/ssim"]
    assert len(ssim) == 4 and ssim.idxmax() != ssim.idxmin(), ssim.to_dict()

    tested = torch.load(run / results["checkpoint"], map_location="cpu", weights_only=False)
    assert tested["epoch"] == ssim.idxmax(), ssim.to_dict()  # the highest, not the lowest
    last = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    stopping = next(v for k, v in last["callbacks"].items() if k.startswith("EarlyStopping"))
    assert float(stopping["best_score"]) == pytest.approx(ssim.max())
    (plateau,) = last["lr_schedulers"]
    assert plateau["mode"] == "max" and plateau["best"] == pytest.approx(ssim.max())


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["callbacks.model_checkpoint.mode=min"], "callbacks.model_checkpoint.mode=min"),
        (["callbacks.early_stopping.mode=min"], "callbacks.early_stopping.mode=min"),
        (["recipe=paper", "scheduler.mode=min"], "scheduler.mode=min"),
    ],
)
def test_a_contrary_mode_is_refused(tiny_cfg, overrides, named):
    cfg = tiny_cfg("monitor=val/ssim", "logger=none", *overrides)
    with pytest.raises(UserError, match=rf"^{named} contradicts monitor=val/ssim, which improve"):
        train(cfg)
    assert not (Path(cfg.paths.output_dir) / "checkpoints").exists()  # refused before training


def test_a_plateau_scheduler_built_in_python_takes_the_metrics_mode():
    from functools import partial

    from cloudlstm.engine.module import ForecastModule

    model = torch.nn.Linear(2, 2)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau
    adam = partial(torch.optim.Adam, lr=1e-3)
    module = ForecastModule(model, adam, scheduler=partial(plateau), monitor="val/psnr")
    assert module.configure_optimizers()["lr_scheduler"]["scheduler"].mode == "max"
    module = ForecastModule(model, adam, scheduler=partial(plateau, mode="min"), monitor="val/psnr")
    with pytest.raises(UserError, match="scheduler.mode=min contradicts monitor=val/psnr"):
        module.configure_optimizers()


def train_py(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return run_python("train.py", *args, f"paths.data_dir={tmp_path / 'data'}", timeout=600)


def test_train_py_refuses_a_contrary_mode_in_one_line(tmp_path):
    proc = train_py(
        tmp_path,
        *TINY,
        "monitor=val/ssim",
        "callbacks.model_checkpoint.mode=min",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert one_line(proc).startswith("callbacks.model_checkpoint.mode=min contradicts monitor=")


@pytest.mark.parametrize(
    ("metric", "direction"),
    [("val/mae_best", "minimize"), ("val/ssim", "maximize"), ("val/my_metric", "minimize")],
)
def test_the_search_direction_is_the_objectives(metric, direction):
    from hydra_plugins.cloudlstm_optuna._search import objective_direction

    assert objective_direction(None, metric) == direction  # hparams_search=optuna's null
    assert objective_direction(direction.upper(), metric) == direction  # given: the same


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (
            ["optimized_metric=val/ssim", "hydra.sweeper.direction=minimize"],
            "hydra.sweeper.direction=minimize contradicts optimized_metric=val/ssim",
        ),
        (  # pruning on SSIM in a study that minimises the MAE: it would prune the best
            ["monitor=val/ssim"],
            "callbacks.optuna_pruning.monitor=val/ssim improves as it gets higher, but the study",
        ),
    ],
)
def test_a_search_against_its_metrics_direction_is_refused(tmp_path, overrides, named):
    sweep = tmp_path / "sweep"
    proc = train_py(
        tmp_path, "hparams_search=optuna", *TINY, *overrides, f"hydra.sweep.dir={sweep}"
    )
    assert one_line(proc).startswith(named)
    assert not (sweep / "0").exists()  # refused before any trial


@pytest.mark.slow
def test_a_search_on_ssim_maximises_it(tmp_path):
    import optuna

    sweep = tmp_path / "sweep"
    proc = train_py(
        tmp_path,
        "hparams_search=optuna",
        *[o for o in TINY if not o.startswith("trainer.max_epochs")],
        "trainer.max_epochs=1",
        "logger=none",
        "report.figures=false",
        "optimized_metric=val/ssim",
        "monitor=val/ssim",
        "hydra.sweeper.n_trials=1",
        f"hydra.sweep.dir={sweep}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    storage = optuna.storages.RDBStorage(f"sqlite:///{sweep / 'optuna.db'}")
    study = optuna.load_study(study_name="hparams_search", storage=storage)
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    (trial,) = study.trials
    assert trial.value is not None and list(trial.intermediate_values) == [3]


@pytest.mark.parametrize("key", ["val/mae_best", "val/ssim", "val/loss", "val/smae", None])
def test_a_metric_the_runs_log_is_taken_as_the_objective(key):
    check_optimized_metric(key, quantiles=False)


@pytest.mark.parametrize(
    "key", ["val/rmse_best", "val/crps_best", "val/mae_h01", "val/coverage80", "val/pinball"]
)
def test_a_name_the_metrics_know_but_no_validation_logs_is_refused(key):
    """Only val/mae has a running best, and no validation logs per-step values or interval
    scores: such a key passed, and the search failed after its first trial had trained."""
    with pytest.raises(UserError, match=f"^optimized_metric={key} is no validation metric"):
        check_optimized_metric(key, quantiles=True)


def test_crps_is_an_objective_of_quantile_forecasts_alone():
    check_optimized_metric("val/crps", quantiles=True)
    with pytest.raises(UserError, match=r"val/mae_best \(val/crps with module.quantiles\)"):
        check_optimized_metric("val/crps", quantiles=False)


@pytest.mark.parametrize("key", ["val/foo", "train/loss", "mae_best", "test/mae"])
def test_an_objective_no_run_logs_is_refused_before_any_trial_trains(tmp_path, key):
    """The check after a trial (cli/train.py::objective) came only once it had trained."""
    with pytest.raises(UserError, match=f"^optimized_metric={key} is no validation metric"):
        check_optimized_metric(key, quantiles=False)
    sweep = tmp_path / "sweep"
    args = ["hparams_search=optuna", *TINY, "logger=none", f"optimized_metric={key}"]
    proc = train_py(tmp_path, *args, f"hydra.sweep.dir={sweep}")
    assert one_line(proc).startswith(f"optimized_metric={key} is no validation metric")
    assert not list(sweep.glob("*/metrics.json")) and not list(sweep.glob("*/config.yaml"))


LOGGED = "val/loss, val/mae, val/rmse, val/mape, val/psnr, val/ssim, val/smae, val/mae_best"


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["monitor=val/foo"], "monitor=val/foo"),
        (["monitor=mae"], "monitor=mae"),
        (["callbacks.early_stopping.monitor=val/rmse_h03"], "callbacks.early_stopping.monitor"),
        (["module.monitor=train/loss"], "module.monitor=train/loss"),
    ],
)
def test_a_monitor_no_validation_logs_is_refused_before_training(tiny_cfg, overrides, named):
    """Lightning's EarlyStopping said so at the end of the first validation, with a
    traceback, after the steps before it had trained."""
    cfg = tiny_cfg("logger=none", *overrides)
    with pytest.raises(UserError) as err:
        train(cfg)
    assert str(err.value).startswith(f"{named}")
    assert f"is no metric a validation logs: name one of {LOGGED} (val/crps with " in str(err.value)
    assert not Path(cfg.paths.output_dir).exists()


def test_crps_is_monitored_in_a_run_of_quantile_forecasts_alone(tiny_cfg):
    with pytest.raises(UserError, match="^monitor=val/crps is no metric a validation logs"):
        check_monitored(tiny_cfg("monitor=val/crps"))
    check_monitored(tiny_cfg("monitor=val/crps", "module.quantiles=[0.1,0.5,0.9]"))
    for key in LOGGED.split(", "):
        check_monitored(tiny_cfg(f"monitor={key}"))


def test_train_py_refuses_a_monitor_no_validation_logs_in_one_line(tmp_path):
    proc = train_py(tmp_path, *TINY, "monitor=val/foo", f"hydra.run.dir={tmp_path / 'run'}")
    assert one_line(proc).startswith("monitor=val/foo is no metric a validation logs")
    assert not (tmp_path / "run" / "checkpoints").exists()
