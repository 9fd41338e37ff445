"""Build edged's .deb for one Debian architecture: `python3 packaging/build_deb.py --arch arm64`.

The package runs on Debian's own /usr/bin/python3. Each runtime dependency of pyproject.toml comes from
where DEPENDENCIES says (Debian's package, a vendored pure-Python wheel, or vendored binary wheels, one
per CPython version the package accepts) and a dependency not in that table stops the build: whoever adds
one decides where it comes from (packaging/README.md says why for each). Wheels are pinned, downloaded
once into build/wheels/ and unpacked (not pip-installed) under /usr/lib/edged/vendor/.

Reproducible: every file's mtime is SOURCE_DATE_EPOCH (default: the last commit's time), owners are
root, gzip carries no timestamp, and dpkg-deb gets SOURCE_DATE_EPOCH too, so two builds of one tree give
the same bytes.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("edged", "storage", "bridges", "hw")  # pipeline/ is the PySpark side: not part of the daemon
PYTHONS = ("311", "312", "313")  # bookworm has 3.11, trixie 3.13: a binary wheel for each in between
PLATFORMS = {  # pip's platform tags for the manylinux wheels of each Debian architecture
    "amd64": "manylinux2014_x86_64",
    "arm64": "manylinux2014_aarch64",
    "armhf": "manylinux_2_31_armv7l",
}
ARCHES = tuple(PLATFORMS)
# .invalid: a syntactically valid domain that is reserved never to deliver; set DEB_MAINTAINER for a real one
MAINTAINER = os.environ.get("DEB_MAINTAINER") or "edged maintainers <edged@edged.invalid>"
STRIP = {  # binutils for each architecture (dh_strip's job: Debian ships no debug symbols in a package)
    "amd64": "x86_64-linux-gnu-strip",
    "arm64": "aarch64-linux-gnu-strip",
    "armhf": "arm-linux-gnueabihf-strip",
}


@dataclass(frozen=True)
class Dep:
    """Where one runtime dependency comes from in the package."""

    source: str  # "debian" | "pure" (a vendored py3-none-any wheel) | "binary" (vendored per arch and Python)
    debian: str = ""  # the Debian package (source "debian")
    pin: str = ""  # the vendored version (source "pure" / "binary")


DEPENDENCIES: dict[str, Dep] = {
    # edged uses x509 loading and the SAN extension only (TLS map): there since cryptography 3.x; Debian's
    # is kept patched for security by Debian, and a vendored Rust-built wheel is 4 MB per arch
    "cryptography": Dep("debian", debian="python3-cryptography"),
    # SigningKey/VerifyKey (JWT and nkey signatures): PyNaCl's API is unchanged since 1.4
    "pynacl": Dep("debian", debian="python3-nacl (>= 1.4)"),
    # checkpw/hashpw with $2a$/$2b$ hashes (nats-server's bcrypt passwords): bcrypt 3.2 does both
    "bcrypt": Dep("debian", debian="python3-bcrypt"),
    # not in Debian; pure Python (on top of PyNaCl); PyPI has an sdist only: a wheel is built from it once
    "nkeys": Dep("pure", pin="nkeys==0.2.1"),
    # not in bookworm at all; a C extension: the manylinux wheel for each arch and Python
    "msgspec": Dep("binary", pin="msgspec==0.22.0"),
    # bookworm's 10.4 predates the asyncio API (websockets.asyncio, 13.0+): the pure wheel (its C speed-up
    # is optional and the pure code path is the same protocol)
    "websockets": Dep("pure", pin="websockets==17.4"),
    # bookworm's 1.6.1 predates paho-mqtt 2's callback API: the pure wheel
    "paho-mqtt": Dep("pure", pin="paho-mqtt==2.2.0"),
}


class BuildError(Exception):
    """A build that cannot go on; the message says why and what to do."""


def runtime_requirements() -> list[str]:
    """The names of pyproject.toml's runtime dependencies (what the code imports)."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    return [re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower() for d in deps]


