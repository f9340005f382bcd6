"""The tutorial notebook on the site with its outputs: docs/tutorial.md and its figures under docs/img/, from one
execution of examples/notebooks/tutorial.ipynb (nbclient on an ipykernel, as tests/test_notebook.py runs it).

    python -m benchmarks.figures.notebook --render   # execute the notebook (minutes), rewrite the page
    python -m benchmarks.figures.notebook --check    # exit 1 when the page's code is not the notebook's

Markdown cells are copied (links into docs/ rewritten for the page's place), each code cell becomes a Python
block followed by what it printed (stdout, and the text of displayed values such as the progress lines) and its
images, each a PNG file beside the page's other images. stderr and the log records libraries print (warnings)
are left out. A cell that raised stops the rendering: the page shows a notebook that ran."""

from __future__ import annotations

import base64
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.figures import render_or_check
from prover.system.environment import cpu
from prover.system.files import write_atomic

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "notebooks" / "tutorial.ipynb"
PAGE = ROOT / "docs" / "tutorial.md"
IMAGES = ROOT / "docs" / "img"
IMAGE_PREFIX = "tutorial-cell-"
DOCS_LINK = re.compile(r"\]\(\.\./\.\./docs/")  # the notebook's links into docs/, from examples/notebooks/
RELATIVE_LINK = re.compile(r"\]\((?!https?://|#|mailto:)([^)]+)\)")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# a library's log record printed to stdout ("[2026-12-06 02:23:26,710] [WARNING] [file.py:213:name] ..."): as
# stderr, not what the notebook shows
LOG_RECORD = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] \[[A-Z]+\] .*\n?", flags=re.M)


@dataclass
class Rendered:
    """The page's Markdown and its images (file name -> PNG bytes)."""

    markdown: str
    images: dict[str, bytes] = field(default_factory=dict)


def page_links(source: str, cell: int) -> str:
    """A markdown cell's text with its links into docs/ made relative to docs/tutorial.md; any other relative
    link would point outside the site, so it is an error."""
    text = DOCS_LINK.sub("](", source)
    for target in RELATIVE_LINK.findall(text):
        if target.startswith("../"):
            raise SystemExit(f"{NOTEBOOK.name}: markdown cell {cell} links to {target!r}, outside docs/; "
                             "link to a docs page as ../../docs/<page>.md")
    return text


def output_text(output: dict) -> str | None:
    """What a text output shows: stdout, or a displayed value's text/plain when it has no image; None for
    stderr and images."""
    kind = output["output_type"]
    if kind == "stream":
        return LOG_RECORD.sub("", ANSI.sub("", output["text"])) if output["name"] == "stdout" else None
    if kind == "error":
        raise SystemExit(f"{NOTEBOOK.name}: a cell raised {output['ename']}: {output['evalue']}")
    data = output.get("data", {})
    if "image/png" in data or "text/plain" not in data:
        return None
    return ANSI.sub("", data["text/plain"]).rstrip("\n") + "\n"


def code_cell(cell: dict, number: int, rendered: Rendered) -> list[str]:
    """A code cell's block, its text outputs (consecutive ones in one block) and its images."""
    out, text = ["```python", cell["source"].rstrip(), "```", ""], []

    def flush() -> None:
        if text:
            out.extend(["```text", "".join(text).rstrip("\n"), "```", ""])
            text.clear()

    for output in cell.get("outputs", []):
        if (shown := output_text(output)) is not None:
            text.append(shown)
        elif "image/png" in output.get("data", {}):
            flush()
            name = f"{IMAGE_PREFIX}{number}-{len(rendered.images) + 1}.png"
            rendered.images[name] = base64.b64decode(output["data"]["image/png"])
            out += [f"![output of cell {number}](img/{name})", ""]
    flush()
    return out


def render(nb: dict, provenance: str) -> Rendered:
    """The page from an executed notebook (nbformat's dict), with a provenance line under its first cell."""
    rendered, lines = Rendered(""), []
    for number, cell in enumerate(nb["cells"], 1):
        if cell["cell_type"] == "markdown":
            lines += [page_links(cell["source"], number), ""]
        elif cell["cell_type"] == "code":
            lines += code_cell(cell, number, rendered)
        if number == 1:  # under the title and the introduction
            lines += [provenance, ""]
    rendered.markdown = "\n".join(lines).rstrip("\n") + "\n"
    return rendered


def code_blocks(markdown: str) -> list[str]:
    """The Python blocks of a rendered page, in order."""
    return [m.strip() for m in re.findall(r"^```python\n(.*?)^```$", markdown, flags=re.M | re.S)]


def execute(notebook: Path = NOTEBOOK) -> tuple[dict, float]:
    """The notebook executed in a fresh kernel, runs under a temporary folder; and its seconds."""
    import nbclient  # the docs' tooling only: neither prover nor a measurement needs Jupyter
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="prover-tutorial-") as runs:
        os.environ["PROVER_TUTORIAL_DIR"] = runs  # the kernel inherits it
        nbclient.NotebookClient(nb, timeout=1800, kernel_name="python3",
                                resources={"metadata": {"path": runs}}).execute()
    return nb, time.monotonic() - start


def provenance(seconds: float) -> str:
    machine = cpu()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"_The tutorial notebook (`examples/notebooks/tutorial.ipynb`) as it last ran, outputs included: "
            f"written by `python -m benchmarks.figures.notebook --render` on "
            f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {seconds:.0f} s on {machine['model']} "
            f"({machine['family_model_stepping']}, {machine['usable_cores']} cores, load average {load:.1f}); "
            f"the numbers are one run's and move with the machine._")


def write(rendered: Rendered, page: Path = PAGE, images: Path = IMAGES) -> None:
    """The page and its images; images of an earlier rendering that this one no longer has are removed."""
    for old in images.glob(f"{IMAGE_PREFIX}*.png"):
        if old.name not in rendered.images:
            old.unlink()
    for name, data in rendered.images.items():
        (images / name).write_bytes(data)
    write_atomic(page, rendered.markdown)


def stale(page: Path = PAGE, notebook: Path = NOTEBOOK) -> str | None:
    """Why the committed page is not the notebook's current code, or None."""
    import nbformat  # as in execute()

    name = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
    if not page.is_file():
        return f"{name} is missing"
    cells = [c.source.strip() for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
    shown = code_blocks(page.read_text())
    if shown != cells:
        differ = next((i for i, (a, b) in enumerate(zip(shown, cells)) if a != b), min(len(shown), len(cells)))
        return f"{name}: code cell {differ + 1} is not the notebook's"
    images = page.parent / "img"
    missing = [m for m in re.findall(r"\(img/([^)]+\.png)\)", page.read_text()) if not (images / m).is_file()]
    return f"{name}: image {missing[0]} is missing" if missing else None


def main(argv: list[str] | None = None) -> int:
    check = render_or_check(__doc__, "execute the notebook and rewrite docs/tutorial.md",
                            "only say whether the page shows the notebook's code", argv)
    if check:
        why = stale()
        print(why or f"{PAGE.relative_to(ROOT)} shows the notebook's code")
        return 1 if why else 0
    nb, seconds = execute()
    rendered = render(nb, provenance(seconds))
    write(rendered)
    print(f"wrote {PAGE.relative_to(ROOT)} and {len(rendered.images)} image(s) ({seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
