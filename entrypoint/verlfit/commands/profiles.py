"""``verlfit profiles``: list the hardware profiles (:mod:`verlfit.profiles`), show one, or print its environment
defaults as shell lines for the container entrypoint (:func:`verlfit.profiles.environment_shell`)."""

from __future__ import annotations

import argparse

from verlfit.errors import VerlfitError
from verlfit.profiles import PROFILE_NAMES, Profile, environment_shell, load_profile


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``profiles`` parser; its ``func`` prints the profiles or one profile's ``--env-shell`` lines."""
    parser = subparsers.add_parser(
        "profiles",
        help="list hardware profiles, or show one",
        description="List verlfit's hardware profiles, show one, or print its environment defaults as shell.",
        epilog='examples:\n  $ verlfit profiles\n  $ verlfit profiles p40\n  $ eval "$(verlfit profiles p40 '
        '--env-shell)"',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", nargs="?", type=str.lower, choices=PROFILE_NAMES, help="profile to show")
    parser.add_argument(
        "--env-shell",
        action="store_true",
        help="print shell lines exporting the environment defaults (user values win)",
    )
    parser.set_defaults(func=_run)
    return parser


def _run(args) -> int:
    """Print the profiles (``args.name``: that one, in full), or with ``--env-shell`` one profile's shell lines.

    Raises:
        VerlfitError: ``--env-shell`` without a profile name (exit status 2).
    """
    if args.env_shell:
        if not args.name:
            raise VerlfitError("--env-shell needs a profile name", fix="verlfit profiles p40 --env-shell", exit_code=2)
        print(environment_shell(load_profile(args.name)))
        return 0
    for name in [args.name] if args.name else PROFILE_NAMES:
        print("\n".join(profile_lines(load_profile(name), full=bool(args.name))))
    return 0


def profile_lines(profile: Profile, full: bool) -> list[str]:
    """``name: description``; with ``full`` also its image, compute capability, dtype, attention, rollout,
    environment defaults and verl overrides (those added by ``--rollout hf`` / ``--attention sdpa|eager`` last)."""
    lines = [f"{profile.name}: {profile.description}"]
    if not full:
        return lines
    capability = ".".join(map(str, profile.min_compute_capability))
    lines += [f"  image: {profile.image}", f"  compute capability >= {capability}"]
    lines.append(f"  dtype: {profile.dtype}; attention: {profile.attention}; rollout: {profile.rollout}")
    lines += [f"  {key}={value}" for key, value in profile.environment.items()]
    lines += [f"  {override}" for override in profile.overrides]
    for title, listed in (
        ("--rollout hf", profile.hf_rollout_overrides),
        ("--attention sdpa|eager", profile.padded_training_overrides),
    ):
        if listed:
            lines.append(f"  with {title} also:")
            lines += [f"    {override}" for override in listed]
    return lines
