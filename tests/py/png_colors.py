"""Decodes a PNG screenshot with the standard library only and prints JSON {"width", "height", "colors",
"non_white"}: how many distinct colours it has and the share of pixels that are not white. Usage: png_colors.py PNG
"""
import json
import struct
import sys
import zlib


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def main(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color_type, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color_type in (2, 6) and interlace == 0, "expects 8-bit RGB(A)"
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    bpp = 3 if color_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    colors, non_white, i = set(), 0, 0
    for _ in range(height):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            line[x] = (line[x] + (0, a, b, (a + b) // 2, paeth(a, b, c))[f]) & 0xFF
        for x in range(0, stride, bpp):
            px = bytes(line[x:x + 3])
            colors.add(px)
            non_white += px != b"\xff\xff\xff"
        prev = line
    print(json.dumps({"width": width, "height": height, "colors": len(colors), "non_white": non_white / (width * height)}))


if __name__ == "__main__":
    main(sys.argv[1])
