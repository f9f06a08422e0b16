"""A key that nothing would read (``+model.kk=3``, ``+seeed=1``, a misspelt key in a config
file) is refused by name before anything is built (cloudlstm.assembly.known_keys)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from cloudlstm.assembly.known_keys import check_known_keys
from cloudlstm.errors import UserError
from cloudlstm.rundir.old_configs import current_config
from tests.conftest import PYTHON, ROOT, TINY, compose_train, one_line, subprocess_env


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("+model.kk=3", "model.kk: CloudSeq2Seq has no setting kk (did you mean model.k?); it"),
        ("+optimizer.foo=1", "optimizer.foo: AdamW has no setting foo; it takes amsgrad, betas,"),
        ("+scheduler.warmup=5", "scheduler.warmup: warmup_cosine has no setting warmup (did you "
                                "mean scheduler.warmup_steps?)"),
        ("+module.foo=1", "module.foo: ForecastModule has no setting foo; it takes anchor,"),
        ("+data.batchsize=8", "data.batchsize: PointCloudDataModule has no setting batchsize "
                              "(did you mean data.batch_size?) (it takes"),
        ("+data.source.foo=1", "data.source.foo: SyntheticAdvectionDiffusion has no setting"),
        ("+trainer.max_step=5", "trainer.max_step: Trainer has no setting max_step (did you mean "
                                "trainer.max_steps?)"),
        ("+callbacks.early_stopping.patiense=3", "callbacks.early_stopping.patiense: "
         "EarlyStopping has no setting patiense (did you mean callbacks.early_stopping.patience?)"),
        ("+seeed=3", "+seeed=3: there is no top-level setting seeed, so nothing would read it "
                     "(did you mean seed?)."),
        ("+foo=1", "+foo=1: there is no top-level setting foo, so nothing would read it. Give"),
    ],
)  # fmt: skip
def test_a_key_nothing_reads_is_refused_by_name(tmp_path: Path, override: str, said: str):
    cfg = compose_train(tmp_path, [override])
    with pytest.raises(UserError) as refused:
        check_known_keys(cfg)
    assert str(refused.value).startswith(said), str(refused.value)
    # composed here, not by train.py's command line: train.py's command lists the settings
    assert str(refused.value).endswith(
        ("Correct the name, or leave it out.", "without the +: `python train.py --cfg job` "
         "prints the settings.")
    )  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["+callbacks.early_stop.patience=5"], "callbacks.early_stop: there is no callbacks "
         "entry early_stop (did you mean callbacks.early_stopping?), and this one has no "
         "_target_, so nothing would be built from it. Set a key of one of early_stopping, "),
        (["logger=csv", "+logger.csvv.save_dir=x"], "logger.csvv: there is no logger entry "
         "csvv (did you mean logger.csv?), and this one has no _target_, so nothing would be "
         "built from it. Set a key of csv, or give it a _target_."),
        (["+callbacks.foo=1"], "callbacks.foo: there is no callbacks entry foo, and this one "),
        (["logger=none", "+logger.csv.save_dir=x"], "logger.csv: there is no logger entry csv, "
         "and this one has no _target_, so nothing would be built from it. This config builds "
         "no logger: give it a _target_, or leave it out."),
    ],
)  # fmt: skip
def test_an_entry_of_callbacks_or_logger_that_builds_nothing_is_refused(
    tmp_path: Path, overrides: list[str], said: str
):
    """A misspelt callback or logger added with + would be an entry no code builds: the
    run would go on as if its settings were not there."""
    with pytest.raises(UserError) as refused:
        check_known_keys(compose_train(tmp_path, overrides))
    assert str(refused.value).startswith(said), str(refused.value)


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("callbacks.early_stopping.patience=-1", "EarlyStopping: callbacks.early_stopping."
         "patience=-1: use a whole number >= 0 (the validations without improvement to wait)."),
        # every worse score would count as an improvement: early stopping would never stop
        ("callbacks.early_stopping.min_delta=-1", "EarlyStopping: callbacks.early_stopping."
         "min_delta=-1: use a number >= 0: the least change of the monitored score that "
         "counts as an improvement (0: any)."),
        ("callbacks.early_stopping.patience=maybe", "EarlyStopping: callbacks.early_stopping."
         "patience='maybe': use a whole number."),
        ("+callbacks.early_stopping.verbose=1", "EarlyStopping: callbacks.early_stopping."
         "verbose=1: use true or false."),
        ("trainer.max_steps=2.5", "Trainer: trainer.max_steps=2.5: use a whole number."),
        ("optimizer.weight_decay=nan", "AdamW: optimizer.weight_decay=nan: use a finite number."),
        # declared float | Tensor, Optional[int] and Union[int, float, None]
        ("optimizer.lr=abc", "AdamW: optimizer.lr='abc': use a finite number."),
        ("trainer.max_epochs=abc", "Trainer: trainer.max_epochs='abc': use a whole number."),
        ("trainer.limit_val_batches=all", "Trainer: trainer.limit_val_batches='all': use a "
         "finite number."),
        ("model.hidden_channels=4.5", "CloudSeq2Seq: model.hidden_channels=4.5: use a whole"),
        # Lightning divides by it at the first step (ZeroDivisionError)
        ("trainer.val_check_interval=0", "Trainer: trainer.val_check_interval=0: give a number"
         " of training steps >= 1 or a fraction of an epoch in (0, 1]."),
        ("trainer.accumulate_grad_batches=0", "Trainer: trainer.accumulate_grad_batches=0: give"
         " a whole number of batches >= 1 (1: a step for every batch)."),
        ("trainer.check_val_every_n_epoch=0", "Trainer: trainer.check_val_every_n_epoch=0: give"
         " a whole number of epochs >= 1, or null"),
        # Lightning trains nothing; the untrained model's test would be a finished run
        ("trainer.max_epochs=0", "Trainer: trainer.max_epochs=0: no step would train: give -1"),
        ("trainer.max_steps=0", "Trainer: trainer.max_steps=0: no step would train: give -1"),
        ("trainer.max_time=00:00:00:00", "Trainer: trainer.max_time='00:00:00:00': no time to"),
        # a list where one number is declared: a traceback from the optimizer, a resolver or
        # Hydra's instantiate
        ("optimizer.lr=[0.1]", "AdamW: optimizer.lr=[0.1]: give one value, not a list; to run"
         " each, sweep them: -m optimizer.lr=0.1"),
        ("trainer.max_steps=[3]", "Trainer: trainer.max_steps=[3]: give one value, not a list"),
        ("data.input_steps=[3,4]", "PointCloudDataModule: data.input_steps=[3, 4]: give one "
         "value, not a list; to run each, sweep them: -m data.input_steps=3,4"),
        ("data.batch_size=[4]", "PointCloudDataModule: data.batch_size=[4]: give one value"),
    ],
)  # fmt: skip
def test_a_value_of_another_type_than_declared_is_refused_for_every_node(
    tmp_path: Path, override: str, said: str
):
    """As a model's options are (test_model_options.py), now before the data are read."""
    with pytest.raises(UserError) as refused:
        check_known_keys(compose_train(tmp_path, [override]))
    assert str(refused.value).startswith(said), str(refused.value)