def plan(requirements: list[str]) -> dict[str, Dep]:
    missing = [r for r in requirements if r not in DEPENDENCIES]
    if missing:
        raise BuildError(f"no packaging decision for {', '.join(missing)}: add it to DEPENDENCIES in "
                         "packaging/build_deb.py and say why in packaging/README.md")
    return {r: DEPENDENCIES[r] for r in requirements}


def version() -> str:
    text = (ROOT / "edged" / "__init__.py").read_text()
    m = re.search(r'__version__ = "([^"]+)"', text)
    if not m:
        raise BuildError("edged/__init__.py has no __version__")
    return m.group(1)


def source_date_epoch() -> int:
    v = os.environ.get("SOURCE_DATE_EPOCH")
    if v:
        return int(v)
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"], capture_output=True,
                             text=True, check=True).stdout.strip()
        return int(out)
    except (OSError, subprocess.CalledProcessError, ValueError):
        return 0


# ------------------------------------------------------------------------------------------ wheels


def _pip(args: list[str]) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")


def pure_wheel(pin: str, cache: Path) -> Path:
    """A py3-none-any wheel of `pin`: downloaded, or built from the sdist when PyPI has no wheel."""
    name = pin.split("==")[0].replace("-", "_").lower()
    ver = pin.split("==")[1]
    d = cache / "pure"
    d.mkdir(parents=True, exist_ok=True)

    def found() -> Path | None:
        return next((p for p in sorted(d.glob("*.whl")) if p.name.lower().startswith(f"{name}-{ver}-")), None)

    if found() is None:
        try:
            _pip(["download", "-q", "--no-deps", "--only-binary=:all:", "--platform", "any",
                  "--implementation", "py", "--abi", "none", "--python-version", "3.11", "-d", str(d), pin])
        except BuildError:
            _pip(["wheel", "-q", "--no-deps", "--no-binary=:all:", "-w", str(d), pin])
    w = found()
    if w is None:
        raise BuildError(f"no pure-Python wheel of {pin}")
    return w


def pythons(arch: str, deps: dict[str, Dep]) -> tuple[str, ...]:
    """The CPython versions the package serves on `arch` (those with every binary dependency)."""
    if arch in CROSS_PYTHONS and any(d.source == "binary" and d.pin.split("==")[0] in CROSS for d in deps.values()):
        return CROSS_PYTHONS[arch]
    return PYTHONS


def binary_wheels(pin: str, arch: str, cache: Path, pys: tuple[str, ...] = PYTHONS) -> dict[str, Path]:
    """The wheel of `pin` for `arch` and each of `pys`, keyed by "311", ... (vendor/cp311/...): PyPI's,
    or where PyPI has none for the arch, one cross-compiled from the sdist (CROSS)."""
    name = pin.split("==")[0].replace("-", "_").lower()
    ver = pin.split("==")[1]
    out: dict[str, Path] = {}
    for py in pys:
        d = cache / arch / f"cp{py}"
        d.mkdir(parents=True, exist_ok=True)
        pat = f"{name}-{ver}-cp{py}-"
        w = next((p for p in sorted(d.glob("*.whl")) if p.name.lower().startswith(pat)), None)
        cross = CROSS.get(pin.split("==")[0])
        if w is None and cross is not None and arch in CROSS_PYTHONS:
            w = cross(pin, arch, py, d, cache)
        if w is None:
            try:
                _pip(["download", "-q", "--no-deps", "--only-binary=:all:", "--platform", PLATFORMS[arch],
                      "--implementation", "cp", "--abi", f"cp{py}", "--python-version", py, "-d", str(d), pin])
            except BuildError as e:
                raise BuildError(f"{pin} has no cp{py} wheel for {arch} ({PLATFORMS[arch]}); see "
                                 f"packaging/README.md for this architecture\n{e}") from None
            w = next((p for p in sorted(d.glob("*.whl")) if p.name.lower().startswith(pat)), None)
        if w is None:
            raise BuildError(f"{pin}: the cp{py} wheel for {arch} was not found after download")
        out[py] = w
    return out


