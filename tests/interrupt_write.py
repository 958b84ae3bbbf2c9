"""interrupt_write — send a signal to a command while it writes OUT.tmp, at a point the test knows.

OUT.tmp is made a FIFO before the command starts: the command opens it as its output (O_CREAT on an
existing FIFO opens the FIFO), its first bytes prove it is past creating the file, and since the
test reads no more, the command then blocks once the pipe is full. The signal lands there, in the
middle of the write, every time."""
import os, select, signal, subprocess, time


def interrupt_while_writing(argv, tmp_path, sig=signal.SIGINT, timeout=120):
    """Run argv with tmp_path a FIFO, send sig once it has written to it. Returns (returncode,
    stderr, leftover): returncode is -sig when the signal ended it; leftover tells whether tmp_path
    is still there afterwards."""
    os.mkfifo(tmp_path)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_NONBLOCK)  # the command's open then does not block
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
    try:
        deadline, got = time.monotonic() + timeout, b""
        while not got and p.poll() is None and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    got = os.read(fd, 16)
                except BlockingIOError:
                    pass
        if got and p.poll() is None:
            p.send_signal(sig)
        _, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(fd)
    leftover = os.path.lexists(tmp_path)
    if leftover:
        os.unlink(tmp_path)
    return p.returncode, err.decode(errors="replace"), leftover