@pytest.mark.parametrize(
    "overrides",
    [
        ["+trainer.profiler=simple"],  # a Trainer argument the config does not set
        ["++seed=3", "++trainer.max_steps=7"],  # ++ on keys that exist
        ["logger=wandb", "+logger.wandb.notes=x"],  # the W&B logger passes **kwargs on
        ["model.compile=true"],  # a build option of the model node, not an argument
        ["+paths.extra=1"],  # a plain node: not checked (module docstring)
        ["callbacks.early_stopping=null", "+callbacks.extra=null"],  # null: left out
        ["experiment=demo", "model=stgcn"],
    ],
)
def test_keys_that_are_read_pass(tmp_path: Path, overrides: list[str]):
    check_known_keys(compose_train(tmp_path, overrides))


GROUPS = ("model", "data", "experiment", "callbacks", "logger", "trainer", "recipe", "debug")


@pytest.mark.parametrize("group", GROUPS)
def test_every_shipped_config_passes(tmp_path: Path, group: str):
    options = sorted(p.relative_to(ROOT / "conf" / group).with_suffix("").as_posix()
                     for p in (ROOT / "conf" / group).rglob("*.yaml"))  # fmt: skip
    assert options
    for option in options:
        check_known_keys(compose_train(tmp_path, [f"{group}={option}"]))


