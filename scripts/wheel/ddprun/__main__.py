"""python -m ddprun: runs the ddprun program this wheel installed, with the same arguments."""
import os
import sys
import sysconfig


def main():
    # The environment's scripts folder (a venv's bin), else the user scheme's (pip --user).
    for scheme in (None, f"{os.name}_user"):
        folder = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        program = os.path.join(folder, "ddprun")
        if os.access(program, os.X_OK):
            os.execv(program, [program, *sys.argv[1:]])
    sys.exit("ddprun: error: the ddprun program is not installed beside this Python")


if __name__ == "__main__":
    main()
