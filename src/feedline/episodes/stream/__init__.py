"""The episode reader on the streaming floor: ``source`` (an opened root) → ``payload`` (one
episode's bytes and frames) → ``decoded`` (each resident frame decoded once) → ``dataset``
(``StreamingEpisodeDataset``).

The plan, pools, byte budget, fetch and decode threads, worker board and resume it runs on are
the floor's (:mod:`feedline.streaming`), shared with the token reader; what is here is what makes
a unit an episode."""
