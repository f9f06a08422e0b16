"""``python -m cloudlstm.cli.compare``: the installed ``cloudlstm-compare``'s start.

:mod:`cloudlstm_programs` imports the command with a Ctrl-C held, so a press while it loads
is the program's one-line stop (status 130), as for ``cloudlstm-compare``.
"""

from cloudlstm_programs import compare

if __name__ == "__main__":
    compare()