TRIPLETS = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "armhf": "arm-linux-gnueabihf"}
WHEEL_TAGS = {"armhf": "linux_armv7l"}


# CPython header packages outside this (bookworm) machine's apt: trixie's, pinned by file and sha256 like
# the wheels (the mirror keeps only a suite's current version: a point release means a new pin here)
PINNED_HEADERS = {
    ("313", "armhf"): ("pool/main/p/python3.13/libpython3.13-dev_3.13.5-2+deb13u5_armhf.deb",
                       "3c99ca25a5466e64ed78db0fa95366af764a73db30d8d32659ed24a83c906328"),
}


def _headers_deb(py: str, arch: str) -> tuple[str, str | None]:
    """The pool path of libpython3.X-dev for `arch` and its sha256 (None: whatever this machine's apt knows,
    for bookworm's own Python)."""
    if (py, arch) in PINNED_HEADERS:
        return PINNED_HEADERS[(py, arch)]
    pkg = f"libpython3.{py[1:]}-dev"
    r = subprocess.run(["apt-cache", "show", "--no-all-versions", pkg], capture_output=True, text=True)
    m = re.search(r"^Filename: (\S+)_[a-z0-9]+\.deb$", r.stdout, re.M)
    if r.returncode != 0 or not m:
        raise BuildError(f"apt-cache knows no {pkg} and PINNED_HEADERS has none: no CPython 3.{py[1:]} headers "
                         f"for {arch}")
    return f"{m.group(1)}_{arch}.deb", None


def _debian_headers(py: str, arch: str, cache: Path) -> Path:
    """CPython's headers for `arch` (pyconfig.h differs per arch): the libpython3.X-dev .deb (bookworm's from
    this machine's apt, trixie's pinned), fetched from the Debian mirror for `arch` and unpacked."""
    path, sha = _headers_deb(py, arch)
    url = f"{os.environ.get('DEBIAN_MIRROR', 'http://deb.debian.org/debian')}/{path}"
    d = cache / "headers" / f"libpython3.{py[1:]}-dev-{arch}"
    if not (d / "usr/include").is_dir():
        deb = cache / "headers" / url.rsplit("/", 1)[1]
        deb.parent.mkdir(parents=True, exist_ok=True)
        if not deb.exists():
            import urllib.error
            import urllib.request

            try:
                with urllib.request.urlopen(url, timeout=120) as resp:  # noqa: S310 (the Debian mirror)
                    data = resp.read()
            except urllib.error.HTTPError as e:
                raise BuildError(f"{url}: {e} (a Debian point release replaced it? update PINNED_HEADERS)") from None
            if sha is not None and hashlib.sha256(data).hexdigest() != sha:
                raise BuildError(f"{url}: sha256 is not the pinned {sha}")
            tmp = deb.with_suffix(f".{os.getpid()}.part")
            tmp.write_bytes(data)
            os.replace(tmp, deb)
        elif sha is not None and hashlib.sha256(deb.read_bytes()).hexdigest() != sha:
            raise BuildError(f"{deb}: sha256 is not the pinned {sha}; remove it to fetch it again")
        subprocess.run(["dpkg-deb", "-x", str(deb), str(d)], check=True)
    return d


