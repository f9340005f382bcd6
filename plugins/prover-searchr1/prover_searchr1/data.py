"""Search-R1's question files, read into searchqa-sim's ``Question`` records.

Two layouts are read, by file extension:

* ``.parquet``: Search-R1's processed rows (scripts/data_process/qa_search_*.py): ``data_source``,
  ``prompt`` ([{role, content}], the instruction prefix ending in ``Question: {q}``), ``ability``,
  ``reward_model`` ({style: "rule", ground_truth: {target: [gold answers]}}), ``extra_info``, and,
  kept from the source rows, ``id``, ``question`` and ``golden_answers``. Needs pyarrow.
* ``.jsonl``: FlashRAG's rows, which Search-R1 processes: ``id``, ``question``, ``golden_answers``
  (``data_source`` if present, else the folder's name, e.g. ``nq`` for ``FlashRAG_datasets/nq/``).

The question comes from ``question`` (else from the prompt's text after its last ``Question:``) and
gets a ``?`` when it lacks one, as Search-R1 does; the gold answers from ``golden_answers`` (else
``reward_model.ground_truth.target``). A missing, unreadable or malformed file is one ConfigError
line that names the file (and the line or row).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from prover.envs.searchqa_sim.questions import Question
from prover.errors import ConfigError

SPLIT_FILES = {"train": ("train.parquet", "train.jsonl"), "test": ("test.parquet", "test.jsonl")}
PARQUET_COLUMNS = ("id", "question", "golden_answers", "data_source", "prompt", "reward_model")


def find_file(folder: Path, split: str, name: str | None) -> Path | None:
    """The question file of ``split``: ``name`` (relative to ``folder``, or absolute) when given, which
    must exist; else the first of Search-R1's usual names that exists, or None."""
    if name is not None:
        path = Path(name).expanduser()
        path = path if path.is_absolute() else folder / path
        if not path.is_file():
            raise ConfigError(f"searchr1: {split} question file {str(path)!r} does not exist")
        return path
    return next((folder / n for n in SPLIT_FILES[split] if (folder / n).is_file()), None)


def _read_jsonl(path: Path) -> list[tuple[int, Any]]:
    """(line number, parsed row) for every non-blank line."""
    rows = []
    try:
        with path.open(encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append((line_no, json.loads(line)))
                    except json.JSONDecodeError as exc:
                        raise ConfigError(f"searchr1: {str(path)!r} line {line_no} is not valid JSON "
                                          f"({exc.msg}, column {exc.colno})") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"searchr1: cannot read question file {str(path)!r}: {exc}") from exc
    return rows


def _read_parquet(path: Path) -> list[tuple[int, Any]]:
    """(row number, row as a dict) for every row; only the columns the env reads are loaded."""
    try:
        import pyarrow.parquet as pq  # lazily: only .parquet files need it
    except ImportError as exc:
        raise ConfigError(f"searchr1: reading {str(path)!r} needs pyarrow; pip install "
                          "'prover-searchr1[parquet]', or give the questions as .jsonl") from exc
    try:
        names = set(pq.read_schema(path).names)
        table = pq.read_table(path, columns=[c for c in PARQUET_COLUMNS if c in names])
        return list(enumerate(table.to_pylist()))
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ... for a damaged file
        raise ConfigError(f"searchr1: {str(path)!r} is not a readable parquet file "
                          f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from exc


def _question_text(row: dict) -> str | None:
    text = row.get("question")
    if isinstance(text, str) and text.strip():
        return text
    prompt = row.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        content = str(prompt[-1].get("content", ""))
        if "Question:" in content:
            return content.rsplit("Question:", 1)[1]
    return None


def _answers(row: dict) -> Any:
    if row.get("golden_answers") is not None:
        return row["golden_answers"]
    try:
        return row["reward_model"]["ground_truth"]["target"]
    except (KeyError, TypeError):
        return None


def to_question(row: Any, split: str, index: int, default_source: str, where: str) -> Question:
    if not isinstance(row, dict):
        raise ConfigError(f"searchr1: {where} is a {type(row).__name__}, not an object; "
                          "is it Search-R1's schema?")
    text = _question_text(row)
    if text is None:
        raise ConfigError(f"searchr1: {where} has no 'question' (nor a prompt with 'Question:')")
    answers = _answers(row)
    answers = [answers] if isinstance(answers, (str, int, float)) else answers
    if not isinstance(answers, list) or not answers:
        raise ConfigError(f"searchr1: {where} has no gold answers ('golden_answers' or "
                          "reward_model.ground_truth.target)")
    text = text.strip()
    text = text if text.endswith("?") else text + "?"  # Search-R1's processing
    source = str(row.get("data_source") or default_source)
    return Question(qid=f"{split}/{index}", text=text, kind=source, answers=tuple(str(a) for a in answers),
                    hops=(), source=source)


def load_questions(path: Path, split: str) -> tuple[Question, ...]:
    """Every question in ``path``, read once per process while the file is unchanged."""
    st = path.stat()
    return _load(str(path.resolve()), st.st_mtime_ns, st.st_size, split)


@lru_cache(maxsize=8)
def _load(path_str: str, mtime_ns: int, size: int, split: str) -> tuple[Question, ...]:
    path = Path(path_str)
    if path.suffix == ".parquet":
        rows, unit = _read_parquet(path), "row"
    elif path.suffix == ".jsonl":
        rows, unit = _read_jsonl(path), "line"
    else:
        raise ConfigError(f"searchr1: {path_str!r} is neither .parquet nor .jsonl")
    if not rows:
        raise ConfigError(f"searchr1: question file {path_str!r} holds no questions")
    return tuple(to_question(row, split, i, path.parent.name, f"{path_str!r} {unit} {number}")
                 for i, (number, row) in enumerate(rows))
