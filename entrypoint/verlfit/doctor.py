"""verlfit doctor (not yet implemented)."""

from verlfit.errors import VerlfitError


def register(subparsers):
    parser = subparsers.add_parser("doctor", help="(not yet implemented)")
    parser.set_defaults(func=_run)
    return parser


def _run(args):
    raise VerlfitError("verlfit doctor is not implemented yet")
