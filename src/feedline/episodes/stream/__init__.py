"""The streaming reader: ``payload`` (one episode's bytes and frames) → ``pipeline`` (fetch and
decode threads, ordered buffer) → ``board`` (control and metrics shared with the workers) →
``dataset`` (``StreamingEpisodeDataset``)."""
