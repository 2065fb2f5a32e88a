"""cuflight's PEP 517 build backend (in-tree, standard library only): `python3 -m pip install .` builds the
collector and the agent with cargo and packs them into a wheel:

    cuflight-V.data/scripts/cuflight          -> <env>/bin/cuflight
    cuflight-V.data/data/lib/libcuflight.so   -> <env>/lib/libcuflight.so (`cuflight` looks in ../lib)
    cuflight/__init__.py                      -> the in-program module (capture, mark_step)

The platform tag is the glibc the two ELF files actually need (their GNU version requirements, read here), so
pip refuses the wheel where it cannot run: manylinux_2_X_<arch>. Build on an old distribution (a manylinux
container) for a wider tag. Set CUFLIGHT_CARGO_PROFILE to build another cargo profile than `release`.
"""

import base64
import hashlib
import io
import os
import re
import shutil
import struct
import subprocess
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAME = "cuflight"
SUMMARY = "A zero-code-change GPU profiler for CUDA programs"


def _version():
    with open(os.path.join(ROOT, "Cargo.toml")) as f:
        text = f.read()
    m = re.search(r'\[workspace\.package\][^\[]*?\nversion\s*=\s*"([^"]+)"', text)
    if not m:
        raise RuntimeError("cuflight: no [workspace.package] version in Cargo.toml")
    return m.group(1)


def _metadata():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {_version()}\nSummary: {SUMMARY}\n"
            "License: Apache-2.0\nRequires-Python: >=3.8\nClassifier: Operating System :: POSIX :: Linux\n"
            "Classifier: Environment :: GPU :: NVIDIA CUDA\nDescription-Content-Type: text/markdown\n\n" + readme)


def _cargo_build():
    profile = os.environ.get("CUFLIGHT_CARGO_PROFILE", "release")
    cargo = shutil.which("cargo") or os.path.expanduser("~/.cargo/bin/cargo")
    if not os.path.exists(cargo):
        raise RuntimeError("cuflight: building the wheel needs Rust's cargo (https://rustup.rs)")
    # pip hides a backend's output unless run with -v, and a cold build takes minutes: cargo's progress goes to the
    # terminal when there is one.
    try:
        tty = open("/dev/tty", "w")
    except OSError:
        tty = None
    try:
        if tty:
            print("cuflight: building the collector and the agent with cargo (minutes the first time)", file=tty,
                  flush=True)
        subprocess.run([cargo, "build", "--locked", "--profile", profile, "-p", "cuflight", "-p", "cuflight-agent"],
                       cwd=ROOT, check=True, stderr=tty)
    finally:
        if tty:
            tty.close()
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    out = os.path.join(target, "debug" if profile == "dev" else profile)
    return os.path.join(out, "cuflight"), os.path.join(out, "libcuflight.so")


def _stripped(path, scratch):
    """A copy without debug sections (the release profile keeps line tables); the original if `strip` is absent or
    cannot read another architecture's file (scripts/wheels strips those while building)."""
    copy = os.path.join(scratch, os.path.basename(path))
    shutil.copy2(path, copy)
    strip = shutil.which("strip")
    if strip and subprocess.run([strip, "--strip-debug", copy], stderr=subprocess.DEVNULL).returncode == 0:
        return copy
    return path


