"""feedline's own HTTP range client: ``connections`` (bounded keep-alive pool) → ``headers``
(Content-Range, ETag) → ``client`` (ranged reads, retries, HEAD, streaming) → ``store`` (HttpStore)."""
