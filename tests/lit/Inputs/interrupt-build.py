#!/usr/bin/env python3
"""interrupt-build.py FAGEN SPEC WORKDIR SIGNAL: starts `fagen build` with a stand-in nvcc that
waits, sends SIGNAL (INT or TERM) once every compile has started, and prints what is left:
fagen's exit code, nvcc processes (and their children) still running, /tmp/fagen-build-*
folders (under WORKDIR/tmp, the build's TMPDIR) and an output file."""
import os
import shutil
import signal
import subprocess
import sys
import time

fagen, spec, work, signame = sys.argv[1:5]
here = os.path.dirname(os.path.abspath(__file__))
shutil.rmtree(work, ignore_errors=True)
tmp, pids = os.path.join(work, "tmp"), os.path.join(work, "pids")
os.makedirs(tmp)
os.makedirs(pids)
env = dict(os.environ, TMPDIR=tmp, FAKE_NVCC_PIDS=pids,
           CUDA_HOME=os.path.join(here, "fake-cuda"))
out = os.path.join(work, "out.fab")
proc = subprocess.Popen([fagen, "build", spec, "--no-cache", "-j", "2", "-q", "-o", out],
                        env=env, stderr=subprocess.PIPE, text=True)
deadline = time.time() + 60
while len(os.listdir(pids)) < 2 and time.time() < deadline and proc.poll() is None:
    time.sleep(0.05)
print("compiles started:", len(os.listdir(pids)))
print("temporary folders during the build:", len([d for d in os.listdir(tmp)
                                                   if d.startswith("fagen-build-")]))
proc.send_signal(getattr(signal, "SIG" + signame))
try:
    _, err = proc.communicate(timeout=30)
except subprocess.TimeoutExpired:
    proc.kill()
    print("fagen did not exit within 30 s")
    sys.exit(1)
print("exit code:", proc.returncode)
sys.stdout.write(err)
time.sleep(0.2)


def running(pid):
    """Whether pid is a live process (a zombie, dead but not yet reaped by its new parent, is
    not)."""
    try:
        with open("/proc/%s/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


alive = []
for name in os.listdir(pids):
    for pid in open(os.path.join(pids, name)).read().split():
        if running(pid):
            alive.append(pid)
            os.kill(int(pid), signal.SIGKILL)
print("processes left:", len(alive))
print("temporary folders left:", len(os.listdir(tmp)))
print("output written:", os.path.exists(out))
