"""verlfit plan (not yet implemented)."""

from verlfit.errors import VerlfitError


def register(subparsers):
    parser = subparsers.add_parser("plan", help="(not yet implemented)")
    parser.set_defaults(func=_run)
    return parser


def _run(args):
    raise VerlfitError("verlfit plan is not implemented yet")
