"""Where point-cloud streams come from: each module turns raw files or a seeded simulation
into a :class:`~cloudlstm.data.pipeline.stream.PointCloudStream` (``.load()``).

* ``urban_air``, ``beijing``: the real air-quality data sets (with their datamodules);
* ``long_format``: any long-format CSV / Parquet file (one row per time and point), and the
  pivot / gap-filling machinery the real-data readers share; ``bad_values``: how its
  unreadable cells are reported;
* ``synthetic``, ``moving``, ``mobile``: seeded generators (advection-diffusion plumes, a
  vehicle fleet, multi-service mobile traffic);
* ``stand_in``: generated clusters standing in for Urban Air where its files are absent;
* ``download``: fetching and unpacking an archive once.
"""
