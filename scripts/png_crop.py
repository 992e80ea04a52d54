#!/usr/bin/env python3
"""Crop an 8-bit RGB PNG and enlarge it by an integer factor (nearest
neighbour, so pixels stay visible): the close-ups of docs/render.md.

    png_crop.py IN.png X Y W H ZOOM OUT.png

Standard library only (zlib); reads the non-interlaced 8-bit RGB PNGs the
danqing CLI writes and refuses anything else with a clear message.
"""
import struct
import sys
import zlib


def read_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"png_crop: {path}: not a PNG")
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or colour != 2 or interlace != 0:
                sys.exit(f"png_crop: {path}: only 8-bit RGB, non-interlaced PNGs")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * 3
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - 3] if i >= 3 else 0
            b = prev[i]
            c = prev[i - 3] if i >= 3 else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return width, height, rows


def write_png(path, width, height, rows):
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    raw = b"".join(b"\x00" + bytes(r) for r in rows)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
        f.write(chunk(b"IEND", b""))


def main():
    if len(sys.argv) != 8:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[7]
    x, y, w, h, zoom = (int(v) for v in sys.argv[2:7])
    width, height, rows = read_png(src)
    if x < 0 or y < 0 or w < 1 or h < 1 or x + w > width or y + h > height or zoom < 1:
        sys.exit(f"png_crop: the window {w}x{h}+{x}+{y} is not inside the {width}x{height} image")
    out_rows = []
    for yy in range(y, y + h):
        line = bytearray()
        for xx in range(x, x + w):
            line += rows[yy][xx * 3:xx * 3 + 3] * zoom
        out_rows.extend([line] * zoom)
    write_png(out, w * zoom, h * zoom, out_rows)


if __name__ == "__main__":
    main()
