"""A build of tower installed into a temporary prefix, and examples/gan built against it with
pkg-config alone: what the GAN test and the replica-hash test share."""
import os
import subprocess


def install(build, dest):
    """tower installed under dest, with a tower.pc pointing there; returns (prefix, libdir, pkgconfig dir)."""
    subprocess.run(["meson", "install", "-C", build, "--destdir", dest, "--no-rebuild", "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)
    pcs = [os.path.join(d, f) for d, _, files in os.walk(dest) for f in files if f == "tower.pc"]
    if not pcs:
        raise RuntimeError(f"no tower.pc under {dest}")
    libdir = os.path.dirname(os.path.dirname(pcs[0]))
    root = os.path.dirname(os.path.dirname(libdir)) if "x86_64" in libdir else os.path.dirname(libdir)
    pkgconfig = os.path.join(dest, "pkgconfig")
    os.makedirs(pkgconfig, exist_ok=True)
    with open(pcs[0]) as f, open(os.path.join(pkgconfig, "tower.pc"), "w") as out:
        for line in f:
            out.write(f"prefix={root}\n" if line.startswith("prefix=") else line)
    return root, libdir, pkgconfig


def build_gan(build, source, dest):
    """examples/gan of `source`, built against `build` installed under dest/install: returns the
    binary, the environment it runs in (its libtower first) and the install prefix. Raises
    RuntimeError with make's output when it does not build."""
    root, libdir, pkgconfig = install(build, os.path.join(dest, "install"))
    env = dict(os.environ, LD_LIBRARY_PATH=libdir, PKG_CONFIG_PATH=pkgconfig)
    env.pop("TOWER_PLOT_SCRIPT", None)
    bin_dir = os.path.join(dest, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    made = subprocess.run(["make", "-s", "-C", os.path.join(source, "examples", "gan"), f"OUT={bin_dir}"],
                          capture_output=True, text=True, env=env)
    if made.returncode != 0:
        raise RuntimeError(f"examples/gan does not build with pkg-config alone: {made.stdout} {made.stderr}")
    return os.path.join(bin_dir, "gan"), env, root
