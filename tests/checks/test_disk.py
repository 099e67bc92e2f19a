"""verlfit.checks.disk: the file system a path lies on, read from a mount table."""

from pathlib import Path

import pytest

from verlfit.checks.disk import PSEUDO_FILE_SYSTEMS, file_system_type

# /proc/self/mountinfo's format (proc(5)): ID PARENT MAJOR:MINOR ROOT MOUNT_POINT OPTIONS [TAGS] - TYPE SOURCE OPTIONS
MOUNT_TABLE = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime shared:7 - sysfs sysfs rw
24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,size=12334076k,mode=755
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw
27 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
30 27 8:2 / /data/my\\040runs rw,relatime - xfs /dev/sdb1 rw
31 27 0:30 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw
40 27 8:3 / /mnt rw,relatime - ext4 /dev/sdc1 rw
41 27 0:40 / /mnt rw,relatime - tmpfs tmpfs rw
"""


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/proc/x", "proc"),
        ("/proc", "proc"),
        ("/sys/kernel", "sysfs"),
        ("/sys/fs/cgroup/cpu", "cgroup2"),  # the longest mount point holding the path
        ("/dev/runs", "devtmpfs"),
        ("/dev/shm/run", "tmpfs"),
        ("/data/my runs/a", "xfs"),  # mountinfo writes a space as \040
        ("/data/my", "ext4"),  # a prefix of the name is not a folder above it
        ("/mnt/run", "tmpfs"),  # a later mount over the same point hides the earlier
        ("/home/user/runs", "ext4"),
    ],
)
def test_file_system_type_is_the_longest_mount_point_above_the_path(tmp_path, path, kind):
    table = tmp_path / "mountinfo"
    table.write_text(MOUNT_TABLE)
    assert file_system_type(path, mount_table=table) == kind


def test_file_system_type_is_none_without_a_mount_table(tmp_path):
    assert file_system_type("/proc", mount_table=tmp_path / "absent") is None


def test_the_pseudo_file_systems_are_the_kernels_not_those_runs_may_use():
    assert {"proc", "sysfs", "devtmpfs", "cgroup", "cgroup2"} <= PSEUDO_FILE_SYSTEMS
    assert not {"tmpfs", "ext4", "xfs", "overlay", "nfs", "fuse"} & PSEUDO_FILE_SYSTEMS


@pytest.mark.skipif(not Path("/proc/self/mountinfo").is_file(), reason="no /proc/self/mountinfo (not Linux)")
def test_file_system_type_of_proc_on_this_machine():
    assert file_system_type("/proc/self") == "proc"
