"""A build of tower installed into a temporary prefix, and examples/gan built against it with
pkg-config alone: what the GAN, replica-hash and libtorch-example tests share."""
import os
import subprocess


def install(build, dest):
    """tower installed under dest, with copies of its .pc files (tower.pc, and tower-torch.pc where
    built) pointing there; returns (prefix, libdir, pkgconfig dir)."""
    subprocess.run(["meson", "install", "-C", build, "--destdir", dest, "--no-rebuild", "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)
    pcs = [os.path.join(d, f) for d, _, files in os.walk(dest) for f in files if f in ("tower.pc", "tower-torch.pc")]
    if not any(p.endswith("/tower.pc") for p in pcs):
        raise RuntimeError(f"no tower.pc under {dest}")
    libdir = os.path.dirname(os.path.dirname(pcs[0]))
    root = os.path.dirname(os.path.dirname(libdir)) if "x86_64" in libdir else os.path.dirname(libdir)
    pkgconfig = os.path.join(dest, "pkgconfig")
    os.makedirs(pkgconfig, exist_ok=True)
    for pc in pcs:  # they name the real prefix: the copies name the temporary one
        with open(pc) as f, open(os.path.join(pkgconfig, os.path.basename(pc)), "w") as out:
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
