"""The per-container supervisor ("shim") of the OCI backend: a small stdlib-only program, run
as `python -I -S shim.py start key=value...` by `oci.py`, never imported by the kubelet.

Why a shim: the container's stdout/stderr must become CRI log lines, and its exit code must
be recorded even while no kubelet runs, so that a restarted kubelet adopts the container and
still learns how it ended. One shim per container does both, as containerd's shims do:

1. The *launcher* forks the *daemon* and exits as soon as the daemon reports that the
   container started (or failed to). The launcher is a child of the per-runtime *fork
   server* (`serve`, started once by the kubelet, so a container start costs a fork, not an
   interpreter start-up), or, as a fallback, a process the kubelet runs directly. Either
   way the kubelet waits only for an answer line or the launcher's exit, and no pipe of
   the kubelet's reaches the runtime or the container (linux-runtime-facts.md 3.1).
2. The daemon calls setsid(), makes itself a child subreaper, creates the stdout/stderr pipes
   (or, with a tty, a console socket that receives the pty master) and runs
   `<runtime> run -d` with those as the container's stdio. When the runtime exits, the
   container's init is reparented to the daemon, which can therefore wait() for it.
3. It writes `started` (pid, /proc start time, memory cgroup) into the instance directory,
   then copies the streams into the CRI log file (`<RFC3339Nano> stdout|stderr F|P <line>`,
   lines longer than 16 KiB split into `P` chunks as containerd does), serves `attach`
   clients on `attach.sock`, and when the init exits writes `exit` (exit code, 128+signal
   for signals, OOM kill seen in the memory cgroup, finish time) and exits itself.

crun on a hybrid cgroup host: with `hide-cgroup2=1` the runtime is exec'd in a private mount
namespace with the cgroup2 mount hidden (linux-runtime-facts.md 3.2, fix B, done here with
syscalls instead of `unshare`+`sh`, an empty tmpfs mounted over it instead of an unmount), and
with `cgroup=` paths the runtime process first moves itself into the container's (already
prepared) cgroups (by their `tasks` files: see `join_cgroup`), so crun can run with
`--cgroup-manager=disabled`.

Attach protocol on `attach.sock` (frames: 1 byte type, 4 bytes big-endian length, payload):
daemon to client 1 stdout, 2 stderr, 3 exit (ASCII exit code); client to daemon 0 stdin,
4 resize (ASCII "cols rows"), 5 close stdin. The socket is bound through
`/proc/self/fd/<dirfd>/attach.sock` so long instance paths work.

`exec` mode runs `runc exec --detach` and waits for the exec'd process as its subreaper
(runc's foreground exec waits for its stdio pipes to close, which a background child can
hold open forever). `probe` runs a runtime in the foreground with the same preexec.

Files in the instance directory: `shim.log` (the shim's own stderr), `runtime.log` (the
runtime's JSON log), `pid` (the runtime's pid file), `started`, `exit`, `start-error`
(`key=value` lines, written atomically). Imports are kept to a minimum: the daemon's start-up
time is part of every container start.
"""

from __future__ import annotations

import ctypes
import os
import select
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported lazily at run time: start-up time counts
    import socket

CRI_MAX_LINE = 16 * 1024
FRAME_STDIN, FRAME_STDOUT, FRAME_STDERR, FRAME_EXIT, FRAME_RESIZE, FRAME_CLOSE = 0, 1, 2, 3, 4, 5

_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_SLAVE = 0x80000
_HIDE_FLAGS = 0x1 | 0x2 | 0x4 | 0x8  # MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
_PR_SET_CHILD_SUBREAPER = 36

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def rfc3339nano(ns: int) -> str:
    """Go's time.RFC3339Nano in UTC: nanoseconds with trailing zeros trimmed."""
    secs, frac = divmod(ns, 1_000_000_000)
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))
    if frac:
        return f"{base}.{f'{frac:09d}'.rstrip('0')}Z"
    return base + "Z"