def _glibc_needed(path):
    """The highest GLIBC_x.y among an ELF64 file's version requirements (.gnu.version_r), e.g. (2, 34)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise RuntimeError(f"cuflight: {path} is not a little-endian ELF64 file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    best = (2, 17)
    for _name, kind, _flags, _addr, offset, _size, link, info, _align, _entsize in sections:
        if kind != 0x6FFFFFFE:  # SHT_GNU_verneed
            continue
        strtab = sections[link][4]
        at = offset
        for _ in range(info):
            _ver, _file, cnt, aux, nxt = struct.unpack_from("<HHIII", data, at)
            a = at + aux
            for _ in range(cnt):
                _hash, _fl, _other, name, anext = struct.unpack_from("<IHHII", data, a)
                end = data.index(b"\0", strtab + name)
                m = re.fullmatch(rb"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", data[strtab + name:end])
                if m:
                    best = max(best, (int(m.group(1)), int(m.group(2))))
                a += anext
            at += nxt
    return best


def unversioned_undefined(path):
    """The functions and objects an ELF64 file needs from elsewhere (strong, undefined) that carry no symbol
    version: linked against an old glibc, a name that glibc gained later (`gettid`, 2.30) is left so, and that file
    then fails on the old glibc that its tag promises (`undefined symbol`) however old its GLIBC_ versions are."""
    with open(path, "rb") as f:
        data = f.read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    dynsym = next((s for s in sections if s[1] == 11), None)  # SHT_DYNSYM
    versym = next((s for s in sections if s[1] == 0x6FFFFFFF), None)  # SHT_GNU_versym
    if dynsym is None or versym is None:
        return []
    strtab = sections[dynsym[6]][4]
    names = []
    for i in range(1, dynsym[5] // 24):
        name, info, _other, shndx, _value, _size = struct.unpack_from("<IBBHQQ", data, dynsym[4] + 24 * i)
        version, = struct.unpack_from("<H", data, versym[4] + 2 * i)
        # Undefined, bound GLOBAL (a WEAK one may be absent), version index 0 or 1: no version required.
        if shndx == 0 and info >> 4 == 1 and version & 0x7FFF in (0, 1):
            end = data.index(b"\0", strtab + name)
            names.append(data[strtab + name:end].decode())
    return sorted(names)


# ELF e_machine values (elf.h) and the wheel architecture names they go by.
_ARCHES = {62: "x86_64", 183: "aarch64"}


def elf_arch(path):
    """The architecture an ELF file is built for, as wheel tags name it."""
    with open(path, "rb") as f:
        head = f.read(20)
    machine, = struct.unpack_from("<H", head, 18)
    if machine not in _ARCHES:
        raise RuntimeError(f"cuflight: {path} is built for ELF machine {machine}, which no wheel tag names here")
    return _ARCHES[machine]


def _tag(files):
    arches = {elf_arch(f) for f in files}
    if len(arches) != 1:
        raise RuntimeError(f"cuflight: the binary and the agent are built for different machines: {sorted(arches)}")
    major, minor = max(_glibc_needed(f) for f in files)
    for f in files:
        missing = unversioned_undefined(f)
        if missing:
            raise RuntimeError(f"cuflight: {os.path.basename(f)} needs {', '.join(missing)} with no symbol version: "
                               f"glibc {major}.{minor}, which the wheel's tag would promise, may lack them")
    return f"py3-none-manylinux_{major}_{minor}_{arches.pop()}"


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _dist_info(tag):
    return {
        "METADATA": _metadata().encode(),
        "WHEEL": f"Wheel-Version: 1.0\nGenerator: cuflight_build\nRoot-Is-Purelib: false\nTag: {tag}\n".encode(),
        "top_level.txt": b"cuflight\n",
    }


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    name = f"{NAME}-{_version()}.dist-info"
    os.makedirs(os.path.join(metadata_directory, name), exist_ok=True)
    with open(os.path.join(metadata_directory, name, "METADATA"), "wb") as f:
        f.write(_metadata().encode())
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    exe, lib = _cargo_build()
    return pack_wheel(exe, lib, wheel_directory)


def pack_wheel(exe, lib, wheel_directory):
    """A wheel of an already built `cuflight` and `libcuflight.so` (also cross-built ones: scripts/wheels), tagged
    with their architecture and the newest glibc they need; returns its file name."""
    version = _version()
    with tempfile.TemporaryDirectory() as scratch:
        exe, lib = _stripped(exe, scratch), _stripped(lib, scratch)
        tag = _tag([exe, lib])
        wheel = f"{NAME}-{version}-{tag}.whl"
        data = f"{NAME}-{version}.data"
        info = f"{NAME}-{version}.dist-info"
        entries = []  # (name in the wheel, bytes, unix mode)
        package = os.path.join(ROOT, "python", "cuflight")
        for file in sorted(os.listdir(package)):
            if file.endswith(".py"):
                with open(os.path.join(package, file), "rb") as f:
                    entries.append((f"cuflight/{file}", f.read(), 0o644))
        with open(exe, "rb") as f:
            entries.append((f"{data}/scripts/cuflight", f.read(), 0o755))
        with open(lib, "rb") as f:
            entries.append((f"{data}/data/lib/libcuflight.so", f.read(), 0o755))
        entries += [(f"{info}/{k}", v, 0o644) for k, v in _dist_info(tag).items()]
        record = [_record_line(n, d) for n, d, _ in entries] + [f"{info}/RECORD,,"]
        entries.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))
        os.makedirs(wheel_directory, exist_ok=True)
        with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
            for name, blob, mode in entries:
                zi = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
                zi.external_attr = (0o100000 | mode) << 16
                zi.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(zi, blob)
    return wheel


def build_sdist(sdist_directory, config_settings=None):
    """The tracked files (git ls-files) as NAME-V.tar.gz, with PKG-INFO."""
    import tarfile

    version = _version()
    base = f"{NAME}-{version}"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    os.makedirs(sdist_directory, exist_ok=True)
    path = os.path.join(sdist_directory, f"{base}.tar.gz")
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for rel in filter(None, files.decode().split("\0")):
            if os.path.isfile(os.path.join(ROOT, rel)):
                tar.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}", recursive=False)
        blob = _metadata().encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(blob)
        tar.addfile(ti, io.BytesIO(blob))
    return os.path.basename(path)
