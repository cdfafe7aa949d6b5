#!/usr/bin/env python3
"""The kernel comparison (issue 24): the AVFS section-5 experiments, and the ones past the
paper, run against ext4, XFS, btrfs and ext3 under the kernel's I/O schedulers and against
dvrfs, all on the same emulated hard disk (`dvrfs emulate`, docs/emulate.md).

    python3 scripts/kernel_compare.py run [--quick] [--disk avfs-250g|nvr-8t] [--stacks a,b]
                                          [--experiments e1,e2] [--data DIR]
    python3 scripts/kernel_compare.py render [--data DIR]
    python3 scripts/kernel_compare.py clean [--gold]  (what a killed run left: mounts, loop device,
                                                       image; --gold: the filled images too)

`run` needs root and one `dvrfs` binary (DVRFS_BIN, else target/release/dvrfs). Every run
gets a sparse copy of a filled image (made once per file system and fill: mkfs, mount and
`dvrfs bench --dir --fill-only` with the emulator's timing off; see gold()), the emulator
with its loop device, the loop device's scheduler and read-ahead set in sysfs, the mount
with the stack's tuning, then one `dvrfs bench --dir --reuse-fill` (or, for dvrfs, a
fresh image and `dvrfs bench /dev/loopN`). Its JSON, its `--plot` output and the exact commands go to
DATA/<disk>/<stack>/<experiment>/<run>/. The invariant that makes it resumable: a run
directory holds `report.json` only if the run completed (written to a temporary name and
renamed), and a run whose `report.json` exists is never run again; a killed run leaves no
`report.json` and is rerun from the start next time.

`render` writes docs/kernel-compare.md and docs/kernel-compare/*.svg from DATA alone: a
figure that is not in DATA is "not run yet", never invented. The method section is the
METHOD text below; everything else in the document is generated.
"""
import datetime, errno, fcntl, hashlib, json, os, re, shutil, signal, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True   # no scripts/__pycache__ in the work tree
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from svgcharts import combined_cdf, line_chart, MANY_COLORS  # noqa: E402

BIN = os.environ.get("DVRFS_BIN") or os.path.join(ROOT, "target", "release", "dvrfs")
DOC = os.path.join(ROOT, "docs", "kernel-compare.md")
PLOTS = os.path.join(ROOT, "docs", "kernel-compare")
DATA = os.path.join(PLOTS, "data")
WORK = "/var/tmp/dvrfs-kcompare"          # image, emulator mount, file system mount
IMG, EMU, MNT = (os.path.join(WORK, n) for n in ("disk.img", "emu", "fs"))
GOLD = "/var/tmp/dvrfs-kcompare-gold"     # filled images, one per file system and fill (see gold())
MIN_FREE = 5 << 30                         # bytes free in /var/tmp needed to start a run
# While this file exists the runner starts no new run (the one under way finishes), and
# STATE says "held" once it waits: a build or a test suite can then have the machine
# without disturbing a measurement (`touch HOLD`, wait for "held", work, `rm HOLD`).
HOLD = os.path.join(WORK, "hold")
STATE = os.path.join(WORK, "state")
RA_SECTORS = 8192                          # the tuned read-ahead: 4 MiB (blockdev --setra)
# A run in which more than this share of the emulator's replies came more than 1 ms late
# measured the host (a build, another job) as much as the disk: it is kept aside as
# disturbed-N.json and made again, up to DISTURBED_TRIES times; then the last is kept.
# So is a run during which some task waited for a CPU more than CPU_PRESSURE_MAX % of
# the time (the run's own cgroup, see join_cgroup()). Late replies alone do not tell a busy host:
# a kernel stack's deep queue has 1 to 3% of them on a quiet one.
LATE_MAX = 0.05
CPU_PRESSURE_MAX = 10.0
DISTURBED_TRIES = 6

# The runner moves itself (and so every emulator, mount helper and bench it starts) into a
# cgroup of its own in the unified hierarchy, so that the CPU pressure it reads is its own
# tasks' wait for a CPU, not a niced build's beside it (which waits behind the run by
# design). Where no cgroup v2 hierarchy is writable, the host-wide figure is read.
CGROUP_ROOTS = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")
CGROUP_NAME = "dvrfs-kcompare"
PRESSURE = "/proc/pressure/cpu"

def join_cgroup():
    """Enter the runner's own v2 cgroup; returns the cpu.pressure file to read."""
    global PRESSURE
    for root in CGROUP_ROOTS:
        if not os.path.exists(os.path.join(root, "cgroup.procs")) or \
                not os.path.exists(os.path.join(root, "cgroup.threads")):
            continue   # not a cgroup v2 hierarchy
        d = os.path.join(root, CGROUP_NAME)
        try:
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            continue
        if os.path.exists(os.path.join(d, "cpu.pressure")):
            PRESSURE = os.path.join(d, "cpu.pressure")
            return PRESSURE
    return PRESSURE

def cpu_stall_us():
    """Microseconds some task of the run has waited for a CPU (PSI), or None."""
    try:
        with open(PRESSURE) as f:
            return int(f.readline().split("total=")[1])
    except (OSError, IndexError, ValueError):
        return None

