"""The default sweeper's reading of the jobs' data sources before any job runs
(hydra_plugins.cloudlstm_sweeper, cloudlstm.assembly.source_overrides): a command's
source option that a job's source does not read is refused once, a config's sweep of one
is dropped, each job's source composed as its own config gives it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from hydra._internal.callbacks import Callbacks
from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.types import HydraContext, RunMode

from cloudlstm.errors import UserError

# a model of a user's own: persistence, with the data file it is meant for (package
# _global_, as conf/model/cloudlstm_mae.yaml is, to set a key outside model)
FILED_MODEL = """# @package _global_
defaults:
  - /model/persistence@model
  - _self_
data:
  source:
    path: {path}
"""


def jobs_of(tmp_path: Path, *command: str) -> list[list[str]]:
    """The jobs that ``train.py -m <command>``'s sweeper would launch (its
    ``split_arguments``, as Hydra's ``BasicSweeper.sweep`` calls it), in this process,
    with the search path of ``conf_dir(tmp_path)``; none runs."""
    overrides = [f"hydra.sweep.dir={tmp_path / 'sweep'}", *command]
    overrides.append(f"hydra.searchpath=[file://{conf_dir(tmp_path)}]")
    GlobalHydra.instance().clear()
    hydra = Hydra.create_main_hydra2("train", create_config_search_path(str(ROOT / "conf")))
    try:
        cfg = hydra.compose_config("train", overrides, run_mode=RunMode.MULTIRUN)
        HydraConfig.instance().set_config(cfg)
        context = HydraContext(config_loader=hydra.config_loader, callbacks=Callbacks(cfg))
        sweeper = Plugins.instance().instantiate_sweeper(
            config=cfg, hydra_context=context, task_function=lambda _: None
        )
        arguments = [*sweeper._parse_config(), *cfg.hydra.overrides.task]  # type: ignore[attr-defined]
        parser = OverridesParser.create(config_loader=hydra.config_loader)
        (jobs,) = sweeper.split_arguments(parser.parse_overrides(arguments), None)
        return jobs
    finally:
        GlobalHydra.instance().clear()


def conf_dir(tmp_path: Path) -> Path:
    """A search path's configs: ``model=filed_persistence`` (``FILED_MODEL``)."""
    folder = tmp_path / "conf"
    if not folder.exists():
        (folder / "model").mkdir(parents=True)
        model = FILED_MODEL.format(path=tmp_path / "traffic.csv")
        (folder / "model" / "filed_persistence.yaml").write_text(model)
    return folder


def test_a_global_model_s_file_is_read_for_its_own_jobs_option_refusal(tmp_path):
    """A model's config of package _global_ may set the data: its jobs' source was taken
    from the other model's job (the generator's), so the command's num_days passed the
    sweep's check and each of its jobs was refused on its own, after the others ran."""
    command = ["data=mobile", "model=persistence,filed_persistence", "data.source.num_days=30"]
    with pytest.raises(UserError) as refused:
        jobs_of(tmp_path, *command)
    assert str(refused.value).startswith(
        f"data.source.num_days=30: data=mobile reads your file here "
        f"(data.source.path={tmp_path / 'traffic.csv'}), so the generator"
    )
    # the generator's jobs alone read it: nothing is refused
    assert len(jobs_of(tmp_path, *command[:1], "model=persistence", *command[2:])) == 1


def test_a_global_model_s_file_drops_the_config_s_city_sweep_for_its_own_jobs(tmp_path):
    """The config's sweep of cities is dropped from the jobs of a model whose config gives
    a file, kept for the generator's: 4 jobs -> 3, where the file's model ran twice."""
    command = ["experiment=paper/mobile", "seed=0"]
    command.append("model=persistence,filed_persistence")
    kept = jobs_of(tmp_path, *command)
    models = [next(o for o in job if o.startswith("model=")) for job in kept]
    assert sorted(models) == ["model=filed_persistence"] + ["model=persistence"] * 2


