"""``start_load`` readies the XSpace reader before workers fork: they inherit it, nobody asks twice.

With protobuf's upb, the reader is ``contract.ColumnReader`` and jaxlib's reader is never asked;
protobuf's classes of the planes are left to the workers (this process, on which the report
waits, builds them only when it reads a task itself). Without upb, jaxlib's reader is asked once, here.

Workers are forked only from a single-threaded process, and the test process runs
jax's threads, so the case runs in a fresh interpreter.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import os, sys
    from jaxdiag import jax_internals
    from jaxdiag.trace import load, reading, schema

    log = sys.argv[2]
    asked = jax_internals.profiler._parses_in_child

    def logged(*args, **kwargs):  # forked workers inherit this, so their questions are logged too
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\\n")
        return asked(*args, **kwargs)

    jax_internals.profiler._parses_in_child = logged
    pending = load.start_load(sys.argv[1], parallel=True, workers=2)
    if os.environ.get("JAXDIAG_READER") != "profile_data":
        assert schema.message_classes.cache_info().currsize == 0  # not made here before the workers forked
    workers = pending._reading.workers
    frames = pending.result()
    print(workers, len(frames.events), os.getpid(), open(log).read().split())
    """
)


def test_the_reader_is_asked_once_before_the_workers_fork(cpu_trace_dir, tmp_path: Path, trace_backend: str) -> None:
    log = tmp_path / "asked.txt"
    log.touch()
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(cpu_trace_dir.logdir), str(log)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    workers, events, pid, asked = done.stdout.split(maxsplit=3)
    assert int(workers) >= 1 and int(events) > 0
    from jaxdiag import jax_internals

    # One question, from this process, before any worker read: each used to load the reader and ask again.
    questions = ast.literal_eval(asked)  # the list the script printed
    if jax_internals.xspace_reader() is None or trace_backend == "column":
        assert questions == []
    elif jax_internals.xspace_reader_raises():
        assert questions == [pid]
    else:  # a reader that aborts on corrupt data (jaxlib 0.8): each parse is also tried in a child first
        assert questions[:1] == [pid]
