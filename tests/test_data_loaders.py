"""The datamodule's loaders (``cloudlstm.data.pipeline.loaders``) and what a source declares
to it (the data-source protocol of ``CachedSource``)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from torch.utils.data import SequentialSampler

from cloudlstm.data.cache import CachedSource
from cloudlstm.data.pipeline.datamodule import PointCloudDataModule
from cloudlstm.data.pipeline.loaders import each_window_once
from cloudlstm.data.sources.beijing import BeijingSource
from cloudlstm.data.sources.long_format import LongFormatSource
from cloudlstm.data.sources.mobile import SyntheticMobileTraffic
from cloudlstm.data.sources.moving import SyntheticMovingPoints
from cloudlstm.data.sources.stand_in import SyntheticClusters
from cloudlstm.data.sources.synthetic import SyntheticAdvectionDiffusion
from cloudlstm.data.sources.urban_air import UrbanAirSource
from cloudlstm.data.stream import PointCloudStream


def _trainer(world_size: int, rank: int = 0) -> SimpleNamespace:
    return SimpleNamespace(world_size=world_size, global_rank=rank)


def test_each_window_once_deals_every_window_to_one_rank_in_order():
    windows = list(range(11))
    shares = [list(each_window_once(windows, _trainer(3, rank))) for rank in range(3)]
    assert shares == [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8]]  # no window repeated
    assert each_window_once(windows, None) is None
    assert each_window_once(windows, _trainer(1)) is None


def _stream(t: int = 60, n: int = 4) -> PointCloudStream:
    rng = np.random.default_rng(0)
    values = rng.normal(size=(t, n, 1)).astype(np.float32)
    return PointCloudStream(
        values=values,
        mask=np.ones(values.shape, dtype=bool),
        coords=rng.random((n, 2)),
        channel_names=["v"],
        point_ids=[f"p{i}" for i in range(n)],
        name="toy",
    )


def test_val_and_test_loaders_keep_window_order_and_a_disabled_split_has_none():
    dm = PointCloudDataModule(_stream(), input_steps=3, output_steps=2, test_fraction=0.0)
    val = dm.val_dataloader()
    assert isinstance(val.sampler, SequentialSampler)
    assert dm.test_dataloader() == []
    # outside DDP the test loader is an ordered one too
    dm = PointCloudDataModule(_stream(), input_steps=3, output_steps=2)
    assert isinstance(dm.test_dataloader().sampler, SequentialSampler)


def test_a_source_declaring_nothing_gets_the_protocol_defaults():
    for source in (_stream(), None, object()):
        declared = CachedSource.declared_by(source)
        assert type(declared) is CachedSource
        assert declared.bad_values is None and declared.path is None
        assert declared.time_col == "timestamp" and declared.id_col == "id"
        assert declared.coord_cols is None
        assert declared.physical_ranges() == {}
    source = SyntheticAdvectionDiffusion(num_points=4)
    assert CachedSource.declared_by(source) is source


@pytest.mark.parametrize(
    "source_class",
    [
        BeijingSource,
        LongFormatSource,
        SyntheticAdvectionDiffusion,
        SyntheticClusters,
        SyntheticMobileTraffic,
        SyntheticMovingPoints,
        UrbanAirSource,
    ],
)
def test_every_source_is_a_cached_source_declaring_the_protocol(source_class):
    assert issubclass(source_class, CachedSource)
    for name in ("bad_values", "path", "time_col", "id_col", "coord_cols", "physical_ranges"):
        assert hasattr(source_class, name)


def test_a_long_format_source_declares_its_own(tmp_path):
    source = LongFormatSource(
        tmp_path / "data.csv",
        time_col="t",
        id_col="sensor",
        coord_cols=["lon", "lat"],
        bad_values="warn",
    )
    assert source.path == tmp_path / "data.csv" and source.bad_values == "warn"
    assert (source.time_col, source.id_col, source.coord_cols) == ("t", "sensor", ["lon", "lat"])
    assert source.physical_ranges() == {}
    assert UrbanAirSource.physical_ranges is not CachedSource.physical_ranges