def write_kv(path: str, values: dict[str, object]) -> None:
    """Atomically write `key=value` lines (values must not contain newlines)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for key, value in values.items():
            f.write(f"{key}={value}\n")
    os.replace(tmp, path)


def cgroup_mount(controller: str) -> str:
    """The mount point of the cgroup v1 hierarchy holding `controller` ("" if none)."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = right.split()
            if len(fields) >= 3 and fields[0] == "cgroup" and controller in fields[2].split(","):
                return left.split()[4]
    return ""


def memory_cgroup_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if "memory" in controllers.split(","):
                    mnt = cgroup_mount("memory")
                    return mnt + path if mnt else ""
    except OSError:
        pass
    return ""


def oom_kills(cgroup_dir: str) -> int:
    if not cgroup_dir:
        return 0
    try:
        with open(os.path.join(cgroup_dir, "memory.oom_control")) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def proc_start_time(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return stat[stat.rindex(")") + 2 :].split()[19]


class CriLogWriter:
    """Turns the bytes of one stream into CRI log lines in an O_APPEND file."""

    def __init__(self, fd: int, stream: str) -> None:
        self.fd = fd
        self.stream = stream.encode()
        self.buffer = b""

    def _emit(self, tag: bytes, content: bytes) -> None:
        if self.fd < 0:
            return
        stamp = rfc3339nano(time.time_ns()).encode()
        line = b"%s %s %s %s\n" % (stamp, self.stream, tag, content)
        try:
            os.write(self.fd, line)
        except OSError as err:
            print(f"shim: log write failed: {err}", file=sys.stderr)

    def feed(self, data: bytes) -> None:
        self.buffer += data
        while True:
            newline = self.buffer.find(b"\n", 0, CRI_MAX_LINE + 1)
            if newline >= 0:
                line, self.buffer = self.buffer[:newline], self.buffer[newline + 1 :]
                self._emit(b"F", line.removesuffix(b"\r"))
            elif len(self.buffer) > CRI_MAX_LINE:
                chunk, self.buffer = self.buffer[:CRI_MAX_LINE], self.buffer[CRI_MAX_LINE:]
                self._emit(b"P", chunk)
            else:
                break

    def close(self) -> None:
        # containerd writes an unterminated last line as a partial one.
        if self.buffer:
            self._emit(b"P", self.buffer)
            self.buffer = b""


def parse_options(args: list[str]) -> dict[str, list[str]]:
    options: dict[str, list[str]] = {}
    for arg in args:
        key, _, value = arg.partition("=")
        options.setdefault(key, []).append(value)
    return options


def runtime_preexec(options: dict[str, list[str]]) -> None:
    """In the forked child, before exec'ing the runtime (crun on a hybrid host)."""
    if options.get("hide-cgroup2", ["0"])[0] == "1":
        _check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _check(_libc.mount(None, b"/", None, _MS_REC | _MS_SLAVE, None), "make / rslave")
        unified = b"/sys/fs/cgroup/unified"
        if os.path.ismount(unified):
            # Covered by an empty read-only tmpfs rather than unmounted: crun tells the
            # layout by statfs, and a tmpfs there reads as no cgroup2 (legacy v1) to it
            # just the same, while an unmount waits out an RCU grace period (0.3-11 ms
            # measured here, 6 ms typical under load; a mount, 0.4 ms).
            _check(_libc.mount(b"tmpfs", unified, b"tmpfs", _HIDE_FLAGS, b"mode=0"),
                   "hide cgroup2")
    for procs in options.get("cgroup", []):
        join_cgroup(procs)


def join_cgroup(procs: str) -> None:
    """Move this (single-threaded, just forked) process into the v1 cgroup whose
    `cgroup.procs` is `procs`, through the cgroup's `tasks` file. Moving one thread by
    `tasks` skips the kernel's write lock on every thread group (`cgroup_threadgroup_rwsem`),
    whose first taking after a quiet spell waits out an RCU grace period: 12-25 ms per
    container start on these machines, against under 1 ms through `tasks`. With a single
    thread, moving the thread is moving the process. `cgroup.procs` where no `tasks` exists."""
    tasks = os.path.join(os.path.dirname(procs), "tasks")
    target = tasks if os.path.exists(tasks) else procs
    with open(target, "w") as f:
        f.write("0")


def spawn(argv: list[str], stdio: tuple[int, int, int], options: dict[str, list[str]]) -> int:
    """fork+exec with the given stdio; errors before exec go to fd 2 and exit 127."""
    pid = os.fork()
    if pid == 0:
        try:
            for target, fd in enumerate(stdio):
                os.dup2(fd, target)
            runtime_preexec(options)
            os.execv(argv[0], argv)
        except BaseException as err:
            try:
                os.write(2, f"shim: cannot run {argv[0]}: {err}\n".encode())
            finally:
                os._exit(127)
    return pid


def read_available(fd: int) -> bytes:
    os.set_blocking(fd, False)
    chunks = []
    try:
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            chunks.append(data)
    except (BlockingIOError, OSError):
        pass
    return b"".join(chunks)


def probe(options: dict[str, list[str]]) -> int:
    """Run `<runtime> ... run --bundle B ID` in the foreground with the same preexec as real
    containers; used to decide whether crun works on this host."""
    out = os.open(options["out"][0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    pid = spawn(options["argv"], (null, out, out), options)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def exec_process(options: dict[str, list[str]]) -> int:
    """`runc exec -d --pid-file F ...` with our stdio, then wait for the exec'd process as its
    subreaper and exit with its code. A foreground `runc exec` copies the process's stdio
    through its own pipes and does not exit while a background process still holds them;
    detached, the process writes straight into our stdio and we learn its exit code."""
    _check(_libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(PR_SET_CHILD_SUBREAPER)")
    runtime_pid = spawn(options["argv"], (0, 1, 2), options)
    _, status = os.waitpid(runtime_pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        return code if code > 0 else 128 - code
    with open(options["pid-file"][0]) as f:
        pid = int(f.read().strip())
    while True:
        try:
            child, status = os.waitpid(-1, 0)
        except ChildProcessError:
            print(f"shim: exec'd process {pid} is not our child", file=sys.stderr)
            return 255
        if child == pid:
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code


class Daemon:
    """The long-lived half: starts the container and supervises it until it exits."""

    def __init__(self, options: dict[str, list[str]], report_fd: int) -> None:
        self.options = options
        self.report_fd = report_fd
        self.dir = options["dir"][0]
        self.tty = options.get("tty", ["0"])[0] == "1"
        self.stdin = options.get("stdin", ["0"])[0] == "1"
        self.stdin_once = options.get("stdin-once", ["0"])[0] == "1"
        self.init_pid = 0
        self.exit_code: int | None = None
        self.signal = 0
        self.streams: dict[int, tuple[int, CriLogWriter]] = {}  # fd -> (frame type, writer)
        self.stdin_fd = -1  # where client stdin goes (pipe write end or the pty master)
        self.master_fd = -1
        self.stdin_pending = b""
        self.listener: socket.socket | None = None
        self.clients: dict[int, socket.socket] = {}  # fd -> socket
        self.client_buffers: dict[int, bytes] = {}
        self.stdin_claimed = False
        self.close_stdin_after = False

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def report(self, message: bytes) -> None:
        if self.report_fd >= 0:
            os.write(self.report_fd, message)
            os.close(self.report_fd)
            self.report_fd = -1

    def fail(self, message: str) -> int:
        write_kv(self.path("start-error"), {"message": " ".join(message.split())})
        self.report(b"error")
        return 1

    def run(self) -> int:
        _check(_libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(PR_SET_CHILD_SUBREAPER)")
        opts = self.options
        log_path = opts["log"][0]
        if os.path.dirname(log_path):
            os.makedirs(os.path.dirname(log_path), exist_ok=True)
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640)
        null_fd = os.open(os.devnull, os.O_RDWR)
        argv = [opts["runtime"][0], "--root", opts["state"][0], "--log", self.path("runtime.log"),
                "--log-format", "json", *opts.get("global", []), "run", "-d", "--bundle", self.dir,
                "--pid-file", self.path("pid")]
        console = None
        stdin_r = null_fd
        if self.stdin and not self.tty:
            stdin_r, self.stdin_fd = os.pipe()
        if self.tty:
            import socket  # only tty containers pay for it
            import tempfile

            sock_dir = tempfile.mkdtemp(prefix="eph-console-")
            console = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            console.bind(os.path.join(sock_dir, "c.sock"))
            console.listen(1)
            argv += ["--console-socket", os.path.join(sock_dir, "c.sock")]
            err_fd = os.open(self.path("runtime.stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            stdio = (null_fd, err_fd, err_fd)
        else:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            stdio = (stdin_r, out_w, err_w)
            self.streams[out_r] = (FRAME_STDOUT, CriLogWriter(log_fd, "stdout"))
            self.streams[err_r] = (FRAME_STDERR, CriLogWriter(log_fd, "stderr"))
        runtime_pid = spawn([*argv, opts["id"][0]], stdio, opts)
        for fd in set(stdio):
            if fd != null_fd:
                os.close(fd)
        if console is not None:
            error = self.receive_console(console, runtime_pid)
            console_path = console.getsockname()
            console.close()
            os.unlink(console_path)
            os.rmdir(os.path.dirname(console_path))
            if error:
                os.waitpid(runtime_pid, 0)
                return self.fail(error)
            self.streams[self.master_fd] = (FRAME_STDOUT, CriLogWriter(log_fd, "stdout"))
            if self.stdin:
                self.stdin_fd = self.master_fd
        _, status = os.waitpid(runtime_pid, 0)
        rc = os.waitstatus_to_exitcode(status)
        if rc != 0:
            text = b"".join(read_available(fd) for fd in self.streams)
            if self.tty:
                with open(self.path("runtime.stderr"), "rb") as f:
                    text += f.read()
            return self.fail(f"{opts['runtime'][0]} run exited with {rc}: "
                             + text.decode(errors="replace"))
        with open(self.path("pid")) as f:
            self.init_pid = int(f.read().strip())
        try:
            pidfd = os.pidfd_open(self.init_pid)
            start_time = proc_start_time(self.init_pid)
        except OSError as err:  # exited already: still ours to reap
            pidfd, start_time = -1, "0"
            print(f"shim: init {self.init_pid} gone early: {err}", file=sys.stderr)
        # Given by the kubelet: reading /proc/<pid>/cgroup races with an init that dies at once.
        memory_cgroup = opts.get("memory-cgroup", [""])[0] or memory_cgroup_of(self.init_pid)
        write_kv(self.path("started"), {
            "pid": self.init_pid, "start_time": start_time, "shim_pid": os.getpid(),
            "started_at": time.time(), "memory_cgroup": memory_cgroup,
        })
        self.report(b"ok")
        os.close(null_fd)
        self.listen_attach()
        self.supervise(pidfd)
        for _, writer in self.streams.values():
            writer.close()
        assert self.exit_code is not None
        write_kv(self.path("exit"), {
            "exit_code": self.exit_code, "signal": self.signal, "finished_at": time.time(),
            "oom_killed": 1 if oom_kills(memory_cgroup) else 0,
        })
        for fd in list(self.clients):
            self.send(fd, FRAME_EXIT, str(self.exit_code).encode())
            self.drop_client(fd)
        return 0

    def receive_console(self, console: socket.socket, runtime_pid: int) -> str:
        import socket

        pidfd = os.pidfd_open(runtime_pid)
        ready, _, _ = select.select([console.fileno(), pidfd], [], [], 30)
        os.close(pidfd)
        if console.fileno() not in ready:
            return "the runtime did not send a console" + (" (it exited)" if ready else "")
        conn, _ = console.accept()
        _, fds, _, _ = socket.recv_fds(conn, 1024, 1)
        conn.close()
        if not fds:
            return "the runtime sent no console fd"
        self.master_fd = fds[0]
        return ""

    def listen_attach(self) -> None:
        import socket

        dir_fd = os.open(self.dir, os.O_PATH | os.O_DIRECTORY)
        try:
            sock_path = f"/proc/self/fd/{dir_fd}/attach.sock"
            if os.path.exists(sock_path):
                os.unlink(sock_path)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(sock_path)
        finally:
            os.close(dir_fd)
        listener.listen(8)
        listener.setblocking(False)
        self.listener = listener

    def send(self, fd: int, kind: int, payload: bytes) -> None:
        sock = self.clients.get(fd)
        if sock is None:
            return
        try:
            sock.sendall(bytes([kind]) + len(payload).to_bytes(4, "big") + payload)
        except OSError:
            self.drop_client(fd)

    def drop_client(self, fd: int) -> None:
        sock = self.clients.pop(fd, None)
        self.client_buffers.pop(fd, None)
        if sock is not None:
            sock.close()
            if self.stdin_once and self.stdin_claimed and self.stdin_fd >= 0 and not self.tty:
                os.close(self.stdin_fd)
                self.stdin_fd = -1

    def client_frames(self, fd: int, data: bytes) -> None:
        buffer = self.client_buffers.get(fd, b"") + data
        while len(buffer) >= 5:
            length = int.from_bytes(buffer[1:5], "big")
            if len(buffer) < 5 + length:
                break
            kind, payload, buffer = buffer[0], buffer[5 : 5 + length], buffer[5 + length :]
            if kind == FRAME_STDIN and self.stdin_fd >= 0:
                self.stdin_claimed = True
                self.stdin_pending += payload
            elif kind == FRAME_CLOSE and self.stdin_fd >= 0 and not self.tty:
                self.stdin_claimed = True
                self.close_stdin_after = True  # once the pending data is written
            elif kind == FRAME_RESIZE and self.master_fd >= 0:
                import fcntl
                import struct
                import termios

                cols, rows = (int(x) for x in payload.split())
                size = struct.pack("HHHH", rows, cols, 0, 0)
                fcntl.ioctl(self.master_fd, termios.TIOCSWINSZ, size)
        self.client_buffers[fd] = buffer

    def flush_stdin(self) -> None:
        if self.stdin_pending and self.stdin_fd >= 0:
            try:
                written = os.write(self.stdin_fd, self.stdin_pending)
                self.stdin_pending = self.stdin_pending[written:]
            except BlockingIOError:
                pass
            except OSError:
                self.stdin_pending = b""
        if self.close_stdin_after and not self.stdin_pending and self.stdin_fd >= 0:
            os.close(self.stdin_fd)
            self.stdin_fd = -1

    def supervise(self, pidfd: int) -> None:
        """Copy streams and serve attach clients until the init has exited and its streams
        are drained (at most 2 s after the exit: anything still holding them is gone with the
        pid namespace)."""
        if self.stdin_fd >= 0 and self.stdin_fd != self.master_fd:
            os.set_blocking(self.stdin_fd, False)
        if pidfd < 0:
            self.reap()
        drain_deadline = 0.0
        poller = select.poll()
        for fd in self.streams:
            poller.register(fd, select.POLLIN)
        if pidfd >= 0:
            poller.register(pidfd, select.POLLIN)
        listener = self.listener
        assert listener is not None
        listener_fd = listener.fileno()
        poller.register(listener_fd, select.POLLIN)
        while self.streams or self.exit_code is None:
            if self.exit_code is not None and not drain_deadline:
                drain_deadline = time.monotonic() + 2.0
            if drain_deadline and time.monotonic() > drain_deadline:
                break
            stdin_wait = (bool(self.stdin_pending) and self.stdin_fd >= 0
                          and self.stdin_fd != self.master_fd)
            if stdin_wait:
                poller.register(self.stdin_fd, select.POLLOUT)
            events = poller.poll(200 if drain_deadline else 1000)
            if stdin_wait:
                poller.unregister(self.stdin_fd)
            if not events:
                self.reap()  # intermediate runtime processes reparented to us
            for fd, _ in events:
                if fd == pidfd:
                    poller.unregister(pidfd)
                    os.close(pidfd)
                    pidfd = -1
                    self.reap()
                elif fd in self.streams:
                    try:
                        data = os.read(fd, 65536)
                    except OSError:  # EIO from a pty master once the container is gone
                        data = b""
                    kind, writer = self.streams[fd]
                    if data:
                        writer.feed(data)
                        for client in list(self.clients):
                            self.send(client, kind, data)
                    else:
                        poller.unregister(fd)
                        del self.streams[fd]
                        writer.close()
                        if fd != self.master_fd:
                            os.close(fd)
                elif fd == listener_fd:
                    try:
                        sock, _ = listener.accept()
                    except BlockingIOError:
                        continue
                    sock.settimeout(2.0)
                    self.clients[sock.fileno()] = sock
                    poller.register(sock.fileno(), select.POLLIN)
                elif fd in self.clients:
                    try:
                        data = self.clients[fd].recv(65536)
                    except OSError:
                        data = b""
                    if data:
                        self.client_frames(fd, data)
                    else:
                        poller.unregister(fd)
                        self.drop_client(fd)
            self.flush_stdin()
            if self.exit_code is None and pidfd < 0:
                self.reap()

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid, status = 0, 0
            if pid == 0:
                break
            if pid == self.init_pid:
                code = os.waitstatus_to_exitcode(status)
                self.signal = -code if code < 0 else 0
                self.exit_code = 128 + self.signal if code < 0 else code
        gone = not os.path.exists(f"/proc/{self.init_pid}")
        if self.exit_code is None and self.init_pid and gone:
            # Not our child after all (should not happen); the exit code is lost.
            self.exit_code = 255



def _error_text(err: BaseException) -> str:
    """An error as Go's os errors read (`/x: no such file or directory`), never a Python
    repr: it becomes the container's status message. (`ephemera.api.goformat.go_error_text`
    is the rule; the shim runs without the package, so it keeps this copy.)"""
    if isinstance(err, OSError) and err.strerror:
        text = err.strerror[:1].lower() + err.strerror[1:]
        return f"{err.filename}: {text}" if err.filename else text
    return str(err) or type(err).__name__

def start(options: dict[str, list[str]]) -> int:
    """The launcher: fork the daemon, exit 0 once it reports the container started, else 1."""
    report_r, report_w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(report_w)
        answer = os.read(report_r, 16)
        os._exit(0 if answer == b"ok" else 1)  # no interpreter teardown: the kubelet waits
    os.close(report_r)
    os.setsid()
    os.chdir("/")
    try:
        code = Daemon(options, report_w).run()
    except BaseException as err:  # report anything rather than leaving the launcher hanging
        import traceback

        traceback.print_exc()
        try:
            write_kv(os.path.join(options["dir"][0], "start-error"),
                     {"message": " ".join(f"shim: {_error_text(err)}".split())})
            os.write(report_w, b"error")
        except OSError:
            pass
        code = 1
    os._exit(code)


def serve(options: dict[str, list[str]]) -> int:
    """The fork server: one per runtime instance, so that starting a container does not pay
    for a new interpreter. Requests arrive on the socket `fd=` as lines of NUL-separated
    `start` options; for each, a forked child redirects its stdio to the instance's
    `shim.log` and runs `start` (so the daemon is this server's grandchild, reparented to
    init once the launcher exits); the answer line is `ok` or `error`. Raw fds only: the
    children close the socket before anything else and never touch it again. The server
    exits when the kubelet closes the socket (or dies)."""
    sock = int(options["fd"][0])
    buffer = b""
    while True:
        newline = buffer.find(b"\n")
        if newline < 0:
            data = os.read(sock, 65536)
            if not data:
                return 0
            buffer += data
            continue
        line, buffer = buffer[:newline], buffer[newline + 1 :]
        request = parse_options(line.decode().split("\0"))
        pid = os.fork()
        if pid == 0:
            try:
                os.close(sock)
                log = os.open(os.path.join(request["dir"][0], "shim.log"),
                              os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                os.dup2(log, 1)
                os.dup2(log, 2)
                os.close(log)
                start(request)
            finally:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        os.write(sock, b"ok\n" if os.waitstatus_to_exitcode(status) == 0 else b"error\n")


def main(argv: list[str]) -> int:
    modes = {"start": start, "probe": probe, "exec": exec_process, "serve": serve}
    if len(argv) < 2 or argv[1] not in modes:
        print("usage: shim.py start|probe|exec|serve key=value...", file=sys.stderr)
        return 2
    return modes[argv[1]](parse_options(argv[2:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
