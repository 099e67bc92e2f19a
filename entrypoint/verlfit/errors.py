"""The one project error type, and the failure of standard output (:class:`StandardOutputFailed`).

Every expected failure (bad input, a GPU that cannot run a profile, an unknown verl key)
raises :class:`VerlfitError` with a message that says what failed and what to do next.
``verlfit.cli.main`` catches it once and prints it without a traceback; any other exception
is a bug and keeps its traceback.
"""

import errno


class VerlfitError(Exception):
    """An expected failure with a user-facing message.

    Args:
        message: what failed, naming the input (a file, a key, a GPU).
        fix: the command or setting that fixes it; printed on its own line.
        exit_code: the process exit status ``verlfit`` returns: 2 when the command line's input is refused (an
            option, or a path or file it names: missing, unreadable, malformed; argparse's status for usage
            errors), the default 1 when the work or the machine failed (a run that crashed, no usable GPU, a
            missing package, the hub unreachable, a full disk). ``verlfit --help`` lists the statuses.
    """

    def __init__(self, message: str, fix: str | None = None, exit_code: int = 1):
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.exit_code = exit_code

    def __str__(self) -> str:
        if self.fix:
            return f"{self.message}\n  fix: {self.fix}"
        return self.message


class StandardOutputFailed(Exception):
    """Writing to standard output failed (``error``): the reader went away (``head`` closed the pipe: EPIPE) or the
    place it goes cannot take more (``> /dev/full``, a full disk: ENOSPC). Raised by ``verlfit.cli``'s guarded
    standard output, so ``verlfit.cli.main`` can tell it from an ``OSError`` of a file a command writes (those are bugs
    and keep a traceback), and a command that writes an output can print its progress without a failed print
    stopping the write (:func:`verlfit.output_files.printed_while_writing`)."""

    def __init__(self, error: OSError):
        super().__init__(error)
        self.error = error


def os_error_words(error: OSError) -> str:
    """What the kernel said of a failed write, in the words a message uses: ``"read-only file system"`` (EROFS: no
    permission change helps, the mount is read-only), ``"permission denied"`` (EACCES, EPERM), ``"no space left on
    the disk"`` (ENOSPC), else the system's own text (``strerror``)."""

    if error.errno == errno.EROFS:
        return "read-only file system"
    if error.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if error.errno == errno.ENOSPC:
        return "no space left on the disk"
    return error.strerror or str(error)
