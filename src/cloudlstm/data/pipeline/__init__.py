"""What happens to a point-cloud stream once a source has made it, one module a job.

* ``preparation``: the source loaded, the point subset, absurd and out-of-range values
  (``absurd_values``), moving points' position channels, the scaler fitted on the training
  part;
* ``splits``: the split geometry: the chronological train / val / test parts, the steps a
  window's input reads (the paper's seasonal input too), the windows each part holds;
* ``coordinates``: the coordinates a model sees, normalised, with the outlier options
  (``outliers``: spatial outliers found by DBSCAN or made by the paper's shift study);
* ``held_out``: the points held out of training (``data.holdout_points``) and what the
  windows hide of them;
* ``model_input``: the one rule putting a model's input together (channel order,
  normalisation, NaN to 0), for training and forecasting alike;
* ``windows``: the (input, target) windows a model is trained on, read lazily;
* ``loaders``: the dataloaders (DDP test sampling without repeats) and ``resumable``: the
  training loader a run resumed mid-epoch continues exactly;
* ``summary``: the sizes of the data and of its splits;
* ``datamodule``: the Lightning datamodule that ties them together, the one for every
  source;
* ``forecast_input``: a history table made into the input of one forecast.

The stream container, its cache, time chunks, covariates and scaling are the data's shared
contract, one level up in :mod:`cloudlstm.data`.
"""
