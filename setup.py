"""The wheel's build steps (pyproject.toml): builds ddprun with CMake's "wheel" preset
(libstdc++ and hwloc linked in), and tags the wheel with the oldest glibc the binary
accepts, read from its symbol versions, so that pip installs it on any glibc Linux of this
architecture that new."""
import os
import platform
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
# Relative to this folder, as setup() wants them (the build runs here).
BUILD = "build-wheel"
BINARY = "build-wheel/stage/ddprun"  # bin/ddprun stripped
COMPLETION = "build-wheel/completion/ddprun"


# egg_info writes its folder into build-wheel before anything is built.
os.makedirs(os.path.join(HERE, BUILD), exist_ok=True)


def version():
    with open(os.path.join(HERE, "CMakeLists.txt")) as f:
        return re.search(r"project\(ddprun VERSION (\S+)", f.read()).group(1)


def glibc_tag():
    """manylinux_2_N_ARCH for the newest GLIBC_2.N symbol version ddprun needs."""
    symbols = subprocess.run(["objdump", "-T", os.path.join(HERE, BINARY)], check=True, capture_output=True,
                             text=True).stdout
    minor = max(int(m) for m in re.findall(r"GLIBC_2\.(\d+)", symbols))
    return f"manylinux_2_{minor}_{platform.machine()}"


class BuildDdprun(build_py):
    def run(self):
        subprocess.run(["cmake", "--preset", "wheel"], cwd=HERE, check=True)
        subprocess.run(["cmake", "--build", "--preset", "wheel", "-j", str(os.cpu_count() or 1)],
                       cwd=HERE, check=True)
        os.makedirs(os.path.join(HERE, os.path.dirname(BINARY)), exist_ok=True)
        subprocess.run(["strip", "-o", BINARY, os.path.join(BUILD, "bin", "ddprun")], cwd=HERE,
                       check=True)
        completion = os.path.join(HERE, COMPLETION)
        os.makedirs(os.path.dirname(completion), exist_ok=True)
        shutil.copyfile(os.path.join(HERE, "scripts", "ddprun-completion.bash"), completion)
        super().run()


class PlatformWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False  # it holds a native program

    def get_tag(self):
        return "py3", "none", glibc_tag()


setup(
    version=version(),
    packages=["ddprun"],
    package_dir={"": "scripts/wheel"},
    # Installed under the environment's prefix: bin/ddprun (on the venv's PATH, as is, no
    # Python in between), the man page, the completion.
    data_files=[("bin", [BINARY]), ("share/man/man1", ["docs/ddprun.1"]),
                ("share/bash-completion/completions", [COMPLETION])],
    cmdclass={"build_py": BuildDdprun, "bdist_wheel": PlatformWheel},
    options={"build": {"build_base": os.path.join(BUILD, "setuptools")},
             "egg_info": {"egg_base": BUILD}},
)
