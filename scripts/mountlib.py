"""What the mount-driving scripts share (segment_retention.py, protected_ring.py)."""

import subprocess
import time


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def unmount(dvrfs, img, mnt):
    """Unmounts `mnt` (lazily if it is busy) and waits until the daemon has
    committed and let go of `img`, for at most 10 s."""
    if run(["umount", mnt]).returncode != 0:
        run(["umount", "-l", mnt])
    for _ in range(200):
        if run([dvrfs, "info", img]).returncode == 0:
            return
        time.sleep(0.05)
