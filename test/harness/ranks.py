"""The processes of a running MPI job's ranks, for tests that kill one of them."""
import glob
import os


def rank_pid(marker, rank):
    """The pid of the tower process of `rank` whose command line holds `marker`, or None."""
    for proc in glob.glob("/proc/[0-9]*"):
        try:
            cmdline = open(f"{proc}/cmdline", "rb").read().split(b"\0")
            if not cmdline or not cmdline[0].endswith(b"tower") or marker.encode() not in b" ".join(cmdline):
                continue
            environ = open(f"{proc}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ:
            return int(os.path.basename(proc))
    return None
