"""A long run's log repeats its signatures: read once per distinct one, and what is read is unchanged.

The log comes from a real program under ``jaxdiag.jit`` (several functions recompiling
for a batch axis, a Python scalar, a static argument, a dtype), repeated as a long
run or many restarts would write it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxdiag.recording.advice import advise, with_explanations
from jaxdiag.recording.log_reader import CompileLog, read_compile_log
from jaxdiag.recording.records import CompileRecord
from jaxdiag.render.compiles_table import function_rows, render, to_json

PROGRAM = r"""
import functools
import jax, jax.numpy as jnp
import jaxdiag

@jaxdiag.jit
def train_step(w, x, y, lr):
    return w - lr * jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)

@functools.partial(jaxdiag.jit, static_argnames=("mode",))
def evaluate(w, x, mode):
    return jnp.mean(x @ w) if mode == "mean" else jnp.max(x @ w)

w = jnp.zeros((8, 2))
for batch in (4, 6, 4, 3):
    x, y = jnp.ones((batch, 8)), jnp.ones((batch, 2))
    w = train_step(w, x, y, 0.1)
    w = train_step(w, x, y, jnp.float32(0.1))
    w = train_step(w.astype(jnp.bfloat16), x.astype(jnp.bfloat16), y.astype(jnp.bfloat16), 0.1).astype(jnp.float32)
    for mode in ("mean", "max", "min"):
        evaluate(w, x, mode)
