#!/usr/bin/python3
"""Keeps the rooms of the house honest: which folder may include which.

  contract   <- common <- schedulers <- launcher        (no LibTorch anywhere here)
  contract, common <- worker library <- ddp-train program (LibTorch from the library up)

The launcher's sources live in eight rooms of their own under launcher/src, each of which
may include only the rooms before it (and schedulers, common, contract):

  plan <- report <- cli <- output <- run <- policy <- nodes <- job

A source file straight in launcher/src, outside the eight, is reported too. The options
(cli/options.h) stay at the door: only cli and job may include them; the rooms between
take what they need in structs of their own, made in job.

Every #include in a room's sources is resolved to the room that provides it (or to
LibTorch, or to the system, which is ignored) and checked against ALLOWED. Tests and
benchmarks may cross rooms and are not checked. Prints each offending include as
"path:line: ROOM includes OTHER (<include>)" and exits 1; exits 0 when all is well.

Usage: check_rooms.py [--root DIR]
"""
import argparse
import os
import re
import sys

# Room -> the folders (relative to the root) whose files belong to it.
ROOMS = {
    "contract": ["contract"],
    "common": ["common"],
    "schedulers": ["schedulers"],
    # The launcher's rooms, lowest first (LAUNCHER_ROOMS); "launcher" is the rest of its
    # folder (its CMakeLists.txt), where no source may sit.
    **{f"launcher/{r}": [f"launcher/src/{r}"] for r in ("plan", "report", "cli", "output", "run",
                                                         "policy", "nodes", "job")},
    "launcher": ["launcher"],
    "worker library": ["worker/lib"],
    "ddp-train": ["worker/train"],
}
# Include prefixes that name a room's public headers wherever they are included from.
PUBLIC_PREFIXES = {
    "ddprun/contract/": "contract",
    "ddprun/common/": "common",
    "ddprun/worker/": "worker library",
}
LIBTORCH_PREFIXES = ("torch/", "ATen/", "c10/", "c10d/", "caffe2/")
ALLOWED = {
    "contract": {"contract"},
    "common": {"common", "contract"},
    "schedulers": {"schedulers", "common", "contract"},
    "launcher": set(),
    "worker library": {"worker library", "common", "contract", "LibTorch"},
    "ddp-train": {"ddp-train", "worker library", "common", "contract", "LibTorch"},
}
LAUNCHER_ROOMS = [room for room in ROOMS if room.startswith("launcher/")]
OPTIONS_HEADER = "launcher/src/cli/options.h"
OPTIONS_READERS = {"launcher/cli", "launcher/job"}
for index, room in enumerate(LAUNCHER_ROOMS):
    ALLOWED[room] = set(LAUNCHER_ROOMS[:index + 1]) | {"schedulers", "common", "contract"}
SOURCE = re.compile(r"\.(h|hh|hpp|cc|cpp)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def room_of(path, root):
    rel = os.path.relpath(path, root)
    for room, folders in ROOMS.items():
        if any(rel == f or rel.startswith(f + "/") for f in folders):
            return room
    return None


def files_of(root):
    for room, folders in ROOMS.items():
        for folder in folders:
            for base, _dirs, names in os.walk(os.path.join(root, folder)):
                for name in sorted(names):
                    path = os.path.join(base, name)
                    # A folder inside another room's folder belongs to that room alone.
                    if SOURCE.search(name) and room_of(path, root) == room:
                        yield room, path


def provider(include, quoted, including_file, root, by_name):
    """The room that provides `include`, "LibTorch", or None (system or not ours)."""
    for prefix, room in PUBLIC_PREFIXES.items():
        if include.startswith(prefix):
            return room
    if include.startswith(LIBTORCH_PREFIXES):
        return "LibTorch"
    if not quoted:
        return None
    beside = os.path.join(os.path.dirname(including_file), include)
    if os.path.exists(beside):
        return room_of(beside, root)
    rooms = by_name.get(include.replace("\\", "/"), set())
    own = room_of(including_file, root)
    if own in rooms:
        return own
    return sorted(rooms)[0] if rooms else None


def is_options_header(include, including_file, root):
    """Whether `include` names launcher/src/cli/options.h."""
    for candidate in (os.path.join(os.path.dirname(including_file), include),
                      os.path.join(root, "launcher/src", include)):
        if os.path.normpath(candidate) == os.path.normpath(os.path.join(root, OPTIONS_HEADER)):
            return True
    return False


def check(root):
    by_name = {}  # "plan.h" or "sub/x.h" -> rooms having a header at such a path tail
    for room, path in files_of(root):
        parts = os.path.relpath(path, root).split(os.sep)
        for i in range(len(parts)):
            by_name.setdefault("/".join(parts[i:]), set()).add(room)
    problems = []
    for room, path in files_of(root):
        if room == "launcher":
            rel = os.path.relpath(path, root)
            problems.append(f"{rel}: launcher source outside its rooms ("
                            + ", ".join(r.split("/")[1] for r in LAUNCHER_ROOMS) + ")")
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                match = INCLUDE.match(line)
                if not match:
                    continue
                include = match.group(2)
                other = provider(include, match.group(1) == '"', path, root, by_name)
                rel = os.path.relpath(path, root)
                if other is not None and other not in ALLOWED[room]:
                    problems.append(f"{rel}:{number}: {room} includes {other} ({include})")
                elif (other == "launcher/cli" and room not in OPTIONS_READERS
                      and is_options_header(include, path, root)):
                    problems.append(f"{rel}:{number}: {room} includes the options ({include}): "
                                    "only cli and job may; pass a struct made in job")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))))
    args = parser.parse_args()
    missing = [f for folders in ROOMS.values() for f in folders
               if not os.path.isdir(os.path.join(args.root, f))]
    if missing:
        print("check_rooms: missing room folders: " + ", ".join(missing), file=sys.stderr)
        return 2
    problems = check(args.root)
    for problem in problems:
        print(problem)
    if problems:
        print(f"check_rooms: {len(problems)} include(s) cross the rooms' rules "
              "(tests/rooms/check_rooms.py, docs/architecture.md)", file=sys.stderr)
        return 1
    print("check_rooms: every include follows the rooms' rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
