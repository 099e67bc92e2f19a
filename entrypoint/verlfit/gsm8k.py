"""verlfit gsm8k (not yet implemented)."""

from verlfit.errors import VerlfitError


def register(subparsers):
    parser = subparsers.add_parser("prepare-gsm8k", help="(not yet implemented)")
    parser.set_defaults(func=_run)
    return parser


def _run(args):
    raise VerlfitError("verlfit gsm8k is not implemented yet")
