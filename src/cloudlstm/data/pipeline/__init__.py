"""What happens to a point-cloud stream once a source has made it.

* ``stream``: the :class:`PointCloudStream` container and its checks;
* ``cache``: the on-disk stream cache every source writes (chunk by chunk) and reads
  (memory-mapped), and :class:`CachedSource`, the base of every source;
* ``chunks``: the time chunks in which a stream too large for memory is walked;
* ``transforms``: value scaling (fitted on the training part) and coordinate normalisation;
* ``outliers``: spatial outliers found (DBSCAN) or made (the paper's shift study);
* ``windows``: the (input, target) windows a model is trained on;
* ``datamodule``: the Lightning datamodule that ties them together (splits, batches), the
  one for every source.
"""