def test_every_committed_run_config_passes():
    """The run configs of docs/results, in today's form as eval.py reads them."""
    configs = sorted((ROOT / "docs" / "results").rglob("config.yaml"))
    assert len(configs) > 100
    for path in configs:
        check_known_keys(current_config(OmegaConf.load(path)))


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("model._target_=cloudlstm.modelz.CloudSeq2Seq", "model._target_='cloudlstm.modelz."
         "CloudSeq2Seq' cannot be imported: cloudlstm has no modelz (did you mean "
         "cloudlstm.models?)."),
        ("model._target_=cloudlstm.models.CloudSeq2Seqq", "model._target_='cloudlstm.models."
         "CloudSeq2Seqq' cannot be imported: cloudlstm.models has no CloudSeq2Seqq (did you "
         "mean cloudlstm.models.CloudSeq2Seq?)."),
        ("data.source._target_=mysources.Mine", "data.source._target_='mysources.Mine' cannot "
         "be imported: there is no module mysources."),
        ("optimizer._target_=torch.optim.Adamm", "optimizer._target_='torch.optim.Adamm' cannot "
         "be imported: torch.optim has no Adamm (did you mean torch.optim.Adam?)."),
        ("data.source._target_=needs_more.Source", "data.source._target_='needs_more.Source' "
         "cannot be imported: importing it needs the module no_such_dependency, which is not "
         "installed."),
    ],
)  # fmt: skip
def test_a_target_that_cannot_be_imported_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, override: str, said: str
):
    """Hydra's own report of it was a traceback, or a line of its own with two lines of
    ERROR log before it."""
    (tmp_path / "needs_more.py").write_text("import no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = compose_train(tmp_path, [override])
    with pytest.raises(UserError) as refused:
        check_known_keys(cfg)
    assert str(refused.value) == (
        f"{said} Correct the name, or install the package that has it (or put its folder on "
        "PYTHONPATH)."
    )


def test_a_misspelt_key_in_a_config_node_is_refused_outside_hydra_too():
    cfg = OmegaConf.create(
        {"model": {"_target_": "cloudlstm.models.linear.TimeLinear", "share_chanels": True}}
    )
    with pytest.raises(UserError, match=r"model.share_chanels: TimeLinear has no setting"):
        check_known_keys(cfg)


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("+model.hiden_channels=4", "model.hiden_channels: CloudSeq2Seq has no setting "
         "hiden_channels (did you mean model.hidden_channels?)"),
        ("data.source._target_=mysources.Mine", "data.source._target_='mysources.Mine' cannot "
         "be imported: there is no module mysources."),
    ],
    ids=["added-key", "unimportable-target"],
)  # fmt: skip
def test_train_py_refuses_in_one_line_before_writing_a_run(
    tmp_path: Path, override: str, said: str
):
    run = tmp_path / "run"
    done = subprocess.run(
        [*PYTHON, "train.py", *TINY, "logger=none", override,
         f"hydra.run.dir={run}", f"paths.data_dir={tmp_path / 'data'}"],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert one_line(done).startswith(said)
    assert not run.exists() and not (tmp_path / "data").exists()


def test_predict_py_refuses_an_added_top_level_key_in_one_line(tmp_path: Path):
    done = subprocess.run(
        [*PYTHON, "predict.py", f"run={tmp_path}", "data.path=x.csv", "+outt=f.csv"],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert one_line(done).startswith(
        "+outt=f.csv: there is no top-level setting outt, so nothing would read it (did you "
        "mean out?)"
    )