def test_the_command_s_and_the_config_s_source_overrides_are_told_apart():
    """One rule for the sweep and for a job: a key of the config's sweep is the config's
    unless the command sets it, a deletion sets nothing, ``+`` and ``++`` set their option;
    in a sweep's job, the keys of the config's sweep hold the sweep's values."""
    from cloudlstm.assembly.source_overrides import job_command, source_overrides

    parse = OverridesParser.create().parse_overrides
    command = parse(
        ["data.source.num_days=14,30", "++data.source.seed=1", "~data.source.freq", "seed=0"]
        + ["data.source.units={sms: count}"]
    )
    split = source_overrides(["data.source.city", "+data.source.units", "model"], command)
    assert split.swept == {"data.source.city"}
    assert split.given == {
        "num_days": "data.source.num_days=14,30",
        "seed": "++data.source.seed=1",
        "units": "data.source.units={sms: count}",
    }
    job = parse(["data.source.city=city2", "data.source.num_days=30"])
    swept = ["data.source.city"]
    assert source_overrides(swept, job_command(job, swept, multirun=True)).given == {
        "num_days": "data.source.num_days=30"
    }
    assert set(source_overrides(swept, job_command(job, swept, multirun=False)).given) == {
        "city",
        "num_days",
    }


def test_the_command_s_own_city_with_a_file_is_refused_though_the_config_sweeps_cities(
    tmp_path,
):
    """A key that the config's sweep sets and the command sets too is the command's: its
    cities with a file ran each job twice on the same data (neither refused nor dropped),
    and a run's city was dropped without a word."""
    from conftest import compose_train

    from cloudlstm.assembly.source_options import check_read_source_options

    filed = ["experiment=paper/mobile", f"data.source.path={tmp_path / 'traffic.csv'}"]
    cities = "data.source.city=city1,city2"
    with pytest.raises(UserError, match=f"^{cities}: data=mobile reads your file here"):
        jobs_of(tmp_path, *filed, cities, "model=persistence", "seed=0")
    cfg = compose_train(tmp_path, [*filed, "hydra.mode=RUN", "data.source.city=city2"])
    with pytest.raises(UserError, match="^data.source.city=city2: data=mobile reads your"):
        check_read_source_options(cfg.data)
    # the generator reads the command's cities: both kept
    assert len(jobs_of(tmp_path, filed[0], cities, "model=persistence", "seed=0")) == 2


def test_jobs_share_a_composed_source_only_where_nothing_they_differ_in_sets_it(tmp_path):
    """Seeds and models of package model share one composition; a model of package
    _global_ that sets the data, and a key the source's interpolations read (its cache_dir:
    ${paths.data_dir}), each have their own."""
    from hydra import compose, initialize_config_dir

    from cloudlstm.assembly.job_sources import JobSources

    composed: list[list[str]] = []
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        searchpath = f"hydra.searchpath=[file://{conf_dir(tmp_path)}]"
        loader: Any = GlobalHydra.instance().config_loader()
        repository = loader._parse_overrides_and_create_caching_repo("train", [searchpath])[1]

        def source(job: list[str]) -> Any:
            composed.append(job)
            return compose("train", [searchpath, "data=mobile", *job]).data.source

        source_of = JobSources(source, repository)
        same = [["model=persistence", "seed=0"], ["model=lstm", "seed=1"], ["model=cloudlstm_k3"]]
        paths = [["paths.data_dir=/a", "seed=0"], ["paths.data_dir=/b", "seed=0"]]
        for job in [*same, ["model=filed_persistence"], *paths]:
            source_of(job)
    GlobalHydra.instance().clear()
    assert composed == [same[0], ["model=filed_persistence"], *paths]
    assert source_of(["model=filed_persistence", "seed=3"]).path == str(tmp_path / "traffic.csv")


@pytest.mark.parametrize("city", ["++data.source.city=city2", "~data.source.city"])
def test_the_command_s_key_of_the_config_s_sweep_is_its_own_whatever_its_prefix(tmp_path, city):
    """Hydra's sweeper told ``++key`` and ``~key`` from the config's sweep of ``key``: each
    city's job carried the command's override too, and ran City 2 (or the deleted key) twice;
    the command's override now replaces the sweep, in its place, as the plain one does."""
    command = ["experiment=paper/mobile", "model=persistence,lstm", "seed=0", city]
    jobs = jobs_of(tmp_path, *command)
    plain = jobs_of(tmp_path, *command[:-1], "data.source.city=city2")
    # the job's override as Hydra writes it (a deletion's value as null: any value)
    given = city if city.startswith("+") else f"{city}=null"
    assert jobs == [[given if o == "data.source.city=city2" else o for o in job] for job in plain]
    assert len(jobs) == 2
    # with a file: the command's city is refused once; deleted, it sets nothing, and each
    # model runs once
    filed = [*command, f"data.source.path={tmp_path / 'traffic.csv'}"]
    if city.startswith("~"):
        assert len(jobs_of(tmp_path, *filed)) == 2
    else:
        with pytest.raises(UserError, match=f"^{re.escape(city)}: data=mobile reads your file"):
            jobs_of(tmp_path, *filed)


