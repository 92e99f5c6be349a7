"""The server's end of a test's own TCP connection, read from the test.

A socket option of the server's end (TCP_NODELAY, say) cannot be seen from
the client's. Linux tells which socket is that end: /proc/<pid>/net/tcp (and
tcp6) names the connection's socket inode, and /proc/<pid>/fd links
`socket:[inode]` in the process holding it. `pidfd_getfd` then duplicates
that descriptor into the test's process, where `getsockopt` reads it; a
server in the test's own process is read through `os.dup`. The tests run as
root and start the servers themselves, which both let `pidfd_getfd` in.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Final

from tests.support.polling import wait_for

# pidfd_getfd's number: the generic table's (aarch64) and x86_64's agree.
SYS_PIDFD_GETFD: Final = {"x86_64": 438, "aarch64": 438}
_ESTABLISHED: Final = "01"


class NoPidfdGetfd(RuntimeError):
    """This machine cannot duplicate another process's descriptor."""


def pidfd_getfd_missing() -> str | None:
    """Why `pidfd_getfd` cannot be used here, or None when it can."""
    if sys.platform != "linux" or not hasattr(os, "pidfd_open"):
        return "pidfd_getfd needs Linux and os.pidfd_open"
    if platform.machine() not in SYS_PIDFD_GETFD:
        return f"pidfd_getfd's syscall number on {platform.machine()} is not known here"
    probe = os.open(os.devnull, os.O_RDONLY)
    try:
        os.close(_pidfd_getfd(os.getpid(), probe))
    except NoPidfdGetfd as missing:
        return str(missing)
    finally:
        os.close(probe)
    return None


def tcp_nodelay(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


@contextmanager
def server_end(
    client: socket.socket, server_pid: int, timeout: float = 30
) -> Iterator[socket.socket]:
    """The server's end of `client`'s connection, owned by `server_pid` or a
    process it started (gunicorn's workers), duplicated into this process
    once the server has accepted it; closing the copy leaves the server's
    own descriptor open."""
    with duplicated(client.getsockname()[1], client.getpeername()[1], server_pid, timeout) as end:
        yield end


@contextmanager
def duplicated(
    client_port: int, server_port: int, server_pid: int, timeout: float = 30
) -> Iterator[socket.socket]:
    """The server's end of the connection from `client_port` to `server_port`."""
    pid, fd = wait_for(
        lambda: _holder(client_port, server_port, server_pid),
        timeout=timeout,
        what=f"the server's end of {client_port} -> {server_port} in process {server_pid}",
    )
    copy = os.dup(fd) if pid == os.getpid() else _pidfd_getfd(pid, fd)
    end = socket.socket(fileno=copy)
    try:
        yield end
    finally:
        end.close()


def own_ports_to(server_port: int) -> list[int]:
    """The local ports of this process's established connections to
    `server_port` (a gRPC channel's, which does not show its socket)."""
    inodes = _socket_inodes(os.getpid())
    return sorted(
        local
        for local, remote, state, inode in _connections(os.getpid())
        if remote == server_port and state == _ESTABLISHED and inode in inodes
    )


def _holder(client_port: int, server_port: int, server_pid: int) -> tuple[int, int] | None:
    """(pid, fd) of the server's end, once some process holds it."""
    inodes = [
        inode
        for local, remote, _, inode in _connections(server_pid)
        if local == server_port and remote == client_port and inode != 0
    ]
    if not inodes:  # not accepted yet: a socket in the accept queue has no inode
        return None
    link = f"socket:[{inodes[0]}]"
    for pid in process_tree(server_pid):
        with suppress(OSError):  # a process or descriptor gone meanwhile
            for entry in os.scandir(f"/proc/{pid}/fd"):
                with suppress(OSError):
                    if os.readlink(entry.path) == link:
                        return pid, int(entry.name)
    return None


def _connections(pid: int) -> Iterator[tuple[int, int, str, int]]:
    """(local port, remote port, state, inode) of each TCP socket in `pid`'s
    network namespace, IPv4 and IPv6."""
    for table in ("tcp", "tcp6"):
        with suppress(FileNotFoundError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                local, remote = fields[1].rpartition(":")[2], fields[2].rpartition(":")[2]
                yield int(local, 16), int(remote, 16), fields[3], int(fields[9])


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    for entry in os.scandir(f"/proc/{pid}/fd"):
        with suppress(OSError):
            link = os.readlink(entry.path)
            if link.startswith("socket:["):
                inodes.add(int(link[len("socket:[") : -1]))
    return inodes


def process_tree(root: int) -> list[int]:
    """`root` and every process descended from it."""
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with suppress(OSError):
                stat = Path(entry.path, "stat").read_text()
                # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
                ppid = int(stat.rpartition(")")[2].split()[1])
                parents.setdefault(ppid, []).append(int(entry.name))
    found, waiting = [], [root]
    while waiting:
        pid = waiting.pop()
        found.append(pid)
        waiting.extend(parents.get(pid, []))
    return found


def _pidfd_getfd(pid: int, fd: int) -> int:
    """A copy, in this process, of descriptor `fd` of process `pid`."""
    number = SYS_PIDFD_GETFD.get(platform.machine())
    if number is None or not hasattr(os, "pidfd_open"):
        raise NoPidfdGetfd(f"no pidfd_getfd on {sys.platform}/{platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        copy = int(libc.syscall(number, pidfd, fd, 0))
    finally:
        os.close(pidfd)
    if copy < 0:
        error = ctypes.get_errno()
        if error in (errno.ENOSYS, errno.EPERM, errno.EACCES):
            raise NoPidfdGetfd(f"pidfd_getfd refused: {os.strerror(error)}")
        raise OSError(error, os.strerror(error))
    return copy
