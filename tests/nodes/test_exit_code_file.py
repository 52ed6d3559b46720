"""The exit code the launcher leaves in the job's own directory is read only as a plain file:
the job's user owns that directory and may leave anything there under the name."""

from __future__ import annotations

import os
import threading

from nodes.processes import EXIT_FILE, recorded_exit_code


def test_a_plain_exit_code_file_is_read(tmp_path):
    (tmp_path / EXIT_FILE).write_text("3\n")
    assert recorded_exit_code(tmp_path) == 3


def test_an_exit_code_file_that_is_a_fifo_does_not_block_the_agent(tmp_path):
    os.mkfifo(tmp_path / EXIT_FILE)
    done: list[int | None] = []
    reader = threading.Thread(target=lambda: done.append(recorded_exit_code(tmp_path)), daemon=True)
    reader.start()
    reader.join(3)
    blocked = reader.is_alive()
    if blocked:  # release it so the test ends, then fail
        with open(tmp_path / EXIT_FILE, "w"):
            pass
        reader.join(5)
    assert not blocked
    assert done == [None]


def test_an_exit_code_file_that_is_a_link_is_not_followed(tmp_path):
    (tmp_path / "elsewhere").write_text("7")
    (tmp_path / EXIT_FILE).symlink_to(tmp_path / "elsewhere")
    assert recorded_exit_code(tmp_path) is None
