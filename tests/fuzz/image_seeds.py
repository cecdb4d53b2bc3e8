#!/usr/bin/env python3
"""Writes the seeds of the image fuzz target (tests/fuzz/seeds/image): MNIST digits as PNG, BMP and
JPEG in the variants stb_image decodes differently, truncated and bit-flipped copies, and inputs
rebuilt from the published reports against stb_image (GIF ones, which mnist_predict must refuse by
name; JPEG and PNG ones, which it must refuse without a crash or a large allocation).

    tests/fuzz/image_seeds.py MNIST_DIR OUT_DIR

Needs only Python's standard library; the JPEG seeds need cjpeg (Debian: libjpeg-turbo-progs) and
are left out without it. Every seed is under 4096 bytes, the fuzzer's input length."""
import gzip
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib


def mnist_digits(folder, count):
    with gzip.open(os.path.join(folder, "t10k-images-idx3-ubyte.gz"), "rb") as f:
        data = f.read(16 + 784 * count)
    return [[data[16 + 784 * i + 28 * y:16 + 784 * i + 28 * (y + 1)] for y in range(28)] for i in range(count)]


def scaled_photo(rows, factor):
    """The digit dark on light, enlarged: the way a user photographs one."""
    out = []
    for row in rows:
        line = bytes(255 - v for v in row for _ in range(factor))
        out.extend([line] * factor)
    return out


