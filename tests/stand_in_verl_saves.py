"""A stand-in for verl 0.4.1's checkpoint saving, pruning included, for verlfit's --keep-checkpoints tests.

    python tests/stand_in_verl_saves.py RUN_DIR --start S --end E --save-freq F --keep K [--kill]

Prints verl's console step line for steps S+1..E and saves a checkpoint at every multiple of F (and at E when E is
the run's last step, ``--last``), the way verl 0.4.1 does (``ray_trainer.py:806-839``,
``fsdp_checkpoint_manager.py:159-305``, ``checkpoint_manager.py:132-140``):

- the checkpoint manager of this process keeps the paths of the saves *it* made (``previous_saved_paths``, empty at
  start); before saving, once K of them exist, it removes the oldest one's ``actor/`` and ``critic/`` folders (not
  ``global_step_N``, whose ``data.pt`` stays);
- then ``global_step_N/actor``, ``global_step_N/critic``, ``global_step_N/data.pt``, and last the marker
  ``latest_checkpointed_iteration.txt``.

``--kill`` ends the process with SIGKILL after step E (a power cut: no handler runs); else it exits 0.
:func:`verl_alone` is the same bookkeeping without a process, for the expected layouts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
from pathlib import Path

STEP_LINE = (
    "(TaskRunner pid=1) step:{n} - actor/pg_loss:0.5 - timing_s/step:1.0 - perf/total_num_tokens:100 -"
    " perf/throughput:100.0"
)


def save(checkpoints: Path, step: int, keep: int, previous: list[Path]) -> None:
    """verl's save of ``step`` with its own pruning (``max_ckpt_to_keep`` = ``keep``); ``previous`` is this process's
    list."""
    for role in ("actor", "critic"):
        role_path = checkpoints / f"global_step_{step}" / role
        if keep and len(previous) >= keep:  # fsdp_checkpoint_manager.py:184-187, once per role's manager
            for old in previous[: len(previous) - keep + 1]:
                shutil.rmtree(old.parent / role, ignore_errors=True)
        role_path.mkdir(parents=True, exist_ok=True)
        (role_path / "model_world_size_1_rank_0.pt").write_bytes(b"weights")
    if keep and len(previous) >= keep:
        del previous[: len(previous) - keep + 1]
    previous.append(checkpoints / f"global_step_{step}" / "actor")
    (checkpoints / f"global_step_{step}" / "data.pt").write_bytes(b"dataloader")
    (checkpoints / "latest_checkpointed_iteration.txt").write_text(str(step))


def verl_alone(sessions: list[tuple[int, int]], save_freq: int, keep: int, root: Path, last: int) -> Path:
    """The checkpoints folder verl alone leaves after ``sessions`` ((start, end) steps, one process each)."""
    checkpoints = root / "checkpoints"
    for start, end in sessions:
        previous: list[Path] = []
        for step in range(start + 1, end + 1):
            if step % save_freq == 0 or step == last:
                save(checkpoints, step, keep, previous)
    return checkpoints


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--start", type=int, required=True)
    parser.add_argument("--end", type=int, required=True)
    parser.add_argument("--last", type=int, required=True)
    parser.add_argument("--save-freq", type=int, required=True)
    parser.add_argument("--keep", type=int, required=True)
    parser.add_argument("--kill", action="store_true")
    args = parser.parse_args()
    previous: list[Path] = []
    for step in range(args.start + 1, args.end + 1):
        print(STEP_LINE.format(n=step), flush=True)
        if step % args.save_freq == 0 or step == args.last:
            save(args.run_dir / "checkpoints", step, args.keep, previous)
    if args.kill:
        os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
