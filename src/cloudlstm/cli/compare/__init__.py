"""Comparison tables of finished runs: ``python -m cloudlstm.cli.compare <dir> [<dir> ...]``.

The command line is :mod:`cloudlstm.cli.compare.command` (``cloudlstm-compare``), the end of a
sweep's Hydra callback :mod:`cloudlstm.cli.compare.hydra_callback`; what they compute is
:mod:`cloudlstm.compare`'s. Nothing is imported here: ``python -m`` imports this package
before its ``__main__``, at a moment nothing holds a Ctrl-C yet.
"""
