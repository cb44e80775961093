#!/usr/bin/env python3
"""edit-manifest.py IN OUT [--version N] [--sub OLD NEW]... [--duplicate-kernel]: rewrites a
bundle's manifest (section 0) and re-seals it (offsets, lengths, FNV-1a checksums;
docs/bundle-format.md), so that inspect sees a well-formed file with the edited contents."""
import struct
import sys

FNV_OFFSET, FNV_PRIME, MASK = 0xcbf29ce484222325, 0x100000001b3, (1 << 64) - 1
HEADER, ENTRY, ALIGN = 24, 32, 16


def fnv1a(data, h=FNV_OFFSET):
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK
    return h


def main(argv):
    src, dst, args = argv[1], argv[2], argv[3:]
    data = open(src, "rb").read()
    version, count = struct.unpack_from("<II", data, 8)
    sections = []
    for i in range(count):
        kind, _, offset, length, _ = struct.unpack_from("<IIQQQ", data, HEADER + i * ENTRY)
        sections.append([kind, data[offset:offset + length]])
    manifest = sections[0][1].decode()
    while args:
        opt = args.pop(0)
        if opt == "--version":
            version = int(args.pop(0))
        elif opt == "--sub":
            old, new = args.pop(0), args.pop(0)
            assert old in manifest, old
            manifest = manifest.replace(old, new, 1)
        elif opt == "--duplicate-kernel":
            lines = manifest.splitlines(keepends=True)
            kernel = next(line for line in lines if line.startswith("kernel "))
            manifest = "".join(lines + [kernel])
    sections[0][1] = manifest.encode()
    table_end = HEADER + count * ENTRY
    out = bytearray(table_end)
    out[0:8] = data[0:8]
    struct.pack_into("<II", out, 8, version, count)
    for i, (kind, payload) in enumerate(sections):
        out += b"\0" * (-len(out) % ALIGN)
        struct.pack_into("<IIQQQ", out, HEADER + i * ENTRY, kind, 0, len(out), len(payload),
                         fnv1a(payload))
        out += payload
    struct.pack_into("<Q", out, 16, fnv1a(out[HEADER:table_end], fnv1a(out[0:16])))
    open(dst, "wb").write(out)


main(sys.argv)