def test_a_config_s_sweep_the_command_replaces_is_not_expanded(tmp_path):
    """A sweep of the config that the command replaces is not the sweep's: its empty range
    was refused though no job would run it."""
    config = "hydra.sweeper.params={seed: 'range(5,1)'}"
    assert len(jobs_of(tmp_path, config, "model=persistence", "++seed=0")) == 1


def test_the_note_of_a_dropped_sweep_names_each_job_s_file(tmp_path, caplog):
    """The line named the last job's file alone, as if every job read it; and said that the
    sweep of cities did not apply where the generator's jobs of a sweep of files kept it."""
    files = [str(tmp_path / "a.csv"), str(tmp_path / "b.csv")]
    command = ["experiment=paper/mobile", "model=persistence", "seed=0"]
    with caplog.at_level("INFO"):
        assert len(jobs_of(tmp_path, *command, f"data.source.path={','.join(files)}")) == 2
        assert len(jobs_of(tmp_path, *command, f"data.source.path=null,{files[1]}")) == 3
    notes = [r.message for r in caplog.records if r.message.startswith("The config's sweep")]
    end = "not the generator, so the jobs that differ only there run once"
    assert notes == [
        f"The config's sweep of data.source.city does not apply: data=mobile reads your files "
        f"here (data.source.path={', '.join(files)}), {end} (4 jobs -> 2).",
        f"The config's sweep of data.source.city does not apply where data=mobile reads your "
        f"file (data.source.path={files[1]}), {end} (4 jobs -> 3).",
    ]


def test_the_note_of_sweeps_dropped_for_each_source_names_both():
    """Where the generator's jobs drop the sweep of a reading option and the file's that of
    a city, the line names each with its source, not the last job's for both."""
    from omegaconf import OmegaConf

    from cloudlstm.assembly.source_options import MOBILE_TARGET, read_sweeps

    jobs = [
        [f"data.source.path={path}", f"data.source.city={city}", f"data.source.freq={freq}"]
        for path in ("null", "t.csv")
        for city in ("city1", "city2")
        for freq in ("5min", "10min")
    ]

    def source_of(job: list[str]) -> Any:
        path = None if "data.source.path=null" in job else "t.csv"
        return OmegaConf.create({"_target_": MOBILE_TARGET, "path": path})

    kept, note = read_sweeps(jobs, {"data.source.city", "data.source.freq"}, source_of)
    assert len(kept) == 4
    assert note == (
        "The config's sweep of data.source.city does not apply where data=mobile reads your "
        "file (data.source.path=t.csv), not the generator, nor that of data.source.freq where "
        "it generates its traffic (data.source.path=null) and reads no file, so the jobs that "
        "differ only there run once (8 jobs -> 4)."
    )


def test_a_group_s_choice_that_another_config_s_defaults_entry_reads_has_its_own_source(
    tmp_path,
):
    """A config choosing the data by another group's choice (``- /dataset@data: ${flavor}``):
    the jobs of ``+flavor=a`` and ``+flavor=b``, whose own configs set no data, shared the
    first one's source (num_days 3 for both, where b's is 5)."""
    from hydra import compose, initialize_config_dir

    from cloudlstm.assembly.job_sources import JobSources

    conf = tmp_path / "conf"
    for group in ("flavor", "dataset", "picker"):
        (conf / group).mkdir(parents=True)
    for name, days in (("a", 3), ("b", 5)):
        (conf / "flavor" / f"{name}.yaml").write_text(f"name: {name}\n")
        (conf / "dataset" / f"{name}.yaml").write_text(f"source:\n  num_days: {days}\n")
    picker = "# @package _global_\ndefaults:\n  - /dataset@data: ${flavor}\n"
    (conf / "picker" / "on.yaml").write_text(picker)
    searchpath = f"hydra.searchpath=[file://{conf}]"
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        loader: Any = GlobalHydra.instance().config_loader()
        repository = loader._parse_overrides_and_create_caching_repo("train", [searchpath])[1]
        source_of = JobSources(
            lambda job: compose("train", [searchpath, "data=mobile", *job]).data.source,
            repository,
        )
        days = [source_of(["+picker=on", f"+flavor={f}", "seed=0"]).num_days for f in "ab"]
    GlobalHydra.instance().clear()
    assert days == [3, 5]
