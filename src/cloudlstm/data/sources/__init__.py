"""Where point-cloud streams come from: each source turns raw files or a seeded simulation
into a :class:`~cloudlstm.data.stream.PointCloudStream` (``.load()``), cached on
disk by their one base class, :class:`~cloudlstm.data.cache.CachedSource`. A
config names a source in ``data.source``; the one datamodule,
:class:`~cloudlstm.data.pipeline.datamodule.PointCloudDataModule`, windows any of them.

* ``urban_air``, ``beijing``: the real air-quality data sets;
* ``telecom_italia``: the Telecom Italia Big Data Challenge's Milan files (mobile activity
  per square of a grid);
* ``long_format``: any long-format CSV / Parquet file (one row per time and point);
* ``wide_table``: a wide CSV / Parquet / pandas HDF5 table (one row per time step, one
  column per point, METR-LA's form) and a positions file; ``graphs``: a graph of the points
  (DCRNN's ``adj_mx.pkl``, an adjacency CSV) for the models that take one;
* ``tables``: the table toolkit the file readers share (read, check, pivot on a time grid,
  fill gaps, assemble); ``bad_values``: how unreadable cells are reported;
* ``synthetic``, ``moving``, ``mobile``: seeded generators (advection-diffusion plumes, a
  vehicle fleet, multi-service mobile traffic; ``mobile_traffic``: the generator or your
  own traffic file);
* ``stand_in``: the generator standing in for Urban Air's clusters where its files are
  absent;
* ``download``: fetching and unpacking an archive once.
"""
