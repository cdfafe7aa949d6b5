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


def finish(report, ok, work, keep):
    """Prints `report` with its verdict as JSON, removes the scratch directory
    `work` unless `keep`, and exits 0 when `ok`, 1 otherwise."""
    import json
    import shutil
    import sys

    report["ok"] = bool(ok)
    print(json.dumps(report, indent=2, sort_keys=True))
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if ok else 1)