def cross_msgspec(pin: str, arch: str, py: str, out: Path, cache: Path) -> Path:
    """msgspec for an arch PyPI has no wheel for (armhf): its one C file cross-compiled against Debian's
    CPython headers with Debian's cross gcc, packed as a wheel with the sdist's Python files."""
    gcc = f"{TRIPLETS[arch]}-gcc"
    if shutil.which(gcc) is None:
        raise BuildError(f"{gcc} not found: apt install gcc-{TRIPLETS[arch]}")
    src_dir = cache / "sdist"
    src_dir.mkdir(parents=True, exist_ok=True)
    name, ver = pin.split("==")
    sdist = next(iter(sorted(src_dir.glob(f"{name}-{ver}.tar.gz"))), None)
    if sdist is None:
        _pip(["download", "-q", "--no-deps", "--no-binary=:all:", "-d", str(src_dir), pin])
        sdist = next(iter(sorted(src_dir.glob(f"{name}-{ver}.tar.gz"))))
    import tarfile

    work = cache / "cross" / f"{name}-{ver}-{arch}-cp{py}-{os.getpid()}"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    with tarfile.open(sdist) as t:
        t.extractall(work, filter="data")
    top = work / f"{name}-{ver}"
    pkg = top / "src" / name
    hdr = _debian_headers(py, arch, cache)
    so = f"_core.cpython-{py}-{TRIPLETS[arch]}.so"
    cmd = [gcc, "-shared", "-fPIC", "-fwrapv", "-O2", "-g0", "-DNDEBUG", "-ffile-prefix-map=" + str(work) + "=.",
           f"-I{hdr}/usr/include/python3.{py[1:]}", f"-I{hdr}/usr/include", str(pkg / "_core.c"), "-lm",
           "-o", str(work / so)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise BuildError(f"cross-compiling {pin} for {arch} failed:\n{r.stderr[-3000:]}")
    tag = f"cp{py}-cp{py}-{WHEEL_TAGS[arch]}"
    whl = out / f"{name}-{ver}-{tag}.whl"
    tmp = work / whl.name  # renamed into the cache when complete: another build never sees half a wheel
    info = f"{name}-{ver}.dist-info"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        def add(arc: str, data: bytes) -> None:
            zi = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = (0o755 if arc.endswith(".so") else 0o644) << 16
            z.writestr(zi, data)

        for f in sorted(pkg.iterdir()):
            if f.suffix in (".py", ".pyi") or f.name == "py.typed":
                add(f"{name}/{f.name}", f.read_bytes())
        add(f"{name}/{so}", (work / so).read_bytes())
        add(f"{info}/METADATA", (top / "PKG-INFO").read_bytes())
        add(f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: edged build_deb (cross gcc)\nRoot-Is-Purelib: false\n"
                             f"Tag: {tag}\n".encode())
        add(f"{info}/licenses/LICENSE", (top / "LICENSE").read_bytes())
    os.replace(tmp, whl)
    shutil.rmtree(work, ignore_errors=True)
    return whl


CROSS = {"msgspec": cross_msgspec}  # binary dependencies the build can cross-compile where PyPI has no wheel
CROSS_PYTHONS = {"armhf": ("311", "313")}  # ... for these Pythons only: bookworm's and trixie's (Debian has no
# armhf 3.12)


def unpack_wheel(wheel: Path, dest: Path) -> None:
    """A wheel's files under `dest`: the package and its .dist-info (licence, metadata), no scripts."""
    with zipfile.ZipFile(wheel) as z:
        for info in sorted(z.infolist(), key=lambda i: i.filename):
            name = info.filename
            if name.endswith("/") or name.split("/", 1)[0].endswith(".data"):
                continue
            if name.endswith(".pyc") or "/__pycache__/" in name:
                continue
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(info))
            mode = (info.external_attr >> 16) & 0o777
            target.chmod(0o755 if mode & 0o111 or name.endswith(".so") else 0o644)


def strip(tree: Path, arch: str) -> None:
    """Strip the vendored shared objects as dh_strip would (wheels ship them with symbols)."""
    objs = sorted(str(p) for p in tree.rglob("*.so"))
    if not objs:
        return
    tool = STRIP[arch]
    if shutil.which(tool) is None:
        raise BuildError(f"{tool} not found: apt install binutils-{tool.rsplit('-', 1)[0].replace('_', '-')}")
    r = subprocess.run([tool, "--strip-unneeded", "--remove-section=.comment", "--remove-section=.note", *objs],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise BuildError(f"{tool} failed: {r.stderr.strip()}")


# ------------------------------------------------------------------------------------------ the tree


LAUNCHER = """#!/usr/bin/python3 -I
# edged on Debian's python3: its own code and vendored wheels from /usr/lib/edged, the rest from Debian.
import sys

sys.path[0:0] = ["/usr/lib/edged", "/usr/lib/edged/vendor/py3",
                 "/usr/lib/edged/vendor/cp%d%d" % sys.version_info[:2]]
from edged.cli import main

sys.exit(main())
"""


def _copy_sources(dest: Path) -> None:
    for pkg in PACKAGES:
        src = ROOT / pkg
        if not src.is_dir():
            continue
        for p in sorted(src.rglob("*")):
            rel = p.relative_to(ROOT)
            if "__pycache__" in rel.parts or p.suffix in (".pyc", ".pyo") or p.is_dir():
                continue
            if p.suffix not in (".py", ".conf", ".json", ".txt", ".typed"):
                continue
            t = dest / rel
            t.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, t)
            t.chmod(0o644)


