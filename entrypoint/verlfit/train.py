"""verlfit train (not yet implemented)."""

from verlfit.errors import VerlfitError


def register(subparsers):
    parser = subparsers.add_parser("train", help="(not yet implemented)")
    parser.set_defaults(func=_run)
    return parser


def _run(args):
    raise VerlfitError("verlfit train is not implemented yet")
