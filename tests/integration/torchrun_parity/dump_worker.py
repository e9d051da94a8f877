#!/usr/bin/python3
"""Stand-in for a training script in the torchrun parity test.

The parity test copies this file to wherever a corpus command line expects its
training script or module, then runs the line under torchrun and under ddprun.
Each worker writes what a Python training script can observe about how it was
started to $PARITY_DUMP_DIR/rank-<RANK>.json and exits 0. Standard library only:
it must start fast and must not need torch.
"""
import json
import os
import sys


def interpreter_options():
    """Options given to the interpreter before the script, module or -c (e.g. ['-u'])."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            words = [w.decode(errors="replace") for w in f.read().split(b"\0") if w]
    except OSError:
        return None
    options = []
    for word in words[1:]:
        if not word.startswith("-") or word in ("-m", "-c", "-"):
            break
        options.append(word)
    return options


def main():
    main_spec = getattr(sys.modules["__main__"], "__spec__", None)
    record = {
        "argv": sys.argv,
        "executable": sys.executable,
        "unbuffered": bool(getattr(sys.stdout, "write_through", False)),
        "interpreter_options": interpreter_options(),
        "main_module": main_spec.name if main_spec is not None else None,
        "cwd": os.getcwd(),
        "pid": os.getpid(),
        "env": dict(os.environ),
    }
    out_dir = os.environ.get("PARITY_DUMP_DIR")
    if not out_dir:
        print("dump_worker: PARITY_DUMP_DIR is not set", file=sys.stderr)
        sys.exit(3)
    name = "rank-%s.json" % os.environ.get("RANK", "none-%d" % os.getpid())
    tmp = os.path.join(out_dir, name + ".tmp%d" % os.getpid())
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(out_dir, name))


if __name__ == "__main__":
    main()
