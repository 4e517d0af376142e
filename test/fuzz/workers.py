"""Worker processes: each program runs in a child, so a crash or a hang
costs one program, not the campaign.

A worker (`python workers.py --serve LOG`) imports torch and dynafuse once
and answers jobs read from stdin: ("generate", seed, index, mode) or
("program", Program), each answered on stdout with an oracle.Outcome (length-
prefixed pickles). Its stderr goes to LOG, truncated at each job, so the log
holds the current program's compiler log (graph_breaks) and, after a
crash, faulthandler's traceback. The parent's `Pool` hands out jobs,
enforces the per-job timeout (SIGKILL: `hang`), turns a worker's death into
a `crash` of its job, and starts a fresh worker in its place.
"""
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
#: Jobs a worker runs before it is replaced (bounds what leaks across programs).
RECYCLE_AFTER = 400
STARTUP_TIMEOUT = 180
#: Failed starts in a row (say, while the extension is being relinked) before
#: the pool gives up, and the pause between them.
START_ATTEMPTS = 6
START_PAUSE = 30


def _send(stream, message):
    data = pickle.dumps(message)
    stream.write(struct.pack("<I", len(data)) + data)
    stream.flush()


def _read_exactly(fd, count):
    chunks = []
    while count:
        chunk = os.read(fd, count)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def _receive(fd):
    (length,) = struct.unpack("<I", _read_exactly(fd, 4))
    return pickle.loads(_read_exactly(fd, length))


def serve(log_path):
    """The worker's loop (runs in the child)."""
    import faulthandler
    import warnings
    protocol = os.fdopen(os.dup(1), "wb")
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    faulthandler.enable()
    warnings.simplefilter("ignore")
    sys.path.insert(0, HERE)
    import dynafuse  # noqa: F401 - imported once, before the first job
    import oracle
    import programs
    dynafuse.config.log = "graph_breaks"
    reader = open(log_path, "r", errors="replace")
    _send(protocol, "ready")
    while True:
        try:
            job = _receive(0)
        except EOFError:
            return
        os.ftruncate(log_fd, 0)
        reader.seek(0)
        try:
            program = (programs.generate(*job[1:]) if job[0] == "generate" else job[1])
            sys.stderr.write(f"fuzz worker: {program.tag}\n")
            sys.stderr.flush()
            reader.seek(0, os.SEEK_END)
            outcome = oracle.check(program, read_log=reader.read)
        except Exception:  # noqa: BLE001 - a fuzzer bug, reported as such
            outcome = oracle.Outcome("harness_error", traceback.format_exc()[-2000:])
        _send(protocol, outcome)


class Worker:
    """One child process and the job it is running."""

    def __init__(self, number, log_dir):
        self.log = os.path.join(log_dir, f"worker-{number}.log")
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--serve", self.log],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=HERE)
        self.fd = self.process.stdout.fileno()
        self.job = None           # (key, message) while running one
        self.deadline = time.monotonic() + STARTUP_TIMEOUT
        self.ready = False
        self.done = 0

    def start(self, key, message, timeout):
        self.job = (key, message)
        self.deadline = time.monotonic() + timeout
        _send(self.process.stdin, message)

    def log_tail(self, lines=25):
        try:
            with open(self.log, errors="replace") as log:
                return "".join(log.readlines()[-lines:])
        except OSError:
            return ""

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def _death(worker):
    code = worker.process.wait()
    name = signal.Signals(-code).name if code < 0 and -code in signal.Signals._value2member_map_ else f"exit {code}"
    return name


class Pool:
    """`workers` persistent workers; `run(jobs)` yields (key, Outcome) as
    jobs finish, in completion order. A job is (key, message)."""

    def __init__(self, workers=2, timeout=60.0, log_dir="/tmp"):
        import oracle
        self.oracle = oracle
        self.size = workers
        self.timeout = timeout
        self.log_dir = log_dir
        os.makedirs(log_dir, exist_ok=True)
        self.workers = [Worker(n, log_dir) for n in range(workers)]
        self.failed_starts = 0

    def _failed_start(self, worker, why):
        """A worker that died or stalled before its first job: retried after
        a pause (the extension may be mid-relink), then an error."""
        tail = worker.log_tail()
        self.failed_starts += 1
        if self.failed_starts >= START_ATTEMPTS:
            raise RuntimeError(f"fuzz workers fail to start ({why}):\n{tail}")
        time.sleep(START_PAUSE)
        self._replace(worker)

    def _replace(self, worker):
        worker.stop()
        index = self.workers.index(worker)
        self.workers[index] = Worker(index, self.log_dir)

    def run(self, jobs):
        pending = list(jobs)[::-1]
        while pending or any(w.job for w in self.workers):
            for worker in self.workers:
                if worker.ready and worker.job is None and pending:
                    worker.start(*pending.pop(), self.timeout)
            waiting = [w for w in self.workers if w.job or not w.ready]
            now = time.monotonic()
            wait = max(0.0, min(w.deadline for w in waiting) - now)
            readable, _, _ = select.select([w.fd for w in waiting], [], [], wait)
            for worker in list(waiting):
                result = self._poll(worker, worker.fd in readable)
                if result is not None:
                    yield result

    def _poll(self, worker, readable):
        """A finished (key, Outcome) from this worker, or None."""
        Outcome = self.oracle.Outcome
        if readable:
            try:
                message = _receive(worker.fd)
            except EOFError:
                signal_name = _death(worker)
                tail = worker.log_tail()
                job = worker.job
                if job is None:
                    self._failed_start(worker, signal_name)
                    return None
                self._replace(worker)
                return job[0], Outcome("crash", f"worker died: {signal_name}\n{tail}")
            if message == "ready":
                worker.ready = True
                self.failed_starts = 0
                return None
            key = worker.job[0]
            worker.job = None
            worker.done += 1
            if worker.done >= RECYCLE_AFTER:
                self._replace(worker)
            return key, message
        if time.monotonic() < worker.deadline:
            return None
        job = worker.job
        if job is None:
            self._failed_start(worker, f"no answer in {STARTUP_TIMEOUT}s")
            return None
        tail = worker.log_tail()
        self._replace(worker)
        return job[0], Outcome("hang", f"no answer in {self.timeout:.0f}s\n{tail}")

    def check(self, program):
        """One program's Outcome (used by the shrinker)."""
        for _, outcome in self.run([(0, ("program", program))]):
            return outcome
        raise AssertionError("unreachable")

    def close(self):
        for worker in self.workers:
            try:
                worker.process.stdin.close()
            except OSError:
                pass
        for worker in self.workers:
            try:
                worker.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                worker.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


if __name__ == "__main__" and sys.argv[1:2] == ["--serve"]:
    serve(sys.argv[2])
