"""Mixtures of episode datasets in one stream: ``sources`` (what users write) → ``union`` (the
sample schema and stats over the sources) → ``feed`` (what the streaming reader plans over).

The per-epoch counts of each source (``weight``, ``repeat``, ``choose``) are the floor's
(:mod:`feedline.streaming.schedule.mixture`), which the token reader's mixtures use too.
"""