"""


@pytest.fixture(scope="module")
def real_lines(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    folder = tmp_path_factory.mktemp("log")
    env = {**os.environ, "JAXDIAG_LOG_DIR": str(folder), "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, "-c", PROGRAM], env=env, check=True, timeout=300)
    lines = [ln for f in sorted(folder.glob("compiles*.jsonl")) for ln in f.read_text().splitlines() if ln]
    assert len({json.loads(ln)["function"] for ln in lines}) == 2
    assert any(json.loads(ln).get("explanation") for ln in lines)
    return lines


def _repeated(lines: list[str], rounds: int) -> list[str]:
    """``lines`` again ``rounds`` times, each round later, as restarts of the program append them."""
    base = [json.loads(ln) for ln in lines]
    span = max(r["time_unix"] for r in base) - min(r["time_unix"] for r in base) + 1.0
    return [json.dumps({**r, "time_unix": r["time_unix"] + k * span}) for k in range(rounds) for r in base]


def _plain(lines: list[str]) -> CompileLog:
    """The log as each line read on its own would give it (no sharing between lines)."""
    records = sorted((CompileRecord.from_dict(json.loads(ln)) for ln in lines), key=lambda r: r.time_unix)
    return CompileLog(tuple(records), ())


def test_records_equal_those_read_line_by_line(tmp_path: Path, real_lines: list[str]) -> None:
    lines = _repeated(real_lines, 20)
    path = tmp_path / "compiles.jsonl"
    path.write_text("\n".join(lines) + "\n")
    log = read_compile_log(path)
    assert log.skipped_lines == ()
    assert log.records == _plain(lines).records


def test_table_and_json_equal_those_of_records_read_line_by_line(tmp_path: Path, real_lines: list[str]) -> None:
    """What ``jaxdiag compiles`` prints (text and --json) is what the records read one by one give."""
    lines = _repeated(real_lines, 5)
    path = tmp_path / "compiles.jsonl"
    path.write_text("\n".join(lines) + "\n")
    plain = _plain(lines)
    records = with_explanations(plain.records)
    expected_log = CompileLog(records, (str(path),))
    expected_json = to_json(expected_log, advise(records))
    expected_text = render(expected_log, advise(records), width=200, color=False)
    env = {**os.environ, "COLUMNS": "200"}
    run = [sys.executable, "-m", "jaxdiag", "compiles", str(path)]
    out_json = subprocess.run([*run, "--json"], capture_output=True, text=True, env=env, check=True, timeout=300)
    out_text = subprocess.run(
        [*run, "--width", "200"], capture_output=True, text=True, env=env, check=True, timeout=300
    )
    assert json.loads(out_json.stdout) == expected_json
    assert out_text.stdout == expected_text
    assert "evaluate" in out_text.stdout and "static mode" in out_text.stdout


def test_repeated_signatures_are_held_once(tmp_path: Path, real_lines: list[str]) -> None:
    lines = _repeated(real_lines, 3)
    path = tmp_path / "compiles.jsonl"
    path.write_text("\n".join(lines) + "\n")
    records = read_compile_log(path).records
    n = len(real_lines)
    for a, b in zip(records[:n], records[n : 2 * n]):
        assert a.args is b.args and a.qualname is b.qualname
        assert a.explanation is b.explanation
        assert a.time_unix != b.time_unix


@pytest.mark.parametrize(
    ("first", "second", "reason"),
    [
        ({"shape": [4, 8]}, {"shape": [4.0, 8]}, "'shape' is not a list of integers"),
        ({"shape": [1, 8]}, {"shape": [True, 8]}, "'shape' is not a list of integers"),
        ({"dtype": "float32"}, {"dtype": 1}, "'dtype' is not text"),
        ({"committed": True}, {"committed": 1}, "'committed' is not true or false"),
    ],
)
def test_a_bad_copy_of_a_signature_already_read_is_still_refused(
    tmp_path: Path, real_lines: list[str], first: dict, second: dict, reason: str
) -> None:
    """Signatures are checked once per exact JSON text: an equal-comparing variant (``1.0``, ``true``) is not let through."""
    base = json.loads(real_lines[0])
    leaf = {"path": "args[9]", "kind": "array", "dtype": "float32", "weak_type": False}
    good = {**base, "args": [*base["args"], {**leaf, **first}]}
    bad = {**base, "time_unix": base["time_unix"] + 1, "args": [*base["args"], {**leaf, **second}]}
    path = tmp_path / "compiles.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    log = read_compile_log(path)
    assert len(log.records) == 1
    assert [(n, why) for _, n, why in log.skipped_lines] == [(2, f"args 'args[9]': {reason}")]


def _variants(base: dict) -> list[str]:
    """Lines whose argument list a reader that cuts it out of the text could misplace."""
    args = base["args"]
    text = json.dumps(base)
    other = json.dumps([{**args[0], "shape": [99, 1]}])
    rest = json.dumps({k: v for k, v in base.items() if k != "args"})
    return [
        text,
        text,  # the same list again: read from what the first gave
        text[:-1] + f', "args": {other}}}',  # a second "args" key: the later one counts
        '{"note": {"args": ' + other + ', "in_tree": "y"}, ' + text[1:],  # a nested "args" first
        '{"note\\"args": ' + other + ', "in_tree": "y", ' + rest[1:],  # a key ending in an escaped quote
        '{"note\\"args": ' + other + ', "in_tree": "y", ' + text[1:],
        text.replace(', "in_tree": ', ', "x": ' + json.dumps({"in_tree": "z"}) + ', "in_tree": ', 1),
        json.dumps({**base, "args": [{**args[0], "in_tree": "z"}, *args[1:]]}),  # "in_tree" inside the list
        json.dumps({**base, "args": [{**args[0], "label": 'x", "in_tree": "'}]}),
        json.dumps(base, separators=(",", ":")),  # no space after the colon: not cut
        rest[:-1] + ', "args": ' + json.dumps(args) + "}",  # the list last
        json.dumps({**base, "args": {"path": "args[0]"}}),  # not a list
        json.dumps({**base, "args": [{**args[0], "shape": [4.0, 1]}]}),
        json.dumps({**base, "args": [{**args[0], "shape": [4.0, 1]}]}),
        json.dumps({**base, "args": [{**args[0], "shape": [4, 1]}]}),
        text.replace('"args": [', '"args": [ ', 1),  # the same list, written with a space
        text.replace('"args": [', '"args": [NaN, ', 1),
        text.replace('"args": [', '"args": [[', 1),  # not JSON
        text[: text.index(', "in_tree": ')],  # cut short
    ]


def test_lines_read_as_each_line_decoded_whole_gives_them(tmp_path: Path, real_lines: list[str]) -> None:
    """An argument list is read apart from its line when it was met before; whatever the line holds
    (duplicate keys, an escaped quote, "in_tree" inside the list, no space, NaN), the records and
    the refusals are those of each line decoded whole and checked as a sidecar's records are."""
    from jaxdiag.recording.log_reader import records_from_dicts

    base = next(json.loads(ln) for ln in real_lines if json.loads(ln)["args"])
    lines = _variants(base)
    path = tmp_path / "compiles.jsonl"
    path.write_text("\n".join(lines) + "\n")
    log = read_compile_log(path)
    expected, refused = [], []
    for number, line in enumerate(lines, start=1):
        try:
            d = json.loads(line, parse_constant=lambda _: None)
        except ValueError:
            refused.append(number)
            continue
        got, bad = records_from_dicts([d], "x")
        expected += got
        refused += [number for _ in bad]
    assert sorted(n for _, n, _ in log.skipped_lines) == refused
    assert sorted(log.records, key=repr) == sorted(expected, key=repr)
    assert len(log.records) >= 10 and len(refused) >= 4


