"""Where the CPU went, from py-spy's raw (collapsed) stacks: the functions with the most
samples on the stack (inclusive) and at its top (self).

    .venv/bin/python -m bench.profile_summary DIR/controller-2.txt [--top 40]
"""

from __future__ import annotations

import argparse
import collections
import pathlib


def summarise(path: pathlib.Path, top: int) -> str:
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        total += count
        frames = [f.split(" (")[0] + " " + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1] for f in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += count
        own[frames[-1]] += count
    lines = [f"{path.name}: {total} samples"]
    lines.append("inclusive:")
    lines += [f"  {100 * n / total:5.1f}%  {frame}" for frame, n in inclusive.most_common(top)]
    lines.append("self:")
    lines += [f"  {100 * n / total:5.1f}%  {frame}" for frame, n in own.most_common(top)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    for name in args.files:
        print(summarise(pathlib.Path(name), args.top))


if __name__ == "__main__":
    main()
