#!/usr/bin/env python3
"""Pack a PyInstaller onedir bundle into dist/personal-llm_<version>_<arch>.deb with dpkg-deb (no root).

Layout of the package:
    /opt/personal-llm/                         the bundle: one executable `personal-llm` and its _internal/
    /opt/personal-llm/personal-llm-desktop     a hard link to it (the program is chosen by the name it runs
                                               as; a hard link, not a symlink, so that resolving the path
                                               keeps the desktop name)
    /usr/bin/personal-llm{,-desktop}           symlinks into /opt/personal-llm
    /usr/share/applications/personal-llm.desktop
    /usr/share/icons/hicolor/<N>x<N>/apps/personal-llm.png, scalable/apps/personal-llm.svg
    /usr/share/personal-llm/autostart/personal-llm.desktop
                                               copied to ~/.config/autostart by the app's "Start at
                                               login" setting (nothing starts at login unless the user asks)
    /usr/share/doc/personal-llm/copyright

No maintainer scripts: the icon and desktop-entry caches are refreshed by the dpkg triggers of
gtk-update-icon-cache and desktop-file-utils, and uninstalling leaves no files behind (the user's store,
keychain entry and ~/.config/autostart file belong to the user).

    python3 packaging/linux/build_deb.py --bundle build/linux/dist/personal-llm [--out dist] [-Z zstd|xz|gzip]

Compression: zstd (default; level 10, about 30 s for the 1 GB tree; dpkg >= 1.21.18 installs it:
Debian 12, Ubuntu 22.04 and later) or xz (smaller file, installable by any dpkg, much slower to build).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PACKAGE = "personal-llm"
PREFIX = Path("opt") / PACKAGE

# Libraries the bundle loads from the system (PyInstaller leaves out libc, GL and the X/xcb/font stack on
# purpose: they must match the user's machine). Debian/Ubuntu package names; all are in a default desktop.
DEPENDS = [
    "libc6", "libstdc++6", "libgcc-s1", "zlib1g", "libglib2.0-0t64 | libglib2.0-0", "libdbus-1-3",
    "libfontconfig1", "libfreetype6", "libgl1", "libegl1", "libopengl0", "libx11-6", "libx11-xcb1", "libxcb1",
    "libxkbcommon0", "libxkbcommon-x11-0", "libxcb-cursor0", "libxcb-icccm4", "libxcb-image0",
    "libxcb-keysyms1", "libxcb-randr0", "libxcb-render-util0", "libxcb-shape0", "libxcb-xfixes0",
    "libxcb-xkb1", "libxcb-shm0", "libxcb-sync1", "libxcb-xinerama0",
]
RECOMMENDS = ["gnome-keyring | kwalletmanager | keepassxc", "hicolor-icon-theme"]


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def arch() -> str:
    return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()


def glibc_needed(bundle: Path) -> str | None:
    """The newest GLIBC_x.y symbol version any ELF file of the bundle asks for (the build host's glibc
    or older), for `Depends: libc6 (>= x.y)`."""
    import re

    best: tuple[int, ...] = ()
    files = [p for p in bundle.rglob("*") if p.is_file() and not p.is_symlink()
             and (".so" in p.name or os.access(p, os.X_OK))]
    for i in range(0, len(files), 200):
        out = subprocess.run(["objdump", "-T", *map(str, files[i:i + 200])], capture_output=True, text=True).stdout
        for v in re.findall(r"GLIBC_(\d+(?:\.\d+)+)", out):
            best = max(best, tuple(int(x) for x in v.split(".")))
    return ".".join(map(str, best)) if best else None


def du_kib(path: Path) -> int:
    """Apparent size of the files under path, each hard-linked file once."""
    total = 0
    seen: set[tuple[int, int]] = set()
    for dirpath, _, files in os.walk(path):
        for f in files:
            p = Path(dirpath) / f
            if p.is_symlink():
                continue
            st = p.stat()
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return (total + 1023) // 1024


def _link_or_copy(src: str, dst: str) -> None:
    """Hard-link instead of copying 1 GB (same file system); copy across file systems."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def stage(bundle: Path, root: Path, version: str, architecture: str) -> None:
    if root.exists():
        shutil.rmtree(root)
    (root / "DEBIAN").mkdir(parents=True)
    # The staged files are hard links to the bundle's (chmod below normalizes the modes of both).
    shutil.copytree(bundle, root / PREFIX, symlinks=True, copy_function=_link_or_copy,
                    ignore=lambda d, names: [n for n in names if Path(d) == bundle and n == "personal-llm-desktop"])
    app = root / PREFIX / "personal-llm"
    if not app.is_file():
        sys.exit(f"{bundle} has no personal-llm executable: build it with packaging/build-linux")
    os.link(app, root / PREFIX / "personal-llm-desktop")  # the same binary; tar stores it once
    bindir = root / "usr" / "bin"
    bindir.mkdir(parents=True)
    for exe in ("personal-llm", "personal-llm-desktop"):
        (bindir / exe).symlink_to(Path("/") / PREFIX / exe)

    share = root / "usr" / "share"
    (share / "applications").mkdir(parents=True)
    shutil.copy2(HERE / "personal-llm.desktop", share / "applications" / "personal-llm.desktop")
    (share / PACKAGE / "autostart").mkdir(parents=True)
    shutil.copy2(HERE / "personal-llm-autostart.desktop", share / PACKAGE / "autostart" / "personal-llm.desktop")

    icons = ROOT / "resources" / "icons"
    found = 0
    for png in sorted(icons.glob("app-*.png")):
        size = png.stem.split("-", 1)[1]
        if not size.isdigit():
            continue
        d = share / "icons" / "hicolor" / f"{size}x{size}" / "apps"
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy2(png, d / "personal-llm.png")
        found += 1
    if (icons / "app.svg").exists():
        d = share / "icons" / "hicolor" / "scalable" / "apps"
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy2(icons / "app.svg", d / "personal-llm.svg")
        found += 1
    if not found:
        print("warning: no app icons in resources/icons (app-<size>.png, app.svg)", file=sys.stderr)

    doc = share / "doc" / PACKAGE
    doc.mkdir(parents=True)
    (doc / "copyright").write_text(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
        "Upstream-Name: Personal LLM\n\n"
        "Files: *\nCopyright: Personal LLM developers\nLicense: MIT\n\n"
        "Files: opt/personal-llm/_internal/*\n"
        "Comment: Third-party Python packages and libraries bundled by PyInstaller (Qt/PySide6 (LGPLv3), NumPy,\n"
        " SQLCipher, sqlite-vec, tokenizers, safetensors and the all-MiniLM-L6-v2 model (Apache-2.0),\n"
        " and others), each under its own licence; their metadata and licence files are in the same directory.\n",
        encoding="utf-8",
    )

    for dirpath, dirnames, files in os.walk(root):
        for n in dirnames:
            os.chmod(Path(dirpath) / n, 0o755)
        for n in files:
            p = Path(dirpath) / n
            if p.is_symlink():
                continue
            mode = p.stat().st_mode
            os.chmod(p, 0o755 if mode & 0o111 else 0o644)

    p = project()
    glibc = glibc_needed(root / PREFIX)
    depends = [f"libc6 (>= {glibc})" if d == "libc6" and glibc else d for d in DEPENDS]
    control = {
        "Package": PACKAGE,
        "Version": version,
        "Architecture": architecture,
        "Maintainer": "Personal LLM developers <dev@personalllm.org>",
        "Installed-Size": str(du_kib(root)),
        "Depends": ", ".join(depends),
        "Recommends": ", ".join(RECOMMENDS),
        "Section": "utils",
        "Priority": "optional",
        "Homepage": "https://personalllm.org",
        "Description": "local-first desktop memory engine\n " + p["description"]
        + "\n .\n Includes the all-MiniLM-L6-v2 embedding model (works offline from the first start),"
          "\n the `personal-llm` command line and the `personal-llm-desktop` app.",
    }
    (root / "DEBIAN" / "control").write_text("".join(f"{k}: {v}\n" for k, v in control.items()), encoding="utf-8")


