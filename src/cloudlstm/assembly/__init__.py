"""The one build path from a config to a run, shared by the entry points and
:class:`cloudlstm.Forecaster`: ``assemble`` (a run's data, model, module, loggers and
Trainer; a trained module restored from its directory), ``build`` (its parts),
``checkpoint_fit`` (a checkpoint read once, and whether it fits the data and the model) and
``config`` (a run's name, group and tags)."""
