"""`pip install ./python` end to end, offline: builds the wheel (scikit-build-core, CMake, the
runtime alone), installs it into a fresh folder, and checks that the installed package loads the
libfagen_rt.so inside it, not a checkout's; then runs python/tests against the installed copy.

    check_wheel.py WORK_DIR        # the interpreter needs torch and scikit-build-core
"""
import glob
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)


def main():
    work = os.path.abspath(sys.argv[1])
    shutil.rmtree(work, ignore_errors=True)
    wheels, site = os.path.join(work, "wheels"), os.path.join(work, "site")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL",
                                                                      "2"))
    subprocess.run(pip + ["wheel", "-q", "--no-build-isolation", "--no-deps", PACKAGE, "-w",
                          wheels], check=True, env=env)
    [wheel] = glob.glob(os.path.join(wheels, "fagen-*.whl"))
    subprocess.run(pip + ["install", "-q", "--no-deps", "--no-index", "--target", site, wheel],
                   check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("FAGEN_RT_LIB", "PYTHONPATH")}
    env["PYTHONPATH"] = site
    probe = ("import os, fagen; lib = fagen.runtime.find_library(); "
             "assert fagen.__file__.startswith(os.environ['PYTHONPATH']), fagen.__file__; "
             "assert os.path.dirname(lib) == os.path.dirname(fagen.__file__), lib; "
             "print('installed', fagen.__file__, lib, 'runtime', fagen.version())")
    subprocess.run([sys.executable, "-c", probe], check=True, env=env, cwd=work)
    subprocess.run([sys.executable, "-m", "unittest", "discover", "-s", HERE, "-t", HERE],
                   check=True, env=env, cwd=work)


if __name__ == "__main__":
    main()