def test_causes_with_equal_counts_keep_the_explanations_order(tmp_path: Path, real_lines: list[str]) -> None:
    """x and y change size together: the two causes tie, and come in the explanation's order every time."""
    records = with_explanations(_plain(real_lines).records)
    row = next(r for r in function_rows(records) if r.function == "train_step")
    first = next(
        r for r in records if r.explanation and len({c.path for c in r.explanation.changes if c.what == "shape"}) > 1
    )
    tied = [c.path for c in row.causes if c.what == "shape"]
    assert len(tied) >= 2 and len({c.count for c in row.causes if c.what == "shape"}) == 1
    assert tied == list(dict.fromkeys(c.path for c in first.explanation.changes if c.what == "shape"))


#: Reads the log given in pieces with worker processes (as ``jaxdiag compiles`` does with a long log) and
#: line by line, in a fresh process (workers start only from a single-threaded one), and prints both.
IN_PIECES = r"""
import json, multiprocessing, os, sys, time
from pathlib import Path
from jaxdiag.recording import log_chunks, log_reader

path, how, piece, longest, workers = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
log_chunks.PARALLEL_MIN_BYTES, log_chunks.PIECE_BYTES, log_reader.MAX_LINE_BYTES = 0, piece, longest
here = os.getpid()
read_piece = log_chunks.read_piece
read_here = []


def in_worker(path, index, count):
    if os.getpid() == here:
        read_here.append(index)
    if os.getpid() != here and how == "a worker dies" and index == 2:
        os._exit(3)
    if os.getpid() != here and how == "workers are stuck":
        time.sleep(3600)
    return read_piece(path, index, count)


log_chunks.read_piece, log_chunks.STUCK_AFTER_S = in_worker, 0.5
skipped = []
records = log_chunks.read_chunked(path, path.stat().st_size, skipped, workers=workers)
assert records is not None, "read line by line"
deadline = time.monotonic() + 60
while multiprocessing.active_children() and time.monotonic() < deadline:
    time.sleep(0.05)
plain = []
line_by_line = log_reader.read_span(open(path, "rb"), str(path), None, plain, log_reader.LineValues())[0]
print(json.dumps({
    "pieces": [[r.to_dict() for r in records], skipped],
    "lines": [[r.to_dict() for r in line_by_line], plain],
    "workers_left": len(multiprocessing.active_children()),
    "read_here": len(read_here),
    "pieces_in_all": -(-path.stat().st_size // piece),
}))
"""


@pytest.mark.parametrize("workers", [1, 3])
@pytest.mark.parametrize("how", ["as planned", "a worker dies", "workers are stuck"])
def test_a_log_read_in_pieces_by_workers_reads_as_line_by_line(
    tmp_path: Path, real_lines: list[str], workers: int, how: str
) -> None:
    """Pieces cut at line starts, whatever lies on an edge: a line that begins on it, an over-long line
    across it, a corrupt line, blank lines, a partial last line; a worker that dies or hangs leaves its
    pieces to this process, and none is left running."""
    lines = _repeated(real_lines, 6)
    lines.insert(7, "{not json")
    lines.insert(12, "")
    long_record = {**json.loads(real_lines[0]), "in_tree": "x" * 30_000}
    lines.insert(20, json.dumps(long_record))
    text = "\n".join(lines) + "\n" + lines[3][: len(lines[3]) // 2]  # a writer cut short
    path = tmp_path / "compiles.jsonl"
    path.write_text(text)
    piece = len("\n".join(lines[:10]).encode()) + 1  # line 11 begins exactly on the first edge
    script = [sys.executable, "-c", IN_PIECES, str(path), how, str(piece), "20000", str(workers)]
    out = json.loads(subprocess.run(script, capture_output=True, text=True, check=True, timeout=300).stdout)
    assert out["pieces"] == out["lines"]
    records, skipped = out["pieces"]
    assert [(n, why) for _, n, why in skipped] == [
        (8, "not valid JSON"),
        (21, "a line longer than 20,000 bytes"),
        (len(lines) + 1, "partial last line"),
    ]
    assert len(records) == len(lines) - 3 and records[10]["time_unix"] == json.loads(lines[11])["time_unix"]
    assert out["workers_left"] == 0
    if how == "as planned":  # the workers read some of it
        assert out["read_here"] < out["pieces_in_all"]


def test_the_writer_puts_the_fields_where_the_reader_cuts(real_lines: list[str]) -> None:
    """``LineValues.decode`` reads a line's argument list and explanation apart only where the writer
    (``jsonl_sink``) puts ``in_tree`` right after ``args`` and ``cost`` right after ``explanation``:
    a writer that changed that order would make every line decode whole, slower but alike."""
    from jaxdiag.recording.log_reader import LineValues

    values = LineValues()
    with_both = [ln for ln in real_lines if json.loads(ln)["args"] and json.loads(ln).get("explanation")]
    assert with_both
    for line in with_both:
        whole, parts = values.decode(line)
        assert set(parts) == {"args", "explanation"}, list(json.loads(line))
        assert whole == {**json.loads(line), **{k: whole[k] for k in parts}}
