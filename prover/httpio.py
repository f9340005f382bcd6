"""What our HTTP clients (the Search-R1 retriever, the SGLang engine) share: reading a reply body
against an overall deadline."""

from __future__ import annotations

import http.client
import time


def read_until(response: http.client.HTTPResponse, deadline: float) -> bytes:
    """The body, read in whatever pieces arrive; past ``deadline`` (``time.monotonic``) it is a
    ``TimeoutError``, because the socket timeout alone restarts with every byte and a trickling server
    would never trip it. A reply cut short raises ``http.client.IncompleteRead``."""
    chunks = []
    while chunk := response.read1(1 << 16):
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise TimeoutError("the reply is still arriving")
    if response.length:  # read1 (unlike read) ends quietly when the server hangs up early
        raise http.client.IncompleteRead(b"".join(chunks), response.length)
    return b"".join(chunks)