# The stacks. fs: the file system (None: dvrfs itself on the loop device); mkfs, mount:
# the commands' extra arguments; sched and knobs: the loop device's elevator and its
# queue/iosched files; ra: read-ahead in 512-byte sectors (None: the kernel's default);
# rt: stream threads in the real-time I/O class (`--ioprio rt`); bench: more bench flags;
# exps: the experiments it runs (default: all); why: one line of rationale.
EXT4_MKFS = ["-T", "largefile4", "-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard"]
STACKS = {
    "ext4-deadline": dict(fs="ext4", mkfs=EXT4_MKFS, mount="noatime", sched="mq-deadline", knobs={}, ra=RA_SECTORS, rt=True,
                          why="the default elevator of a SATA disk, with the tuning of an expert"),
    "ext4-deadline-untuned": dict(fs="ext4", mkfs=["-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard"], mount="defaults",
                                  sched="mq-deadline", knobs={}, ra=None, rt=False, exps=("cdf", "photos"),
                                  why="what a recorder gets out of the box: relatime, 128 KiB read-ahead, best-effort I/O class"),
    "ext4-bfq": dict(fs="ext4", mkfs=EXT4_MKFS, mount="noatime", sched="bfq", knobs={}, ra=RA_SECTORS, rt=True,
                     why="BFQ (CFQ's successor) with its defaults (low_latency on); it serves the real-time class first"),
    "ext4-bfq-nolowlat": dict(fs="ext4", mkfs=EXT4_MKFS, mount="noatime", sched="bfq", knobs={"low_latency": "0"}, ra=RA_SECTORS, rt=True,
                              why="BFQ without the interactive heuristics, which favour a freshly started reader over long streams"),
    "ext4-kyber": dict(fs="ext4", mkfs=EXT4_MKFS, mount="noatime", sched="kyber", knobs={}, ra=RA_SECTORS, rt=True,
                       why="the latency-target elevator meant for fast devices, for completeness"),
    "ext4-none": dict(fs="ext4", mkfs=EXT4_MKFS, mount="noatime", sched="none", knobs={}, ra=RA_SECTORS, rt=True,
                      why="no elevator: the drive's NCQ (SPTF, 32 commands) is the only scheduler"),
    "xfs-deadline": dict(fs="xfs", mkfs=["-K"], mount="noatime", sched="mq-deadline", knobs={}, ra=RA_SECTORS, rt=True, extsize="64m",
                         why="XFS with a 64 MiB extent-size hint on the bench directory, so every recording grows in large extents"),
    "xfs-bfq": dict(fs="xfs", mkfs=["-K"], mount="noatime", sched="bfq", knobs={}, ra=RA_SECTORS, rt=True, extsize="64m",
                    why="the same XFS under BFQ"),
    "btrfs-deadline": dict(fs="btrfs", mkfs=["-K"], mount="noatime", sched="mq-deadline", knobs={}, ra=RA_SECTORS, rt=True,
                           why="copy-on-write with checksums: every write goes to new space"),
    "btrfs-bfq": dict(fs="btrfs", mkfs=["-K"], mount="noatime", sched="bfq", knobs={}, ra=RA_SECTORS, rt=True,
                      why="the same btrfs under BFQ"),
    "ext3-bfq": dict(fs="ext3", mkfs=["-T", "largefile4", "-E", "nodiscard"], mount="noatime", sched="bfq", knobs={}, ra=RA_SECTORS, rt=True,
                     why="the paper's baseline layout (ext3, block-mapped files) under CFQ's successor"),
    "ext3-deadline": dict(fs="ext3", mkfs=["-T", "largefile4", "-E", "nodiscard"], mount="noatime", sched="mq-deadline", knobs={}, ra=RA_SECTORS, rt=True, exps=("cdf", "photos"),
                          why="the paper's layout under the default elevator"),
    "ext4-deadline-fsync1s": dict(fs="ext4", mkfs=EXT4_MKFS, mount="noatime", sched="mq-deadline", knobs={}, ra=RA_SECTORS, rt=True,
                                  bench=["--fsync-every", "1s"], exps=("cdf", "photos"),
                                  why="ext4-deadline with each recording calling fdatasync every second: the durability dvrfs gives (a crash loses at most the last commit interval, 1 s) rather than ext4's default (dirty pages written back after 30 s)"),
    "dvrfs": dict(fs=None, mkfs=[], mount=None, sched="none", knobs={}, ra=None, rt=False,
                  why="dvrfs with the mixer on the same loop device, one command at a time (queue depth 1 to the emulator)"),
    "dvrfs-commit5s": dict(fs=None, mkfs=[], mount=None, sched="none", knobs={}, ra=None, rt=False,
                           bench=["--commit-interval", "5s"], exps=("cdf", "photos"),
                           why="dvrfs committing its metadata every 5 s, as ext4's journal does, instead of every second: what the shorter interval costs in disk time"),
}
QUICK_STACKS = ["ext4-deadline", "dvrfs"]

PAPER = ["2r0w", "4r0w", "6r0w", "8r0w", "0r2w", "2r2w", "4r2w", "6r2w"]

def streams(wl):
    """Stream count of an NrMw or comma-list workload (for the duration rule)."""
    n = 0
    for term in wl.split(","):
        t = term.split("@")[0]
        m = re.fullmatch(r"(\d+)r(\d+)w", t) or re.fullmatch(r"(\d+)[rw]()", t)
        if not m:
            raise ValueError(f"workload term {term!r}")
        n += sum(int(g or 0) for g in m.groups())
    return n