# ---- PNG -------------------------------------------------------------------------------------------
def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def filtered(rows, bpp):
    """Each row with one of PNG's five filters, in turn, so that every unfilter path is reached."""
    out, prev = b"", bytes(len(rows[0]))
    for y, row in enumerate(rows):
        kind = y % 5
        enc = bytearray()
        for x, v in enumerate(row):
            a = row[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            enc.append((v - [0, a, b, (a + b) // 2, paeth(a, b, c)][kind]) & 255)
        out += bytes([kind]) + enc
        prev = row
    return out


def png(width, height, rows, color_type=0, depth=8, chunks_before=b"", interlace=0, bpp=1):
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, interlace)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunks_before +
            chunk(b"IDAT", zlib.compress(filtered(rows, bpp) if rows else b"", 9)) + chunk(b"IEND", b""))


def adam7(rows):
    """The seven passes of an interlaced 8-bit gray image, each row with filter 0."""
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    raw = b""
    for x0, y0, dx, dy in passes:
        for y in range(y0, len(rows), dy):
            line = rows[y][x0::dx]
            if line:
                raw += b"\x00" + line
    return raw


def png_seeds(digit, photo):
    gray = [bytes(r) for r in digit]
    w = len(photo[0])
    yield "png_gray8.png", png(28, 28, gray)
    yield "png_photo_gray8.png", png(w, len(photo), photo)
    yield "png_rgb8.png", png(28, 28, [bytes(v for p in r for v in (p, p // 2, 255 - p)) for r in gray], 2, bpp=3)
    yield "png_rgba8.png", png(28, 28, [bytes(v for p in r for v in (p, p, p, 255 - p // 4)) for r in gray], 6, bpp=4)
    yield "png_gray_alpha8.png", png(28, 28, [bytes(v for p in r for v in (p, 200)) for r in gray], 4, bpp=2)
    yield "png_gray16.png", png(28, 28, [bytes(v for p in r for v in (p, p)) for r in gray], 0, 16, bpp=2)
    palette = chunk(b"PLTE", bytes(v for i in range(16) for v in (i * 17, i * 17, i * 17)))
    yield "png_palette4.png", png(28, 28, [bytes((r[x] >> 4) << 4 | r[x + 1] >> 4 for x in range(0, 28, 2))
                                           for r in gray], 3, 4, palette)
    yield "png_gray1.png", png(32, 28, [bytes(sum((r[x + k] > 127) << (7 - k) for k in range(8)) if x + 7 < 28 else 0
                                              for x in range(0, 32, 8)) for r in gray], 0, 1)
    ihdr = struct.pack(">IIBBBBB", 28, 28, 8, 0, 0, 0, 1)
    yield "png_interlaced.png", (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
                                 + chunk(b"IDAT", zlib.compress(adam7(gray))) + chunk(b"IEND", b""))


# ---- BMP -------------------------------------------------------------------------------------------
def bmp(rows, bpp=24, top_down=False, os2=False):
    height, width = len(rows), len(rows[0])
    stride = (width * bpp + 31) // 32 * 4
    palette = b""
    if bpp <= 8:
        n = 1 << bpp
        palette = b"".join(bytes((i * 255 // (n - 1),) * 3 + (() if os2 else (0,))) for i in range(n))
    data = b""
    for row in (rows if top_down else rows[::-1]):
        if bpp == 24:
            line = bytes(v for p in row for v in (p, p, p))
        elif bpp == 32:
            line = bytes(v for p in row for v in (p, p, p, 255))
        elif bpp == 8:
            line = bytes(row)
        elif bpp == 4:
            line = bytes((row[x] >> 4) << 4 | (row[x + 1] >> 4 if x + 1 < width else 0) for x in range(0, width, 2))
        else:  # 1
            line = bytes(sum((x + k < width and row[x + k] > 127) << (7 - k) for k in range(8))
                         for x in range(0, width, 8))
        data += line + bytes(stride - len(line))
    if os2:
        info = struct.pack("<IHHHH", 12, width, height, 1, bpp)
    else:
        info = struct.pack("<IiiHHIIiiII", 40, width, -height if top_down else height, 1, bpp, 3 if bpp == 32 else 0,
                           len(data), 2835, 2835, 0, 0)
        if bpp == 32:
            palette = struct.pack("<III", 0xFF0000, 0xFF00, 0xFF)
    offset = 14 + len(info) + len(palette)
    return b"BM" + struct.pack("<IHHI", offset + len(data), 0, 0, offset) + info + palette + data


def bmp_seeds(digit):
    rows = [bytes(r) for r in digit]
    yield "bmp_gray8.bmp", bmp(rows, 8)
    yield "bmp_rgb24.bmp", bmp(rows, 24)
    yield "bmp_top_down.bmp", bmp(rows, 24, top_down=True)
    yield "bmp_bitfields32.bmp", bmp(rows, 32)
    yield "bmp_gray4.bmp", bmp(rows, 4)
    yield "bmp_mono1.bmp", bmp(rows, 1)
    yield "bmp_os2.bmp", bmp(rows, 8, os2=True)


# ---- JPEG (cjpeg) ----------------------------------------------------------------------------------
def jpeg_seeds(digit, photo):
    cjpeg = shutil.which("cjpeg")
    if not cjpeg:
        print("image_seeds: no cjpeg (Debian: libjpeg-turbo-progs): the JPEG seeds are left out", file=sys.stderr)
        return
    with tempfile.TemporaryDirectory() as tmp:
        pgm, ppm = os.path.join(tmp, "d.pgm"), os.path.join(tmp, "d.ppm")
        with open(pgm, "wb") as f:
            f.write(b"P5\n%d %d\n255\n" % (len(photo[0]), len(photo)) + b"".join(photo))
        with open(ppm, "wb") as f:
            f.write(b"P6\n28 28\n255\n" + bytes(v for r in digit for p in r for v in (p, 255 - p, p // 2)))
        for name, source, options in [("jpeg_gray.jpg", pgm, ["-quality", "75"]),
                                      ("jpeg_gray_progressive.jpg", pgm, ["-progressive", "-quality", "60"]),
                                      ("jpeg_gray_restart.jpg", pgm, ["-restart", "1B", "-quality", "50"]),
                                      ("jpeg_color_420.jpg", ppm, ["-quality", "90"]),
                                      ("jpeg_color_444.jpg", ppm, ["-sample", "1x1", "-optimize"]),
                                      ("jpeg_color_progressive.jpg", ppm, ["-progressive"]),
                                      ("jpeg_color_422_restart.jpg", ppm, ["-sample", "2x1", "-restart", "2B"])]:
            yield name, subprocess.run([cjpeg, *options, source], check=True, capture_output=True).stdout


# ---- inputs rebuilt from reports against stb_image ---------------------------------------------------
def gif(width, height, size, lzw=b"\x02\x02\x4c\x01\x00"):
    """A GIF whose screen and only frame claim width×height, padded to `size` bytes with a comment."""
    head = (b"GIF89a" + struct.pack("<HHBBB", width, height, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff" +
            b"\x2c" + struct.pack("<HHHHB", 0, 0, width, height, 0) + lzw)
    pad = size - len(head) - 5
    assert 0 <= pad <= 255
    return head + b"\x21\xfe" + bytes([pad]) + b"x" * pad + b"\x00" + b";"


def report_seeds(jpeg_color):
    # A 98-byte GIF claiming 16384×16448 pixels: stb decoded it in full (1.48 GB, 2.2 s).
    yield "poc_gif_bomb_16384x16448.gif", gif(16384, 16448, 98)
    # nothings/stb #2001: background and history buffers of such a GIF allocated unguarded (64 bytes).
    yield "poc_stb2001_gif_buffers.gif", gif(16384, 16448, 64)
    # nothings/stb #1538 (GHSL-2023-145): a frame disposed to the one two back reads before the
    # buffer; the bytes of the report.
    yield "poc_stb1538_ghsl_2023_145.gif", bytes([
        0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 0xbd, 0x00, 0xdf, 0x79, 0xa9, 0x97, 0x53, 0x43, 0x05, 0xff, 0xbe, 0x21,
        0x00, 0x30, 0x03, 0x01, 0x00, 0x21, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x00, 0xbd, 0x00, 0x3f, 0x71, 0x07, 0x00,
        0x05, 0xff, 0xbe, 0x01, 0x00, 0x68, 0x00, 0x21, 0xf9, 0x04, 0x2c, 0x0a, 0x00, 0x1f, 0x00, 0x2c, 0x00, 0x00,
        0x00, 0x00, 0xbd, 0x00, 0x71, 0x00, 0x00, 0x05, 0xff, 0xe0, 0x27, 0x8e, 0x64, 0x68])
    # nothings/stb #1916: the same read through a multi-frame GIF (the report's base64).
    import base64
    yield "poc_stb1916_gif_two_back.gif", base64.b64decode(
        "R0lGODlhMDAwAIAwMDAwMDAwMCwwADAAMAAAADAAACH5BO8wMDAALDAAAAAwADAAMAAw+Q==")
    # A PNG whose header claims 30000×30000 gray pixels (900 MB) over a few bytes of data.
    yield "poc_png_30000x30000.png", png(30000, 30000, [])
    # A 28×28 PNG whose compressed stream inflates to 3 MiB: stb grows its buffer to fit (to 4 GiB).
    zeros = zlib.compress(bytes(3 << 20), 9)
    ihdr = struct.pack(">IIBBBBB", 28, 28, 8, 0, 0, 0, 0)
    yield "poc_png_zlib_bomb.png", (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zeros)
                                    + chunk(b"IEND", b""))
    # A BMP whose header claims 1×16777216 pixels (within the default limit) over 60 bytes.
    yield "poc_bmp_1x16777216.bmp", b"BM" + struct.pack("<IHHI", 62, 0, 0, 54) + struct.pack(
        "<IiiHHIIiiII", 40, 1, 1 << 24, 1, 24, 0, 0, 0, 0, 0, 0) + bytes(8)
    if jpeg_color:
        # nothings/stb #1108: a Huffman DC table whose symbols exceed 15 sent stbi__extend_receive
        # past its 16-entry table. Here every DC symbol of the first table is 16 or more.
        data = bytearray(jpeg_color)
        at = data.find(b"\xff\xc4")
        length = data[at + 2] << 8 | data[at + 3]
        counts = data[at + 5:at + 21]
        for k in range(sum(counts)):
            data[at + 21 + k] = 16 + k % 16
        assert length >= 19 + sum(counts)
        yield "poc_stb1108_jpeg_dc_symbol.jpg", bytes(data)
        # A progressive JPEG of 150 scans, each a pass over the whole image.
        sos = data.find(b"\xff\xda")
        yield "poc_jpeg_150_scans.jpg", (bytes(data[:sos]) + b"\xff\xda\x00\x08\x01\x01\x00\x00\x00\x00" * 150
                                         + b"\xff\xd9")


def variants(name, data, rng):
    """Truncated and bit-flipped copies of a valid file."""
    stem, ext = os.path.splitext(name)
    yield f"{stem}_truncated_half{ext}", data[:len(data) // 2]
    yield f"{stem}_truncated_end{ext}", data[:-3]
    flipped = bytearray(data)
    for _ in range(4):
        at = rng.randrange(8, len(data))
        flipped[at] ^= 1 << rng.randrange(8)
    yield f"{stem}_bitflips{ext}", bytes(flipped)


def main():
    mnist, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    digits = mnist_digits(mnist, 3)
    photo = scaled_photo(digits[1], 2)
    rng = random.Random(7)
    seeds = dict(png_seeds(digits[0], photo))
    seeds.update(bmp_seeds(digits[2]))
    seeds.update(jpeg_seeds(digits[0], photo))
    for name in ["png_gray8.png", "png_rgb8.png", "bmp_gray8.bmp", "bmp_rgb24.bmp", "jpeg_gray.jpg",
                 "jpeg_color_progressive.jpg"]:
        if name in seeds:
            seeds.update(variants(name, seeds[name], rng))
    seeds.update(report_seeds(seeds.get("jpeg_color_420.jpg")))
    for name, data in sorted(seeds.items()):
        assert len(data) <= 4096, f"{name}: {len(data)} bytes, more than the fuzzer's 4096"
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"image_seeds: {len(seeds)} seeds in {out} ({sum(map(len, seeds.values()))} bytes)")


if __name__ == "__main__":
    main()
