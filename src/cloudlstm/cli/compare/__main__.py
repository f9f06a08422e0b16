"""``python -m cloudlstm.cli.compare``: runs :func:`cloudlstm.cli.compare.command.main`."""

from cloudlstm.cli.compare.command import main
from cloudlstm.cli.pipes import reader_may_leave

# Only this file runs as __main__: the classes stay in the package's modules, so the cells
# cli.compare.paper builds are of the same types the formats check for (the single module
# compare.py had to re-import itself for that).
if __name__ == "__main__":
    with reader_may_leave():  # `compare ... | head`
        raise SystemExit(main())
