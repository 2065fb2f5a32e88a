"""What a wheel promises and what its binaries need, read from the files (as auditwheel does): the wheel's tag,
and per ELF file its architecture, the newest GLIBC_ symbol version it requires, the symbols it needs with no
version at all (which the old glibc of its tag may lack), and the libraries it links (DT_NEEDED), with those
outside the manylinux policy's list. Prints one JSON object.

usage: wheel_check.py WHEEL
"""
import io, json, os, struct, sys, zipfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python", "build_backend"))
import cuflight_build  # noqa: E402  (the backend's own ELF readers: the same rule packs and checks)

# The libraries every manylinux_2_28 system provides (PEP 600 defers to auditwheel's policy list).
POLICY = {"libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1",
          "libutil.so.1", "libpthread.so.0", "libresolv.so.2", "libX11.so.6", "libXext.so.6", "libXrender.so.1",
          "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0",
          "libglib-2.0.so.0", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}


def needed(data):
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    libs = []
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, _entsize in sections:
        if kind != 6:  # SHT_DYNAMIC
            continue
        strtab = sections[link][4]
        for at in range(offset, offset + size, 16):
            tag, val = struct.unpack_from("<qQ", data, at)
            if tag == 0:
                break
            if tag == 1:  # DT_NEEDED
                end = data.index(b"\0", strtab + val)
                libs.append(data[strtab + val:end].decode())
    return libs


def main(path):
    name = os.path.basename(path)
    files = {}
    with zipfile.ZipFile(path) as z:
        tag = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))).decode()
        for member in z.namelist():
            data = z.read(member)
            if data[:4] != b"\x7fELF":
                continue
            tmp = io.BytesIO(data)
            scratch = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"wheel_check_{os.getpid()}")
            with open(scratch, "wb") as f:
                f.write(tmp.getvalue())
            try:
                glibc = cuflight_build._glibc_needed(scratch)
                arch = cuflight_build.elf_arch(scratch)
                unversioned = cuflight_build.unversioned_undefined(scratch)
            finally:
                os.remove(scratch)
            libs = needed(data)
            files[member] = {"arch": arch, "glibc": list(glibc), "unversioned": unversioned, "needed": libs,
                             "outside_policy": [l for l in libs if l not in POLICY]}
    tags = [l.split(": ", 1)[1] for l in tag.splitlines() if l.startswith("Tag: ")]
    print(json.dumps({"file": name, "tags": tags, "elf": files}))


main(sys.argv[1])
