"""The streaming reader: ``payload`` (one episode's bytes and frames) → ``pipeline`` (fetch and
decode threads, ordered buffer) → ``dataset`` (``StreamingEpisodeDataset``)."""
