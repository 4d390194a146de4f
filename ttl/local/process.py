"""Child processes for local services: they never outlive the Python process that started
them, listen on free loopback ports, and can be held in the foreground until Ctrl-C."""

from __future__ import annotations

import ctypes
import signal
import socket
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def die_with_parent() -> None:
    """``preexec_fn`` of a child: ask the kernel to SIGKILL it when the parent dies, so a
    ``kill -9`` of the Python process leaves no JVM behind. "The parent" is the *thread*
    that started the child: start long-lived children from a thread that outlives them
    (the main thread), or they die when it ends."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def hold_in_foreground(banner: str, stop: Callable[[], None],
                       echo: Callable[[str], None] = print) -> None:
    """Print how to reach a local service, hold until SIGTERM or Ctrl-C, then stop it."""
    echo(f"{banner}  (Ctrl-C stops)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        stop()