def duration_s(wl):
    """The duration rule: 20 stream-minutes and at least 3 minutes, so that a stream that
    glitched once every ten minutes would show about two glitches."""
    return max(180, -(-1200 // max(1, streams(wl))))

# The experiments: name -> (disks it runs on, a function giving [(run, bench args)]).
# Runs of the searches (maxstreams*) are decided as the search goes (see search()).
def exp_cdf(q):
    if q:   # the smoke version: 30 s, the file system 10% full (the 80% fill alone takes minutes)
        return [(wl, ["--workload", wl, "--duration", "30s", "--fill", "10%"]) for wl in ("2r0w", "2r2w")]
    return [(wl, ["--workload", wl, "--duration", f"{duration_s(wl)}s"]) for wl in PAPER]

def exp_fileset(q):
    return [(f"seed{s}", ["--workload", "4r2w", "--seed", str(s), "--duration", "60s"]) for s in range(1, 11)]

def exp_age(q):
    return [(f"age{a}", ["--workload", "4r2w", "--age", str(a), "--duration", "120s"]) for a in (0, 5, 10, 20)]

def exp_delete(q):
    return [("2r0w", ["--workload", "2r0w", "--best-effort", "delete", "--duration", "180s"])]

def exp_photos(q):
    return [("2r2w", ["--workload", "2r2w", "--best-effort", "photos", "--duration", "180s"])]

EXPERIMENTS = {
    "cdf": (("avfs-250g", "nvr-8t"), exp_cdf),
    "fileset": (("avfs-250g",), exp_fileset),
    "age": (("avfs-250g",), exp_age),
    "delete": (("avfs-250g",), exp_delete),
    "photos": (("avfs-250g",), exp_photos),
    "maxstreams": (("avfs-250g", "nvr-8t"), None),
    "maxstreams-greedy": (("avfs-250g", "nvr-8t"), None),
    "nvr-rec": (("nvr-8t",), None),
}
QUICK_EXPERIMENTS = ["cdf"]
SEARCH_S = 180   # each probe of a search: 3 minutes

def search_workload(exp, n):
    """The mix a search probes at n streams: half reads, half writes (the odd one a read);
    nvr-rec: n recordings at 4 Mbit/s beside two playbacks at the default rate."""
    if exp == "nvr-rec":
        return f"2r,{n}w@4M"
    return f"{n - n // 2}r{n // 2}w"

def search_args(exp, n):
    a = ["--workload", search_workload(exp, n), "--duration", f"{SEARCH_S}s"]
    return a + (["--best-effort", "greedy-read"] if exp == "maxstreams-greedy" else [])


# ---------------------------------------------------------------- running

class Stop(Exception):
    pass

def on_signal(sig, _frame):
    raise Stop(f"signal {sig}")

def sh(cmd, log, check=True, **kw):
    """Run a command, log it (the exact command lines go into the run's commands.txt)."""
    log.append(" ".join("dvrfs" if c == BIN else c for c in cmd))
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
    return r

def is_mount(path):
    """Whether `path` is a mount point, read from the mount table: a FUSE mount whose
    emulator died (the host rebooted it away, or it was killed) fails every stat with
    ENOTCONN, so os.path.ismount cannot see it."""
    want = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        for line in f:
            point = line.split()[1].encode().decode("unicode_escape")
            if point == want:
                return True
    return False

def is_stale(path):
    """A mount whose FUSE server is gone (every access says ENOTCONN)."""
    try:
        os.stat(path)
        return False
    except OSError as e:
        return e.errno == errno.ENOTCONN

def clear_stale_emulator(quiet=False):
    """An emulator that died (process killed, session ended) leaves its loop device and a
    dead FUSE mount: detach the loop devices backed by its disk, then unmount lazily."""
    disk = os.path.join(os.path.realpath(EMU), "disk")
    r = subprocess.run(["losetup", "-a"], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        dev, _, rest = line.partition(":")
        if f"({disk})" in rest:
            subprocess.run(["losetup", "-d", dev], capture_output=True)
    r = subprocess.run(["umount", "-l", EMU], capture_output=True, text=True)
    if r.returncode != 0 and not quiet:
        print(f"umount -l {EMU}: {r.stderr.strip()}", file=sys.stderr)

def leftovers():
    """What a previous run left behind, as (what, how to clean it) pairs."""
    out = []
    if is_mount(MNT):
        out.append((f"a file system mounted on {MNT}", f"umount {MNT}"))
    if is_mount(EMU) and is_stale(EMU):
        out.append((f"a dead emulator's mount on {EMU}", f"losetup -d its loop device; umount -l {EMU}"))
    elif is_mount(EMU):
        out.append((f"an emulator serving {EMU}", f"{BIN} emulate --stop {EMU}"))
    if os.path.exists(IMG):
        out.append((f"the image {IMG}", f"rm {IMG}"))
    return out

def clean(quiet=False):
    """Unmount, stop the emulator (which detaches its loop device), remove the image."""
    if is_mount(MNT) and is_stale(EMU):  # the file system on a dead emulator's loop device
        subprocess.run(["umount", "-l", MNT], capture_output=True)
    if is_mount(EMU) and is_stale(EMU):
        clear_stale_emulator(quiet)
    if is_mount(EMU):   # untimed, the write-back of an interrupted run's dirty pages takes seconds, not hours
        try:
            set_timing(False)
        except OSError:
            pass
    for _ in range(5):
        if not is_mount(MNT):
            break
        subprocess.run(["umount", MNT], capture_output=True)
        if is_mount(MNT):
            time.sleep(1)
    if is_mount(EMU):
        try:
            with open(os.path.join(EMU, "timing"), "w") as f:
                f.write("off")
        except OSError:
            pass
        r = subprocess.run([BIN, "emulate", "--stop", EMU], capture_output=True, text=True)
        if r.returncode != 0 and not quiet:
            print(f"emulate --stop: {r.stderr.strip()}", file=sys.stderr)
    if not is_mount(EMU) and not is_mount(MNT) and os.path.exists(IMG):
        os.remove(IMG)

def capacity(model):
    """The model's capacity: the missing-image error names it (`truncate -s BYTES`)."""
    os.makedirs(EMU, exist_ok=True)
    r = subprocess.run([BIN, "emulate", os.path.join(WORK, "none.img"), "--model", model, "--mount", EMU],
                       capture_output=True, text=True)
    for tok in (r.stderr + r.stdout).replace("`", " ").split():
        if tok.isdigit() and int(tok) > 1 << 30:
            return int(tok)
    raise RuntimeError(f"cannot learn the capacity of {model}: {r.stderr.strip()}")

def set_timing(on):
    with open(os.path.join(EMU, "timing"), "w") as f:
        f.write("on" if on else "off")

def setup(disk, st, log, gold=None):
    """A fresh emulated disk and, for a kernel stack, its tuned file system: made and
    mounted, or with `gold` a copy of that filled image, mounted. Returns /dev/loopN."""
    os.makedirs(EMU, exist_ok=True)
    os.makedirs(MNT, exist_ok=True)
    if gold:
        sh(["cp", "--sparse=always", gold, IMG], log)
    else:
        sh(["truncate", "-s", str(capacity(disk)), IMG], log)
    dev = sh([BIN, "emulate", IMG, "--model", disk, "--mount", EMU, "--attach",
              "--log", os.path.join(WORK, "emulate.log")], log).stdout.strip()
    name = os.path.basename(dev)
    q = f"/sys/block/{name}/queue"
    log.append(f"echo {st['sched']} > {q}/scheduler")
    with open(f"{q}/scheduler", "w") as f:
        f.write(st["sched"])
    for k, v in st["knobs"].items():
        log.append(f"echo {v} > {q}/iosched/{k}")
        with open(f"{q}/iosched/{k}", "w") as f:
            f.write(v)
    if st["ra"] is not None:
        sh(["blockdev", "--setra", str(st["ra"]), dev], log)
    if st["fs"] is None:
        return dev
    log.append(f"echo off > {EMU}/timing")
    set_timing(False)                       # format at host speed
    if gold:                                # the bench turns the timing on when it measures
        sh(["mount", "-t", st["fs"], "-o", st["mount"], dev, MNT], log)
        return dev
    sh([f"mkfs.{st['fs']}", *(["-q"] if st["fs"].startswith("ext") else ["-f", "-q"] if st["fs"] == "xfs" else ["-f", "-q"]),
        *st["mkfs"], dev], log)
    sh(["mount", "-t", st["fs"], "-o", st["mount"], dev, MNT], log)
    if st.get("extsize"):
        sh(["xfs_io", "-c", f"extsize {st['extsize']}", MNT], log)
    log.append(f"echo on > {EMU}/timing")
    set_timing(True)
    return dev

def bench_cmd(st, dev, args, plot):
    if st["fs"] is None:
        return [BIN, "bench", dev, "--force", *args, *st.get("bench", []), "--json", "--plot", plot]
    return [BIN, "bench", "--dir", MNT, "--reuse-fill", *args, *(["--ioprio", "rt"] if st["rt"] else []),
            *st.get("bench", []), "--json", "--plot", plot]

def fill_args(args):
    """The bench arguments a fill depends on (`bench --dir --reuse-fill` checks them
    against the fill's manifest too)."""
    out, i = [], 0
    while i < len(args):
        if args[i] in ("--seed", "--age", "--fill", "--bitrate") or args[i:i + 2] == ["--best-effort", "delete"]:
            out += args[i:i + 2]
        i += 2 if args[i].startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--") else 1
    return out

def gold(disk, st, args):
    """The filled image for a kernel stack's run: made once (mkfs, mount, `bench --dir
    --fill-only`, all with the emulator's timing off), then copied for every run that
    fills alike. Shared by the stacks that differ only in the elevator, read-ahead or I/O
    class (the layout is the file system's, made at host speed). Returns (path, the
    commands that made it)."""
    fill = fill_args(args)
    key = "|".join([st["fs"], " ".join(st["mkfs"]), st["mount"], st.get("extsize") or "", " ".join(fill)])
    path = os.path.join(GOLD, disk, f"{st['fs']}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.img")
    made = path + ".commands.txt"
    if os.path.exists(path) and os.path.exists(made):
        with open(made) as f:
            return path, f.read().splitlines()
    log, t0 = [], time.time()
    print(f"    making the fill ({st['fs']} {' '.join(fill) or 'defaults'}) once for every run that fills alike", flush=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        setup(disk, dict(st, sched="none", knobs={}, ra=None), log)
        set_timing(False)
        log.append(f"echo off > {EMU}/timing")
        sh([BIN, "bench", "--dir", MNT, "--fill-only", "--workload", "0r1w", *fill, "--json"], log)
        sh(["umount", MNT], log)
        sh([BIN, "emulate", "--stop", EMU], log)
        sh(["mv", IMG, path], log)
    finally:
        clean(quiet=True)
    log.append(f"# made in {time.time() - t0:.0f} s")
    with open(made, "w") as f:
        f.write("\n".join(log) + "\n")
    return path, log

def set_state(what):
    with open(STATE + ".tmp", "w") as f:
        f.write(what + "\n")
    os.replace(STATE + ".tmp", STATE)

def wait_while_held():
    """No new run while HOLD exists (see HOLD); polled, as a person removes it by hand."""
    if os.path.exists(HOLD):
        print(f"[{time.strftime('%H:%M:%S')}] held: {HOLD} exists; the next run starts once it is removed", flush=True)
        set_state("held")
        while os.path.exists(HOLD):
            time.sleep(2)
        print(f"[{time.strftime('%H:%M:%S')}] released", flush=True)
    set_state("running")

def run_one(disk, stack, exp, run, args):
    """One run, unless its report.json exists. Returns the report (None if the run failed)."""
    d = os.path.join(DATA, disk, stack, exp, run)
    rep = os.path.join(d, "report.json")
    if os.path.exists(rep):
        with open(rep) as f:
            return json.load(f)
    free = shutil.disk_usage(os.path.dirname(WORK)).free
    if free < MIN_FREE:
        raise SystemExit(f"only {free >> 20} MiB free in {os.path.dirname(WORK)}; the emulated disk's image needs "
                         f"at least {MIN_FREE >> 30} GiB of room for what it really stores. Free some space and rerun "
                         "(finished runs are kept).")
    wait_while_held()
    st = STACKS[stack]
    os.makedirs(d, exist_ok=True)
    plot = os.path.join(d, "plot")
    log, t0 = [], time.time()
    print(f"[{time.strftime('%H:%M:%S')}] {disk} {stack} {exp}/{run}: {' '.join(args)}", flush=True)
    ok, err = False, None
    try:
        image = None
        if st["fs"] is not None:
            image, made = gold(disk, st, args)
            log += ["# the filled image, made once:"] + [f"#   {c}" for c in made]
        dev = setup(disk, st, log, image)
        cmd = bench_cmd(st, dev, args, plot)
        stall0, t_run = cpu_stall_us(), time.monotonic()
        r = sh(cmd, log, check=False)
        stall1, t_run = cpu_stall_us(), time.monotonic() - t_run
        ok = r.returncode in (0, 3) and r.stdout.strip().startswith("{")
        err = None if ok else f"exit status {r.returncode}: {r.stderr.strip()}"
        if ok:
            report = json.loads(r.stdout)
            if report.get("utilization") is None:   # every stack is metered by the emulator, or the run is void
                ok, err = False, f"the bench did not read the emulator's meter: {report.get('utilization_unknown_because')}"
        if ok:
            with open(os.path.join(EMU, "stats")) as f:
                report["kcompare_emulator"] = json.load(f)
            report["kcompare_host"] = dict(
                cpu_pressure_pct=None if stall0 is None or stall1 is None
                else round(100.0 * (stall1 - stall0) / 1e6 / max(t_run, 1e-9), 2),
                cpu_pressure_of=PRESSURE)
        log.append(f"umount {MNT}; dvrfs emulate --stop {EMU}")
    except (RuntimeError, OSError) as e:   # a setup step failed: this run fails, the others go on
        err = str(e)
    finally:
        clean(quiet=True)
        left = leftovers()
        if left:   # never start the next run on top of this one's remains
            raise SystemExit("could not clean up after the run: " + "; ".join(w for w, _ in left)
                             + ".\nClean up with: " + " && ".join(c for _, c in left))
    with open(os.path.join(d, "commands.txt"), "w") as f:
        f.write("\n".join(log) + "\n")
    for f in ("margin_cdf.svg", "buffer_level.svg", "seek_distance.svg"):   # the CSV is what render draws from;
        if os.path.exists(os.path.join(plot, f)):                          # the SVGs would make the data 20x larger
            os.remove(os.path.join(plot, f))
    if ok:   # a run the host disturbed is kept aside and made again (at most DISTURBED_TRIES times)
        e = report["kcompare_emulator"]
        late = e["late_commands"] / max(1, e["commands"])
        pressure = report["kcompare_host"]["cpu_pressure_pct"] or 0.0
        tries = len([f for f in os.listdir(d) if f.startswith("disturbed-")])
        if (late > LATE_MAX or pressure > CPU_PRESSURE_MAX) and tries < DISTURBED_TRIES:
            with open(os.path.join(d, f"disturbed-{tries + 1}.json"), "w") as f:
                json.dump(report, f, indent=1)
            ok, err = False, (f"the host was busy: {late:.1%} of the emulator's replies more than 1 ms late (at most "
                              f"{LATE_MAX:.0%}), tasks waiting for a CPU {pressure:.1f}% of the time (at most "
                              f"{CPU_PRESSURE_MAX:.0f}%); kept as disturbed-{tries + 1}.json, to be run again")
    if not ok:
        with open(os.path.join(d, "error.txt"), "w") as f:
            f.write(err + "\n")
        print(f"    failed: {err[-400:]}", flush=True)
        return None
    report["kcompare"] = dict(disk=disk, stack=stack, experiment=exp, run=run, wall_s=round(time.time() - t0, 1),
                              bench_args=args, command=" ".join(cmd).replace(BIN, "dvrfs"))
    with open(rep + ".tmp", "w") as f:
        json.dump(report, f, indent=1)
    os.replace(rep + ".tmp", rep)
    if os.path.exists(os.path.join(d, "error.txt")):
        os.remove(os.path.join(d, "error.txt"))
    print(f"    {report.get('deadline_misses')} misses, min margin {report.get('margin_ms', {}).get('min')} ms, "
          f"utilization {report.get('utilization')}, prepare {report.get('prepare_s')} s, {report['kcompare']['wall_s']} s in all",
          flush=True)
    return report

def carried(rep):
    return rep is not None and rep.get("deadline_misses") == 0 and not rep.get("recordings_stopped")

def search(disk, stack, exp, start):
    """The most streams with zero misses: double from `start` until a probe misses, then
    bisect between the last clean count and the first that missed. Every probe is a run
    (so a resumed search replays the finished probes from their reports)."""
    lo, hi, n = 0, None, start
    while hi is None:
        rep = run_one(disk, stack, exp, f"N{n}", search_args(exp, n))
        if rep is None:    # a probe that failed or the host disturbed is no answer: the next pass goes on
            return None
        if carried(rep):
            lo, n = n, n * 2
            if n > 256:
                return lo
        else:
            hi = n
    while hi - lo > 1:
        m = (lo + hi) // 2
        rep = run_one(disk, stack, exp, f"N{m}", search_args(exp, m))
        if rep is None:
            return None
        if carried(rep):
            lo = m
        else:
            hi = m
    return lo

LOCK = []

def take_lock():
    """One runner (or clean) at a time: a flock on WORK/lock, held until the process exits."""
    os.makedirs(WORK, exist_ok=True)
    lock = open(os.path.join(WORK, "lock"), "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        raise SystemExit(f"another kernel_compare.py run is in progress (pid {lock.read().strip() or '?'}); "
                         "wait for it, or stop it with kill -INT PID (it cleans up)")
    lock.truncate(0)
    lock.write(str(os.getpid()))
    lock.flush()
    LOCK.append(lock)

def cmd_run(opts):
    if os.geteuid() != 0:
        raise SystemExit("kernel_compare.py run needs root (loop devices, mounts, sysfs)")
    if not os.access(BIN, os.X_OK):
        raise SystemExit(f"no dvrfs binary at {BIN}: cargo build --release -p dvrfs-cli, or set DVRFS_BIN")
    take_lock()
    left = leftovers()
    if left:
        raise SystemExit("a previous run left " + "; ".join(w for w, _ in left) + ".\nClean up with: "
                         + " && ".join(c for _, c in left) + "\n(or: python3 scripts/kernel_compare.py clean)")
    quick = opts["quick"]
    disks = [opts["disk"]] if opts["disk"] else (["avfs-250g"] if quick else ["avfs-250g", "nvr-8t"])
    stacks = opts["stacks"] or (QUICK_STACKS if quick else list(STACKS))
    exps = opts["experiments"] or (QUICK_EXPERIMENTS if quick else list(EXPERIMENTS))
    for s in stacks:
        if s not in STACKS:
            raise SystemExit(f"unknown stack {s!r}; the stacks are: {', '.join(STACKS)}")
    for e in exps:
        if e not in EXPERIMENTS:
            raise SystemExit(f"unknown experiment {e!r}; the experiments are: {', '.join(EXPERIMENTS)}")
    os.makedirs(WORK, exist_ok=True)
    print(f"CPU pressure read from {join_cgroup()}", flush=True)
    signal.signal(signal.SIGINT, on_signal)    # also when started in the background, where SIGINT is ignored
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        for disk in disks:
            for exp in exps:
                on, runs = EXPERIMENTS[exp]
                if disk not in on:
                    continue
                for stack in stacks:
                    if exp not in STACKS[stack].get("exps", EXPERIMENTS):
                        continue
                    if runs is None:
                        search(disk, stack, exp, 4)
                    else:
                        for run, args in runs(quick):
                            run_one(disk, stack, exp, ("quick-" if quick else "") + run, args)
    except (KeyboardInterrupt, Stop) as e:
        print(f"interrupted ({e or 'SIGINT'}): cleaning up; finished runs are kept", file=sys.stderr)
        clean()
        raise SystemExit(130)
    finally:
        clean(quiet=True)
        set_state("stopped")


# ---------------------------------------------------------------- rendering

def load(disk, stack, exp, run):
    p = os.path.join(DATA, disk, stack, exp, run, "report.json")
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)

def runs_of(disk, stack, exp):
    d = os.path.join(DATA, disk, stack, exp)
    return sorted(os.listdir(d)) if os.path.isdir(d) else []

def fmt(v, spec="{:.0f}"):
    return "n/a" if v is None else spec.format(v)

def energy_per_hour(r):
    e, t = r.get("disk_energy_j"), r.get("duration_s")
    return None if e is None or not t else e / t * 3600 / 1000   # kJ per hour

def missing(disk, stack, exp, run):
    """What a table says for a run without a report: it failed (error.txt) or never ran."""
    p = os.path.join(DATA, disk, stack, exp, run, "error.txt")
    if not os.path.exists(p):
        return "not run yet"
    with open(p) as f:
        return "failed: " + f.read().strip().splitlines()[0][:160].replace("|", "/")

OWN = " (bench's own)"

def metered_by_bench(r):
    """A report whose utilization is not the emulator's: `dvrfs bench /dev/loopN` from before it
    read the emulator's meter (its `disk` then names the device, not the emulated model)."""
    return "emulated" not in str(r.get("disk"))

def row(stack, r, why="not run yet"):
    if r is None:
        return f"| {stack} | {why} | | | | | | |"
    m = r.get("margin_ms") or {}
    u = r.get("utilization")
    return (f"| {stack} | {r.get('deadline_misses')} | {fmt(m.get('min'))} | {fmt(m.get('p0001'))} | {fmt(m.get('p001'))} | "
            f"{fmt(None if u is None else 100 * u, '{:.1f}%')}{OWN if metered_by_bench(r) else ''} | "
            f"{fmt(energy_per_hour(r), '{:.1f}')} | "
            f"{r['kcompare_emulator'].get('late_commands', 'n/a') if 'kcompare_emulator' in r else 'n/a'} "
            f"({fmt((r.get('kcompare_host') or {}).get('cpu_pressure_pct'), '{:.1f}%')}) |")

HEAD = ("| stack | misses | min margin (ms) | 0.01% margin (ms) | 0.1% margin (ms) | utilization | disk energy (kJ/h) | late replies (host CPU wait) |\n"
        "|---|---|---|---|---|---|---|---|")

def cdf_curve(disk, stack, exp, run):
    """A finished run's margin CDF (a failed or disturbed run's CSV is not drawn)."""
    p = os.path.join(DATA, disk, stack, exp, run, "plot", "margin_cdf.csv")
    if load(disk, stack, exp, run) is None or not os.path.exists(p):
        return None
    with open(p) as f:
        rows = [l.split(",") for l in f.read().splitlines()[1:] if l.strip()]
    return [(float(x), float(y)) for x, y in rows]

METHOD = """\
## Method

**The disk.** Every stack runs on the same emulated hard disk: `dvrfs emulate`
([emulate.md](emulate.md)) serves a sparse image of the model's full capacity as one FUSE
file with direct I/O, puts a loop device on it (`--direct-io=on`, `rotational` 1) and
completes every command when the disk model (`disk/hdd.rs`, the code `dvrfs sim
--device-model` uses) says the disk would finish it, behind a 32-command NCQ (SPTF with a
500 ms age limit) as a SATA disk has. Nothing caches the disk below the loop device.
`avfs-250g` is the AVFS paper's 2007 250 GB disk, `nvr-8t` an 8 TB NVR disk
([disk-models.md](disk-models.md)).

**Who measures what.** The workload is the one `dvrfs sim` and `dvrfs bench` run (the
same stream clients, deadlines, seeds and best-effort generators): `dvrfs bench --dir`
runs it through POSIX calls, a thread per stream, on a kernel file system; `dvrfs bench
/dev/loopN` runs dvrfs itself (the mixer, one command at a time) on the same loop
device. Misses and margins are each client's own (a request's completion is the moment
its call returned). Utilization (busy time over the run) and disk energy come from the
emulator's meter for every stack alike, so they are measured the same way for the kernel
and for dvrfs (a utilization marked "(bench's own)" is `dvrfs bench`'s own estimate from a
build that did not yet read the emulator's meter on a loop device; its energy is then
"n/a"). The `late replies` column counts the emulator's replies that the host
made more than 1 ms late (a kernel stack's deep queue has 1 to 3% of them on a quiet
host). A run in which more than 5% were, or during which some task of the run (the
emulator, the bench, the mount helpers: the runner puts them in a cgroup of its own,
`dvrfs-kcompare`, so that a build niced beside it does not count) waited for a CPU more
than 10% of the time (that cgroup's `cpu.pressure`, or `/proc/pressure/cpu` where no
cgroup v2 hierarchy is writable; kept as `kcompare_host.cpu_pressure_pct` in
its report and shown in brackets beside the late replies; "n/a" for runs made before it
was kept), measured the host as well as the disk: it is kept aside
(`disturbed-N.json` beside it) and made again, up to six times.

**Every run from the same filled image.** A kernel stack's fill is made once per file
system, mkfs options and fill (`--seed`, `--age`, the delete victim): a fresh sparse
image, the emulator with its timing off (host speed), `mkfs`, the mount, then `dvrfs
bench --dir --fill-only`, which fills the file system to 80% with recordings of zeros
(the emulator keeps zeros sparse) as `sim` fills its volume and writes a manifest
(every recording with its size, and where the run's random generator stood after the
fill). That image, unmounted, is kept under `/var/tmp/dvrfs-kcompare-gold` (a few tens of
MB: it holds the metadata, not the zeros). Each run then gets a sparse copy of it, a
fresh emulator and loop device, the sysfs settings, the mount, and `dvrfs bench --dir
--reuse-fill`, which checks the manifest against its arguments and the files, drops the
page cache, turns the timing on and measures: so every run of a stack, and every stack
that differs only in the elevator, read-ahead or I/O class, starts from the same bytes
and a cold cache, and the run draws the same requests a run that filled for itself would.
No run inherits another's files, the drive's state or its page cache. dvrfs formats and
fills its own volume in each run (`dvrfs bench /dev/loopN`, its fill written as
metadata, in seconds).

**The tuning: what each stack's best users would do.**

- Mount with `noatime` (a playback then writes nothing), read-ahead 4 MiB
  (`blockdev --setra 8192`), stream threads in the real-time I/O class (`--ioprio rt`,
  which BFQ serves first and mq-deadline honours). `ext4-deadline-untuned` has none of
  this: it is what a recorder gets from the distribution's defaults.
- ext4 and ext3: `mkfs -T largefile4` (one inode per 4 MiB: a video store holds few
  large files) and the inode tables written at mkfs (`lazy_itable_init=0`), so that the
  kernel's lazy initialisation does not write during a measurement. Delayed allocation
  (ext4's default) keeps buffered recordings contiguous.
- XFS: an extent-size hint of 64 MiB on the bench directory (`xfs_io -c 'extsize 64m'`,
  inherited by the files and the directory the bench creates in it), so each recording
  grows in 64 MiB extents however the writes of concurrent recordings interleave.
  `filestreams` was considered and not used: it places each *directory's* files in an
  allocation group of their own, and the bench writes every stream into one directory,
  so it would put the concurrent recordings together rather than apart.
- btrfs: `noatime`; its defaults otherwise (data checksums, copy-on-write). Its files
  report an anonymous device number (one per subvolume), so `dvrfs bench --dir` finds
  the loop device under it through the mount point in `/proc/self/mountinfo`.
- BFQ with its defaults (`low_latency` 1) and with `low_latency` 0; mq-deadline, Kyber
  and `none` with theirs.
- dvrfs: `dvrfs bench /dev/loopN` with its defaults (mixer, ZRR allocation), the loop
  device's elevator `none` (dvrfs schedules itself) and one command at a time.

**Durations.** A margin-CDF run lasts 20 stream-minutes and at least 3 minutes
(`max(180 s, 1200 s / streams)`: 2r0w 10 min, 4r0w 5 min, 8r0w 3 min), so a stream that
glitched once every ten minutes would show about two glitches. The searches (most
streams with zero misses) probe each count for 3 minutes: doubling from 4 until a probe
misses, then bisecting; the mix at N streams is N/2 playbacks and N/2 recordings (the odd
one a playback), with and without a greedy reader beside them; on `nvr-8t`, N recordings
at 4 Mbit/s beside two playbacks (`2r,Nw@4M`). Ten file sets (Fig. 14): 4r2w with seeds
1-10, 60 s each; age (Fig. 16): 4r2w after 0, 5, 10 and 20 record-and-delete cycles,
120 s each; the delete (Fig. 17) and the photos (Fig. 18): 180 s.

**Running it.**

    cargo build --release -p dvrfs-cli
    sudo scripts/kernel-compare.sh                       # everything: days (below)
    sudo scripts/kernel-compare.sh --disk avfs-250g --stacks ext4-bfq,dvrfs --experiments cdf
    sudo scripts/kernel-compare.sh --quick               # smoke: ext4-deadline and dvrfs, 2 x 30 s each
    python3 scripts/kernel_compare.py render             # the document again, from the data
    sudo python3 scripts/kernel_compare.py clean         # what a killed run left behind

`run` is resumable: each finished run's `report.json` is kept and never redone, so the
comparison can be stopped at any time (Ctrl-C, SIGTERM: it unmounts, stops the emulator,
which detaches the loop device, and removes the image) and continued in another session.
Touching `/var/tmp/dvrfs-kcompare/hold` pauses it between runs (the run under way
finishes; `/var/tmp/dvrfs-kcompare/state` then says `held`), so that a build does not
disturb a measurement; removing the file lets it go on. It refuses to start over the remains of a run it could not clean up (a power cut), and
says which commands remove them. It needs 5 GiB free in `/var/tmp` (the image is
sparse: it stores the file system's metadata, not the zeros of the fill). A run that
fails (a setup step, or the bench exiting with an error) leaves `error.txt` beside its
`commands.txt` and is tried again next time; the others go on.

What it costs: on `avfs-250g` an 80% fill is about 190 GB of zeros written at the
emulator's host speed, 2 minutes on ext4 and about 8 on XFS on this 2-CPU VM; made once
per fill, it is a few seconds of copying for every other run. The runs themselves are
the bulk: one stack's share of the list is about 2 hours of measurement on
`avfs-250g`. On `nvr-8t` an 80% fill is 6.4 TB of zeros, about an hour, made once per
file system.

**Energy per hour** is the emulator's `energy_j` over the measured run, scaled to an
hour (kJ per hour), from the 4r2w and 8r0w margin-CDF runs. "n/a" in an energy column: the
report has no `disk_energy_j` (a `dvrfs` build from before the emulator metered energy, or
the dvrfs stack before `bench /dev/loopN` read the emulator's meter).
"""

# What the runs have shown so far, and why: written by hand from the tables above (each
# claim names the table it comes from); a claim the data does not yet support is not here.
FINDINGS = """## Where a kernel stack wins, and why

Written from the tables above as the runs come in; the comparison is not finished, and
what is not yet measured is not claimed here.

**ext4 keeps the disk less busy than dvrfs at light loads, because dvrfs commits every
second.** With 100 photos copied during 2r2w (Fig. 18 above) ext4 under mq-deadline
keeps the disk 27.6% busy and dvrfs 40.0%, for the same streams and the same photos.
The difference is durability, not the streams' I/O. dvrfs commits its metadata every
second, and every commit writes the journal and then the primary and backup copies of
the changed metadata (the backup region and the last superblock copy lie at the far
end of the disk), with flushes between them; it sends one command at a time, so each
command pays its whole positioning time (6.0 ms of seek and 4.9 ms of rotation on
average in `dvrfs sim` of the same run). ext4, by default, keeps a recording's written
pages in memory for up to 30 s and commits its journal every 5 s, and its write-back
hands the drive up to 32 commands at once (90 outstanding at the loop device at the
deepest in that run), which the drive's NCQ orders by positioning time.

Committing every 5 s instead, `dvrfs sim` of the same run finds the disk 27.2% busy
(36.0% at 1 s, 21.8% at 30 s: `dvrfs sim --disk avfs-250g --workload 2r2w --best-effort
photos --duration 180s --commit-interval 5s`); the `dvrfs-commit5s` row measures it on
the emulated disk. The price of ext4's lower figure is what a crash costs: up to 30 s of
every recording, where dvrfs loses at most the last second.

**An ext4 recorder that syncs every second to get dvrfs's durability misses
deadlines.** `ext4-deadline-fsync1s` (each recording calls `fdatasync` every second)
missed 7 deadlines (min margin -1.5 s) in the same photos run, where ext4 without the
syncs and dvrfs missed none: an `fdatasync` took up to 3.4 s, because ext4's ordered
mode writes out every dirty page of the committing transaction, the photos' included,
before the recording's sync returns; a recording that waits for it falls behind.

**BFQ misses once recordings run beside playbacks; mq-deadline and Kyber do not.**
ext4 under BFQ (its defaults, `low_latency` on; stream threads in the real-time I/O
class) missed deadlines in every measured mix with recordings: 9 at 2r2w (min margin
-0.9 s), 33 at 4r2w (-1.4 s), 136 at 6r2w (-4.1 s), 48 with the photos during 2r2w
(-3.1 s), in 6 of the 10 file sets at 4r2w (25 to 48 each in 60 s) and at ages 0 and 5
(24 and 3; none at 10 and 20); none in the read-only mixes 2r0w to 8r0w. The same ext4 under mq-deadline or Kyber, XFS
under mq-deadline, and dvrfs missed none anywhere so far. These are not the host's
doing: the runner rejects a run in which the emulator's replies were late or tasks
waited for a CPU too often, and in these runs the CPU wait was at most 2.1%. Why BFQ
falls behind is not established here; the `ext4-bfq-nolowlat` row (`low_latency` 0)
will say whether its interactive heuristics are the cause.

**In the AVFS mixes dvrfs and ext4 or XFS under mq-deadline all meet every deadline;
the most streams is where they part, so far by a few streams.** All meet every deadline
in 200 to 600 s runs of 2-8r0w and 0-6r2w, and the kernel stacks keep the disk less busy
(the commit interval, above). dvrfs's margins are smaller and steadier (its smallest
margin 316 to 607 ms across the mixes, against 215 to 1,694 ms for the kernel stacks)
by design: the mixer holds each request until the latest safe moment and then sweeps
them, so a margin is what it planned to keep, not luck. In the search for the most
streams with zero misses (half readers, half recorders, one 180-s probe per count)
dvrfs carried 14, ext4 under Kyber 12, under mq-deadline 9 and under BFQ 3 (XFS under
mq-deadline at least 12, its search unfinished). Beside a greedy reader dvrfs carried
12 and ext4 under mq-deadline 10, while ext4 under Kyber carried at least 16, more
than without the reader: one probe per count is a single draw, and a count that is not
monotone says its luck matters. Repeated probes are needed before a difference of a
few streams is read as a result, either way.
"""

def cmd_render():
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    os.makedirs(PLOTS, exist_ok=True)
    L = []
    w = L.append
    w("# dvrfs against the kernel: the AVFS experiments on an emulated disk")
    w("")
    w(f"<!-- Generated by `python3 scripts/kernel_compare.py render` at commit `{rev}` on {datetime.date.today()}. -->")
    w(f"<!-- Do not edit by hand: the method text is METHOD in scripts/kernel_compare.py; the rest comes from {os.path.relpath(DATA, ROOT) if DATA.startswith(ROOT) else DATA}/. -->")
    w("")
    w("The runs: `scripts/kernel-compare.sh` (which is `sudo python3 scripts/kernel_compare.py run` then "
      "`python3 scripts/kernel_compare.py render`). A figure in a table was measured; a row that says "
      "\"not run yet\" has no run in the data directory. Every run's exact commands (image, emulator, mkfs, "
      "mount, sysfs, bench) are in `docs/kernel-compare/data/<disk>/<stack>/<experiment>/<run>/commands.txt` "
      "beside its JSON report and `plot/margin_cdf.csv` (the `--plot` margin CDF; the per-run SVGs are not kept).")
    w("")
    w(METHOD)
    w("## The stacks")
    w("")
    w("| stack | file system | mkfs | mount | elevator (knobs) | read-ahead | I/O class | why |")
    w("|---|---|---|---|---|---|---|---|")
    for k, s in STACKS.items():
        w(f"| {k} | {s['fs'] or 'dvrfs'} | {'`' + ' '.join(s['mkfs']) + '`' if s['mkfs'] else '(bench formats)'} | "
          f"{s['mount'] or 'n/a'}{' (relatime)' if s['mount'] == 'defaults' else ''}"
          f"{' + extsize ' + s['extsize'] if s.get('extsize') else ''} | {s['sched']} "
          f"{' '.join(f'{a}={b}' for a, b in s['knobs'].items())} | {'4 MiB' if s['ra'] else 'default'} | "
          f"{'rt' if s['rt'] else 'default'}{' + `' + ' '.join(s['bench']) + '`' if s.get('bench') else ''} | {s['why']}"
          f"{' (runs ' + ', '.join(s['exps']) + ' only)' if s.get('exps') else ''} |")
    w("")
    for disk in ("avfs-250g", "nvr-8t"):
        render_disk(disk, w)
    w(FINDINGS)
    render_quick(w)
    with open(DOC, "w") as f:
        f.write("\n".join(L) + "\n")
    print(f"wrote {DOC}")

def running(exp):
    """The stacks that run `exp`, in table order."""
    return [k for k, s in STACKS.items() if exp in s.get("exps", EXPERIMENTS)]

def render_disk(disk, w):
    stacks = running("cdf")
    w(f"## {disk}")
    w("")
    w("### Margin CDFs (AVFS Fig. 12-13)")
    w("")
    for wl in PAPER:
        curves = [(s, c) for s in stacks for c in [cdf_curve(disk, s, "cdf", wl)] if c]
        w(f"**{wl}**, {duration_s(wl)} s per run: `dvrfs bench --dir MNT --workload {wl} --duration {duration_s(wl)}s "
          f"--ioprio rt --json --plot DIR` (dvrfs: `dvrfs bench /dev/loopN --force --workload {wl} ...`)")
        w("")
        if curves:
            name = f"margin_cdf_{disk}_{wl}.svg"
            combined_cdf(wl, curves, os.path.join(PLOTS, name), disk=disk, colors=MANY_COLORS)
            w(f"![{wl} margin CDFs](kernel-compare/{name})")
            w("")
        w(HEAD)
        for s in stacks:
            w(row(s, load(disk, s, "cdf", wl), missing(disk, s, "cdf", wl)))
        w("")
    if disk == "avfs-250g":
        series_chart(disk, running("fileset"), w, "fileset", [f"seed{s}" for s in range(1, 11)], list(range(1, 11)),
                     "Utilization over ten random file sets (Fig. 14): 4r2w, seeds 1-10, 60 s each",
                     "seed", "--workload 4r2w --seed S --duration 60s")
        series_chart(disk, running("age"), w, "age", [f"age{a}" for a in (0, 5, 10, 20)], [0, 5, 10, 20],
                     "Utilization over age (Fig. 16): 4r2w, 120 s each", "record-and-delete cycles",
                     "--workload 4r2w --age A --duration 120s")
        single(disk, running("delete"), w, "delete", "2r0w", "A 20 GB delete during 2r0w (Fig. 17)",
               "--workload 2r0w --best-effort delete --duration 180s")
        single(disk, running("photos"), w, "photos", "2r2w", "100 photos copied during 2r2w (Fig. 18)",
               "--workload 2r2w --best-effort photos --duration 180s")
    w("### The most streams with zero misses")
    w("")
    exps = ["maxstreams", "maxstreams-greedy"] + (["nvr-rec"] if disk == "nvr-8t" else [])
    w("| stack | " + " | ".join({"maxstreams": "N/2 r + N/2 w", "maxstreams-greedy": "the same beside a greedy reader",
                                  "nvr-rec": "recordings at 4 Mbit/s beside 2 playbacks"}[e] for e in exps) + " |")
    w("|---|" + "---|" * len(exps))
    for s in running("maxstreams"):
        w(f"| {s} | " + " | ".join(search_result(disk, s, e) for e in exps) + " |")
    w("")
    w(f"Each probe: `dvrfs bench --dir MNT --workload <mix> --duration {SEARCH_S}s [--best-effort greedy-read] --ioprio rt --json`; "
      "a count is carried when its probe had zero misses and no stopped recording. "
      "\"at least N\" means the search is not finished.")
    w("")
    w("### Disk energy per hour")
    w("")
    w("| stack | 4r2w (kJ/h) | 8r0w (kJ/h) |")
    w("|---|---|---|")
    for s in stacks:
        cells = []
        for wl in ("4r2w", "8r0w"):
            r = load(disk, s, "cdf", wl)
            cells.append(missing(disk, s, "cdf", wl) if r is None else fmt(energy_per_hour(r), "{:.1f}"))
        w(f"| {s} | " + " | ".join(cells) + " |")
    w("")

def render_quick(w):
    """The smoke runs (`run --quick`), apart: 30 s runs are not for conclusions."""
    rows = [(disk, s, run, load(disk, s, "cdf", run)) for disk in ("avfs-250g", "nvr-8t") for s in STACKS
            for run in runs_of(disk, s, "cdf") if run.startswith("quick-")]
    w("## Quick runs")
    w("")
    w("`kernel_compare.py run --quick`: 30-second runs that check the machinery works; too short "
      "to compare stacks (a glitch every ten minutes would not show).")
    w("")
    if not rows:
        w("None in the data directory.")
        w("")
        return
    w(HEAD.replace("| stack |", "| disk | workload | stack |", 1).replace("|---|", "|---|---|---|", 1))
    for disk, s, run, r in rows:
        w(f"| {disk} | {run[len('quick-'):]} " + row(s, r, missing(disk, s, "cdf", run)))
    w("")

def series_chart(disk, stacks, w, exp, runs, xs, title, xlabel, args):
    w(f"### {title}")
    w("")
    w(f"`dvrfs bench --dir MNT {args} --ioprio rt --json`")
    w("")
    series = []
    w("| stack | " + " | ".join(str(x) for x in xs) + " |")
    w("|---|" + "---|" * len(xs))
    for s in stacks:
        reports = [load(disk, s, exp, r) or {} for r in runs]
        us = [r.get("utilization") for r in reports]
        w(f"| {s} | " + " | ".join(series_cell(r) for r in reports) + " |")
        if all(u is not None for u in us):
            series.append((s, us))
    w("")
    w("A cell is the disk's utilization, with the run's deadline misses when it had any.")
    w("")
    if series:
        name = f"{exp}_{disk}.svg"
        line_chart(title.split(":")[0], xlabel, "utilization", xs, series, os.path.join(PLOTS, name), ylo=0, colors=MANY_COLORS)
        w(f"![{title}](kernel-compare/{name})")
        w("")

def series_cell(r):
    """A run of a series: its utilization, and its misses when it had any."""
    u = r.get("utilization")
    if u is None:
        return "not run yet"
    m = r.get("deadline_misses") or 0
    return f"{100 * u:.1f}%" + (f" ({m} missed)" if m else "")

def single(disk, stacks, w, exp, run, title, args):
    w(f"### {title}")
    w("")
    w(f"`dvrfs bench --dir MNT {args} --ioprio rt --json --plot DIR`")
    w("")
    curves = [(s, c) for s in stacks for c in [cdf_curve(disk, s, exp, run)] if c]
    if curves:
        name = f"margin_cdf_{disk}_{exp}.svg"
        combined_cdf(run, curves, os.path.join(PLOTS, name), label=title, disk=disk, colors=MANY_COLORS)
        w(f"![{title}](kernel-compare/{name})")
        w("")
    head, rule = HEAD.split("\n")
    w(head + " best-effort Mbit/s |\n" + rule + "---|")
    for s in stacks:
        r = load(disk, s, exp, run)
        w(row(s, r, missing(disk, s, exp, run)) + ("" if r is None else f" {fmt(r.get('be_throughput_mbps'), '{:.1f}')} |"))
    w("")

def search_result(disk, stack, exp):
    runs = runs_of(disk, stack, exp)
    if not runs:
        return "not run yet"
    res = {int(r[1:]): carried(load(disk, stack, exp, r)) for r in runs if r.startswith("N") and load(disk, stack, exp, r)}
    ok = [n for n, c in res.items() if c]
    best = max(ok, default=0)
    done = (best + 1) in res and not res[best + 1]
    return f"{best}" if done else f"at least {best}"

def parse(argv):
    opts = dict(quick=False, gold=False, disk=None, stacks=None, experiments=None)
    it = iter(argv)
    for a in it:
        if a == "--quick":
            opts["quick"] = True
        elif a == "--gold":
            opts["gold"] = True
        elif a in ("--disk", "--stacks", "--experiments", "--data"):
            v = next(it, None)
            if v is None:
                raise SystemExit(f"{a} needs a value")
            if a == "--disk":
                if v not in ("avfs-250g", "nvr-8t"):
                    raise SystemExit(f"--disk {v}: the disks are avfs-250g and nvr-8t")
                opts["disk"] = v
            elif a == "--data":
                global DATA
                DATA = os.path.abspath(v)
            else:
                opts[a[2:]] = [x for x in v.split(",") if x]
        else:
            raise SystemExit(f"unknown argument {a!r}\n{__doc__.split(chr(10) + chr(10))[1]}")
    return opts

def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("run", "render", "clean"):
        raise SystemExit(__doc__)
    opts = parse(sys.argv[2:])
    if sys.argv[1] == "run":
        cmd_run(opts)
    elif sys.argv[1] == "clean":
        take_lock()
        clean()
        left = leftovers()
        if left:
            raise SystemExit("still there: " + "; ".join(w for w, _ in left))
        if opts["gold"] and os.path.isdir(GOLD):
            shutil.rmtree(GOLD)
    else:
        cmd_render()

if __name__ == "__main__":
    main()