def _has_threads_max() -> bool:
    """dpkg-deb >= 1.21.9 takes --threads-max (Ubuntu 22.04's 1.21.1 does not; it still reads and writes zstd)."""
    out = subprocess.run(["dpkg-deb", "--help"], capture_output=True, text=True).stdout
    return "--threads-max" in out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, default=ROOT / "build" / "linux" / "dist" / "personal-llm")
    ap.add_argument("--out", type=Path, default=ROOT / "dist")
    ap.add_argument("--staging", type=Path, default=ROOT / "build" / "linux" / "deb-root")
    ap.add_argument("-Z", "--compress", choices=["zstd", "xz", "gzip"], default="zstd")
    ap.add_argument("-z", "--level", help="compression level (default: zstd 10, xz 6, gzip 9)")
    a = ap.parse_args()
    version = project()["version"]
    architecture = arch()
    stage(a.bundle.resolve(), a.staging.resolve(), version, architecture)
    a.out.mkdir(parents=True, exist_ok=True)
    deb = a.out.resolve() / f"{PACKAGE}_{version}_{architecture}.deb"
    level = a.level or {"xz": "6", "zstd": "10", "gzip": "9"}[a.compress]
    threads = [f"--threads-max={os.cpu_count() or 1}"] if _has_threads_max() else []
    subprocess.run(["dpkg-deb", "--root-owner-group", *threads, f"-Z{a.compress}", f"-z{level}", "--build",
                    str(a.staging.resolve()), str(deb)], check=True)
    print(f"{deb} ({deb.stat().st_size / 2**20:.0f} MiB; installs {du_kib(a.staging) / 1024:.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
