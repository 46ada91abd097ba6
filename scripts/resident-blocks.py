#!/usr/bin/env python3
"""Where a process's resident set of its own executable comes from.

The kernel maps a file's pages in blocks of 64 KiB when one of them is touched (its
"fault-around"), so the resident set of a binary's code is the number of 64 KiB blocks in
which anything ran, not the size of what ran. Two uses (docs/benchmarks.md, memory):

  resident-blocks.py PID [N]
      the pages of PID's executable that are resident now, by mapping, with the count of
      64 KiB blocks touched, and the N crates (30) whose symbols cover most of them;

  resident-blocks.py --first-touch BINARY BASE ADDRESSES
      which symbol first touched each 64 KiB block, in the order they were touched:
      ADDRESSES is the first column of `perf script -F addr` for a run of
      `perf record -c 1 -e page-faults -d -o F BINARY ARGS…`, BASE the address (hex) at
      which that run mapped the binary's offset 0 (`perf script --show-mmap-events`).

Needs `nm` and `readelf` (binutils), and root for another process's page map.
"""
import bisect
import collections
import os
import re
import struct
import subprocess
import sys

BLOCK = 64 * 1024
PAGE = 4096


def symbols(exe):
    out = subprocess.run(["nm", "-n", "-C", "-S", exe], capture_output=True, text=True).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 4:
            try:
                syms.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
            except ValueError:
                pass
    syms.sort()
    return syms, [s[0] for s in syms]


def crate(name):
    name = re.sub(r"^[<&*\s]+|const |mut |dyn ", "", name).lstrip("<")
    m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)", name)
    return m.group(1) if m else name[:20]


def loads(exe):
    """(file offset, virtual address, size in the file) of each LOAD segment."""
    out = subprocess.run(["readelf", "-lW", exe], capture_output=True, text=True).stdout
    segs = []
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            segs.append((int(f[1], 16), int(f[2], 16), int(f[4], 16)))
    return segs


def resident(pid, top):
    exe = os.readlink(f"/proc/{pid}/exe")
    syms, addrs = symbols(exe)
    segs = loads(exe)
    by_crate = collections.Counter()
    pagemap = open(f"/proc/{pid}/pagemap", "rb")
    total = 0
    for line in open(f"/proc/{pid}/maps"):
        f = line.split()
        if len(f) < 6 or f[5] != exe:
            continue
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        offset = int(f[2], 16)
        present, blocks = 0, set()
        for va in range(lo, hi, PAGE):
            pagemap.seek(va // PAGE * 8)
            if not struct.unpack("<Q", pagemap.read(8))[0] >> 63:
                continue
            present += 1
            blocks.add(va // BLOCK)
            file_off = offset + va - lo
            fv = next((v + file_off - o for o, v, s in segs if o <= file_off < o + s), None)
            if fv is None:
                continue
            i, covered = max(0, bisect.bisect_right(addrs, fv) - 1), 0
            while i < len(syms) and syms[i][0] < fv + PAGE:
                a, size, name = syms[i]
                overlap = min(a + size, fv + PAGE) - max(a, fv)
                if overlap > 0:
                    by_crate[crate(name)] += overlap
                    covered += overlap
                i += 1
            if covered < PAGE:
                by_crate[f"(no symbol, {f[1]})"] += PAGE - covered
        total += present
        print(f"{f[1]} {present * PAGE / 1048576:6.2f} MiB resident of "
              f"{(hi - lo) / 1048576:6.2f}, in {len(blocks)} blocks of 64 KiB")
    print(f"{total * PAGE / 1048576:.2f} MiB of {exe} resident; by crate:")
    for name, size in by_crate.most_common(top):
        print(f"{size / 1048576:8.3f} MiB  {name}")


def first_touch(exe, base, addresses):
    syms, addrs = symbols(exe)
    end = base + max(v + s for _, v, s in loads(exe))
    seen = set()
    for line in open(addresses):
        if not line.split():
            continue
        a = int(line.split()[0], 16)
        if not base <= a < end or (a - base) // BLOCK in seen:
            continue
        va = a - base
        seen.add(va // BLOCK)
        i = bisect.bisect_right(addrs, va) - 1
        hit = i >= 0 and syms[i][0] <= va < syms[i][0] + max(syms[i][1], 1)
        print(f"{len(seen):4} {va:#10x} {syms[i][2][:150] if hit else '-'}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--first-touch":
        first_touch(sys.argv[2], int(sys.argv[3], 16), sys.argv[4])
    elif len(sys.argv) in (2, 3) and sys.argv[1].isdigit():
        resident(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) == 3 else 30)
    else:
        sys.exit(__doc__)
