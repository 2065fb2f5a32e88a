"""Writes a directory tree as a gzip-compressed initramfs (the kernel's "newc" cpio format, as
Documentation/driver-api/early-userspace/buffer-format.rst describes it): directories, regular files with their
permission bits, and symbolic links, everything owned by root. For scripts/aarch64-vm, which needs no cpio tool.

usage: initramfs.py ROOT OUT.gz
"""
import gzip
import os
import stat
import sys


def write(root, out):
    ino = 1
    with gzip.open(out, "wb", compresslevel=1) as f:
        def entry(name, mode, data=b"", nlink=1):
            nonlocal ino
            encoded = name.encode() + b"\0"
            # c_ino, c_mode, c_uid, c_gid, c_nlink, c_mtime, c_filesize, c_devmajor, c_devminor, c_rdevmajor,
            # c_rdevminor, c_namesize, c_check: eight hex digits each after the magic.
            fields = (ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(encoded), 0)
            header = b"070701" + "".join("%08X" % v for v in fields).encode()
            ino += 1
            # The name and the data are each padded to a multiple of four bytes.
            f.write(header + encoded + b"\0" * (-(len(header) + len(encoded)) % 4))
            f.write(data + b"\0" * (-len(data) % 4))

        for here, dirs, files in os.walk(root):
            dirs.sort()
            rel = os.path.relpath(here, root)
            if rel != ".":
                entry(rel, stat.S_IFDIR | 0o755, nlink=2)
            # os.walk lists a symbolic link to a directory among the directories and does not enter it.
            for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(here, d))]):
                path = os.path.join(here, name)
                inside = os.path.normpath(os.path.join(rel, name))
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    entry(inside, stat.S_IFLNK | 0o777, os.readlink(path).encode())
                elif stat.S_ISREG(st.st_mode):
                    with open(path, "rb") as src:
                        entry(inside, stat.S_IFREG | (st.st_mode & 0o7777), src.read())
        entry("TRAILER!!!", 0)


write(sys.argv[1], sys.argv[2])
