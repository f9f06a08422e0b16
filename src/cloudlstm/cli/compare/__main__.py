"""``python -m cloudlstm.cli.compare``: runs :func:`cloudlstm.cli.compare.command.program`."""

from cloudlstm.cli.compare.command import program

# Only this file runs as __main__: the classes stay in the package's modules, so the cells
# cli.compare.paper builds are of the same types the formats check for (the single module
# compare.py had to re-import itself for that).
if __name__ == "__main__":
    program()