def _write(path: Path, text: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    path.chmod(mode)


def _gzip(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0, filename="") as g:
        g.write(data)
    return buf.getvalue()


def _changelog(ver: str, epoch: int) -> bytes:
    date = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime(epoch))
    return (f"edged ({ver}) unstable; urgency=medium\n\n"
            "  * Built from the edged repository (/usr/share/doc/edged/README.md).\n\n"
            f" -- {MAINTAINER}  {date}\n").encode()


def _copyright(deps: dict[str, Dep]) -> str:
    vendored = ", ".join(d.pin for d in deps.values() if d.source != "debian")
    return ("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
            "Upstream-Name: edged\n\n"
            "Files: *\n"
            "Copyright: edged authors\n"
            "License: Apache-2.0\n\n"
            "Files: usr/lib/edged/vendor/*\n"
            f"Copyright: the authors of the vendored wheels ({vendored})\n"
            "License: Apache-2.0 or BSD-3-Clause or MIT or EPL-2.0\n"
            " Each vendored wheel's own licence file is in its .dist-info directory under\n"
            " /usr/lib/edged/vendor/.\n\n"
            "License: Apache-2.0\n"
            " On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0.\n")


def control(ver: str, arch: str, deps: dict[str, Dep], installed_kb: int) -> str:
    debian = [d.debian for d in deps.values() if d.source == "debian"]
    pys = pythons(arch, deps)
    minors = sorted(int(p[1:]) for p in pys)
    depends = [f"python3 (>= 3.{minors[0]})", f"python3 (<< 3.{minors[-1] + 1})"]
    # a Python between two served ones that the package has no binary wheels for (armhf: 3.12) is excluded
    depends += [f"python3 (<< 3.{m}) | python3 (>= 3.{m + 1})" for m in range(minors[0] + 1, minors[-1])
                if m not in minors]
    depends += ["systemd", "passwd", *debian]
    if any(d.source == "binary" for d in deps.values()):
        depends.insert(0, "libc6 (>= 2.17)")
    return (f"Package: edged\nVersion: {ver}\nArchitecture: {arch}\nMaintainer: {MAINTAINER}\n"
            f"Installed-Size: {installed_kb}\n"
            f"Depends: {', '.join(depends)}\n"
            "Recommends: python3-systemd\n"
            "Section: net\nPriority: optional\n"
            "Homepage: https://github.com/nats-io/nats-server\n"
            "Description: NATS-compatible edge gateway (JetStream on SQLite, leafnodes, MQTT)\n"
            " edged speaks the NATS client protocol, runs JetStream with its store in SQLite\n"
            " (WAL) under /var/lib/edged, and keeps leafnode links to a hub nats-server.\n"
            " It runs as the edged system user under systemd (Type=notify, watchdog).\n")


