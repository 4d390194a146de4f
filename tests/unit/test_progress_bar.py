"""Progress bars are drawn on a terminal only (operability: issue 15, item 5)."""

from __future__ import annotations

import io
import os


def _read_all(fd: int) -> str:
    """Everything written to the terminal so far (one read may return only a part)."""
    import select

    out = b""
    while select.select([fd], [], [], 0.5)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the terminal's other end is closed and drained
            break
        if not chunk:
            break
        out += chunk
    return out.decode()


def test_a_bar_draws_on_a_terminal_and_stays_silent_on_a_pipe():
    from ttl.bars import bar, move_to

    master, slave = os.openpty()
    with os.fdopen(slave, "w") as terminal:
        with bar(200, "restore x: reading", file=terminal) as shown:
            move_to(shown, 150)
            move_to(shown, 100)  # never backwards
            assert shown.n == 150
        drawn = _read_all(master)
    os.close(master)
    assert "restore x: reading" in drawn and "150/200" in drawn
    piped = io.StringIO()
    with bar(200, "restore x: reading", file=piped) as silent:
        move_to(silent, 200)
    assert piped.getvalue() == ""
