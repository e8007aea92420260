"""pip install . : the extension qkv._qkv built by CMake (the same build as scripts/setup.sh's).

CMake configures a release build of the library and the extension for the interpreter running pip
(-DPython_EXECUTABLE), in build/pip under the checkout (kept, so a second install rebuilds only
what changed), and builds the target qkv_python; the module is copied into the wheel beside
python/qkv's files. QKV_PIP_BUILD_DIR=DIR builds in DIR instead, e.g. an existing build of the
checkout configured for the same interpreter (its other settings are left as they are).
"""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("QKV_PIP_BUILD_DIR") or os.path.join(ROOT, "build", "pip")
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            subprocess.run(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DQKV_PYTHON=ON",
                            f"-DPython_EXECUTABLE={sys.executable}", "-DBUILD_TESTING=OFF", "-DQKV_BENCH=OFF",
                            "-DQKV_MPI=OFF"], check=True)
        jobs = str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", build_dir, "--target", "qkv_python", "-j", jobs], check=True)
        built = glob.glob(os.path.join(build_dir, "python", "qkv", "_qkv*.so"))
        if len(built) != 1:
            sys.exit(f"qkv: expected one built extension under {build_dir}/python/qkv, found {built}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


# setuptools' own working files under build/setuptools, not in the checkout's root or in build/.
WORK = os.path.join("build", "setuptools")
os.makedirs(os.path.join(ROOT, WORK), exist_ok=True)
setup(ext_modules=[Extension("qkv._qkv", sources=[])], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": WORK}, "egg_info": {"egg_base": WORK}})
