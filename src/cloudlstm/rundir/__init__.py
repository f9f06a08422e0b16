"""A run directory's lifecycle: its layout (``layout``: the files' names, ``metrics.json``
written and read, a checkpoint found, the W&B id), checkpoints checked and checksummed
(``checkpoints``, ``checkpoint_io``), a run resumed (``resume``) or preempted
(``preemption``), one training at a time (``lock``), settings changed on resuming
(``config_changes``) and older runs' configs read in today's form (``old_configs``)."""
