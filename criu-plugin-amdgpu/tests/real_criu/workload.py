# The process tree the real-CRIU tests dump and restore (no GPU): a root
# holding a pipe, a socketpair, a listening unix socket, a memfd and
# /dev/null (its stdio), with two children. Every 50 ms the root proves each
# of its fds still works and appends "ok N" to HEARTBEAT, or "FAIL what"
# and stops; each child appends "child K N" to its own file. A restored tree
# that runs on keeps these files growing.
#
#   workload.py DIR [EXTRA_DEVICE]
#
# EXTRA_DEVICE: a device node the root also holds open (to see who claims
# it at dump).
import os
import socket
import sys
import time

scratch = sys.argv[1]
extra = sys.argv[2] if len(sys.argv) > 2 else None
os.setsid()


def append(name, line):
    with open(os.path.join(scratch, name), "a") as f:
        f.write(line + "\n")


children = []
for k in (1, 2):
    pid = os.fork()
    if pid == 0:
        n = 0
        while True:
            n += 1
            append("child%d" % k, "child %d %d" % (k, n))
            time.sleep(0.05)
    children.append(pid)

rd, wr = os.pipe()
left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(os.path.join(scratch, "listen.sock"))
listener.listen(4)
memfd = os.memfd_create("workload", 0)
os.write(memfd, b"memfd contents")
device = os.open(extra, os.O_RDWR) if extra else None

with open(os.path.join(scratch, "pids"), "w") as f:
    f.write(" ".join(str(p) for p in [os.getpid()] + children) + "\n")

n = 0
while True:
    n += 1
    try:
        os.write(wr, b"p%d" % n)
        assert os.read(rd, 64) == b"p%d" % n, "pipe"
        left.sendall(b"s%d" % n)
        assert right.recv(64) == b"s%d" % n, "socketpair"
        assert os.pread(memfd, 64, 0) == b"memfd contents", "memfd"
        assert listener.getsockname().endswith("listen.sock"), "listener"
        assert os.fstat(0).st_rdev == os.stat("/dev/null").st_rdev, "/dev/null"
    except Exception as e:  # noqa: BLE001 - any failure is reported
        append("heartbeat", "FAIL %r" % (e,))
        sys.exit(1)
    append("heartbeat", "ok %d" % n)
    time.sleep(0.05)
