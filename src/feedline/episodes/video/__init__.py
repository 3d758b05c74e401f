"""Frame-exact video from any store: ``mp4/`` (boxes, sample tables, writer) → ``sidecar``
(per-revision index) → ``index`` (mmap view) → ``minimp4`` (byte ranges re-wrapped) → ``frames``
(PyAV decode)."""
