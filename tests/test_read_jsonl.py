"""The one reader of the JSON-lines files a program leaves in its run folder (marks, windows,
events, samples): never blocks, never follows a link, passes over lines cut short."""
from __future__ import annotations

import os
from pathlib import Path

from gpuscope.fileio import read_jsonl


def test_lines_cut_short_and_non_objects_are_passed_over(tmp_path: Path) -> None:
    f = tmp_path / "marks.jsonl"
    f.write_bytes(b'{"a": 1}\n[1, 2]\nnot json\n{"b": 2}\n{"c": 3')
    assert read_jsonl(f) == [{"a": 1}, {"b": 2}]  # after the writer ended, a whole last line would count
    f.write_bytes(b'{"a": 1}\n{"b": 2}')
    assert read_jsonl(f) == [{"a": 1}, {"b": 2}]
    assert read_jsonl(f, live=True) == [{"a": 1}]  # still being written: left for the next read


def test_a_fifo_a_link_or_a_folder_in_its_place_reads_as_no_lines(tmp_path: Path) -> None:
    fifo = tmp_path / "marks.jsonl"
    os.mkfifo(fifo)  # read_text() here would wait forever for a writer
    assert read_jsonl(fifo) == []
    real = tmp_path / "elsewhere.jsonl"
    real.write_text('{"secret": 1}\n')
    link = tmp_path / "windows.jsonl"
    link.symlink_to(real)
    assert read_jsonl(link) == []
    (tmp_path / "profiler.jsonl").mkdir()
    assert read_jsonl(tmp_path / "profiler.jsonl") == [] and read_jsonl(tmp_path / "missing.jsonl") == []
