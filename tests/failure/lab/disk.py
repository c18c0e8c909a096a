"""A slow disk for one hub: its writes and fsyncs delayed by a settable time.

Two ways, the first the machine allows:

- ``dm-delay``: a device-mapper ``delay`` target over a loop device backed by a sparse file,
  formatted ext4 and mounted; the hub's data directory lives there. A real slow disk: every
  write (and so every fsync) waits in the block layer. The delay is changed by reloading the
  table (``dmsetup suspend``/``load``/``resume``).
- where the kernel has no device-mapper (as this machine's), an ``LD_PRELOAD`` library built
  here with ``cc`` that sleeps in ``fsync``/``fdatasync`` for the time written in a control
  file. The hub's storage thread blocks in fsync exactly as on a slow disk; reads and page-cache
  writes stay fast.

``slow_disk_unavailable()`` says why neither works (the test then skips). Everything is named
after the lab's id, so ``remove_disks`` (called when a lab is removed or swept) finds it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

REGISTRY = Path("/run/hedwig-lab")
_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void hold(void) {
    const char *path = getenv("HWL_FSYNC_DELAY_FILE");
    if (!path) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    long ms = 0;
    if (fscanf(f, "%ld", &ms) != 1) ms = 0;
    fclose(f);
    if (ms > 0) {
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
    }
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = dlsym(RTLD_NEXT, "fsync");
    hold();
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = dlsym(RTLD_NEXT, "fdatasync");
    hold();
    return real(fd);
}
"""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, timeout=60)


def dm_delay_unavailable() -> str | None:
    for tool in ("dmsetup", "losetup", "mkfs.ext4"):
        if shutil.which(tool) is None:
            return f"no {tool}"
    targets = _run("dmsetup", "targets")
    if targets.returncode != 0:
        return "the kernel has no device-mapper (" + targets.stderr.strip().splitlines()[0] + ")"
    if not any(line.split()[:1] == ["delay"] for line in targets.stdout.splitlines()):
        return "the kernel's device-mapper has no delay target (dm-delay)"
    return None


def preload_unavailable() -> str | None:
    if shutil.which("cc") is None:
        return "no C compiler for the fsync-delaying library"
    return None


def slow_disk_unavailable() -> str | None:
    dm, preload = dm_delay_unavailable(), preload_unavailable()
    if dm and preload:
        return f"no slow disk: dm-delay: {dm}; fsync delay: {preload}"
    return None


@dataclass
class SlowDisk:
    """A directory on a slow disk (``path``) and how to start a process that uses it.

    ``launch`` is a command prefix (``env LD_PRELOAD=...``) to put after the namespace's
    ``ip netns exec``; empty for dm-delay, where the disk itself is slow."""

    lab_id: str
    delay_ms: int = 0
    kind: str = ""
    path: Path = field(default=Path(), init=False)
    launch: tuple[str, ...] = field(default=(), init=False)
    _loop: str = field(default="", init=False)

    @property
    def _base(self) -> Path:
        return REGISTRY / f"{self.lab_id}-disk"

    @property
    def _dm_name(self) -> str:
        return f"{self.lab_id}-slow"

    def create(self) -> SlowDisk:
        self._base.mkdir(parents=True, exist_ok=True)
        self.path = self._base / "mnt"
        self.path.mkdir(exist_ok=True)
        if dm_delay_unavailable() is None:
            self._create_dm()
        else:
            self._create_preload()
        self.set_delay(self.delay_ms)
        return self

    def _create_dm(self) -> None:
        self.kind = "dm-delay"
        image = self._base / "disk.img"
        with open(image, "wb") as f:
            f.truncate(512 * 1024 * 1024)
        self._loop = _check("losetup", "--find", "--show", str(image)).strip()
        _check("dmsetup", "create", self._dm_name, "--table", self._table(0))
        _check("mkfs.ext4", "-q", "-F", f"/dev/mapper/{self._dm_name}")
        _check("mount", f"/dev/mapper/{self._dm_name}", str(self.path))

    def _table(self, delay_ms: int) -> str:
        sectors = _check("blockdev", "--getsz", self._loop).strip()
        # reads undelayed, writes (and the flushes fsync sends) delayed
        return f"0 {sectors} delay {self._loop} 0 0 {self._loop} 0 {delay_ms}"

    def _create_preload(self) -> None:
        self.kind = "fsync-delay preload"
        source, library = self._base / "fsyncdelay.c", self._base / "fsyncdelay.so"
        source.write_text(_SHIM)
        _check("cc", "-shared", "-fPIC", "-O2", "-o", str(library), str(source), "-ldl")
        control = self._base / "delay_ms"
        self.launch = (
            "env",
            f"LD_PRELOAD={library}",
            f"HWL_FSYNC_DELAY_FILE={control}",
        )

    def set_delay(self, delay_ms: int) -> None:
        """Every write's fsync takes ``delay_ms`` longer from now on."""
        self.delay_ms = delay_ms
        if self.kind == "dm-delay":
            _check("dmsetup", "suspend", self._dm_name)
            try:
                _check("dmsetup", "load", self._dm_name, "--table", self._table(delay_ms))
            finally:
                _check("dmsetup", "resume", self._dm_name)
        else:
            tmp = self._base / "delay_ms.tmp"
            tmp.write_text(str(delay_ms))
            os.replace(tmp, self._base / "delay_ms")

    def remove(self) -> None:
        remove_disks(self.lab_id)


def _check(*args: str) -> str:
    done = _run(*args)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def remove_disks(lab_id: str) -> None:
    """Unmount, remove the dm device and loop device, delete the files of ``lab_id``'s disk."""
    base = REGISTRY / f"{lab_id}-disk"
    mnt = str(base / "mnt")
    with contextlib.suppress(OSError):
        mounts = Path("/proc/mounts").read_text().split("\n")
        if any(line.split(" ")[1:2] == [mnt] for line in mounts):
            _run("umount", "-l", mnt)
    if shutil.which("dmsetup") and dm_delay_unavailable() is None:
        _run("dmsetup", "remove", "--force", f"{lab_id}-slow")
    if shutil.which("losetup"):
        for line in _run("losetup", "-j", str(base / "disk.img")).stdout.splitlines():
            _run("losetup", "-d", line.split(":")[0])
    shutil.rmtree(base, ignore_errors=True)