def build_tree(stage: Path, arch: str, deps: dict[str, Dep], cache: Path, epoch: int, ver: str) -> None:
    """Lay out the package under `stage` (DEBIAN/ included)."""
    lib = stage / "usr/lib/edged"
    _copy_sources(lib)
    for name, d in deps.items():
        if d.source == "pure":
            unpack_wheel(pure_wheel(d.pin, cache), lib / "vendor" / "py3")
        elif d.source == "binary":
            for py, w in binary_wheels(d.pin, arch, cache, pythons(arch, deps)).items():
                unpack_wheel(w, lib / "vendor" / f"cp{py}")
            strip(lib / "vendor", arch)
        elif d.source != "debian":
            raise BuildError(f"{name}: unknown source {d.source!r}")
    _write(stage / "usr/bin/edged", LAUNCHER, 0o755)
    pk = ROOT / "packaging"
    _write(stage / "etc/edged/edged.conf", (pk / "edged.conf").read_bytes())
    _write(stage / "lib/systemd/system/edged.service", (ROOT / "systemd/edged.service").read_bytes())
    _write(stage / "usr/lib/sysusers.d/edged.conf", (ROOT / "systemd/edged.sysusers").read_bytes())
    _write(stage / "usr/lib/tmpfiles.d/edged.conf", (ROOT / "systemd/edged.tmpfiles").read_bytes())
    doc = stage / "usr/share/doc/edged"
    _write(doc / "copyright", _copyright(deps))
    _write(doc / "changelog.gz", _gzip(_changelog(ver, epoch)))
    _write(doc / "README.md", (pk / "README.md").read_bytes())
    _write(stage / "usr/share/lintian/overrides/edged", (pk / "lintian-overrides").read_bytes())
    size = sum(p.stat().st_size for p in stage.rglob("*") if p.is_file())
    deb = stage / "DEBIAN"
    _write(deb / "control", control(ver, arch, deps, (size + 1023) // 1024))
    _write(deb / "conffiles", "/etc/edged/edged.conf\n")
    for script in ("postinst", "prerm", "postrm"):
        _write(deb / script, (pk / "maintscripts" / script).read_bytes(), 0o755)
    sums = []
    for p in sorted(stage.rglob("*")):
        rel = p.relative_to(stage)
        if p.is_file() and rel.parts[0] != "DEBIAN" and rel.parts[0] != "etc":
            sums.append(f"{hashlib.md5(p.read_bytes()).hexdigest()}  {rel}\n")  # noqa: S324 (dpkg's format)
    _write(deb / "md5sums", "".join(sums))


def normalise(stage: Path, epoch: int) -> None:
    """Same modes and times on every build: directories 0755 (0700 for none: creds are made by tmpfiles)."""
    for p in sorted(stage.rglob("*"), reverse=True):
        if p.is_dir():
            p.chmod(0o755)
        elif not (p.stat().st_mode & stat.S_IXUSR):
            p.chmod(0o644)
        os.utime(p, (epoch, epoch), follow_symlinks=False)
    os.utime(stage, (epoch, epoch))


def build(arch: str, out_dir: Path, work: Path, ver: str = "") -> Path:
    """The .deb for `arch` in `out_dir`; `ver` overrides the package version (edged.__version__)."""
    if arch not in ARCHES:
        raise BuildError(f"unknown architecture {arch!r} (one of {', '.join(ARCHES)})")
    deps = plan(runtime_requirements())
    epoch = source_date_epoch()
    # one stage per process (parallel test workers build at once); the wheel cache is shared
    stage = work / f"stage-{arch}-{os.getpid()}"
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    try:
        ver = ver or version()
        build_tree(stage, arch, deps, work / "wheels", epoch, ver)
        normalise(stage, epoch)
        out_dir.mkdir(parents=True, exist_ok=True)
        deb = out_dir / f"edged_{ver}_{arch}.deb"
        env = dict(os.environ, SOURCE_DATE_EPOCH=str(epoch))
        r = subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(stage), str(deb)],
                           capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise BuildError(f"dpkg-deb failed: {r.stderr.strip()}")
        return deb
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default=subprocess.run(["dpkg", "--print-architecture"], capture_output=True,
                                                     text=True).stdout.strip() or "amd64")
    ap.add_argument("--out", default=str(ROOT / "dist"))
    ap.add_argument("--work", default=str(ROOT / "build" / "deb"))
    ap.add_argument("--version", default="", help="package version (default: edged.__version__)")
    a = ap.parse_args(argv)
    try:
        deb = build(a.arch, Path(a.out), Path(a.work), a.version)
    except BuildError as e:
        print(f"build_deb: {e}", file=sys.stderr)
        return 1
    print(deb)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
