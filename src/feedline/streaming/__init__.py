"""The streaming floor both readers run on: plan, pools, byte budget, pipeline, resume.

It deals in units (an id, its samples, its payload bytes) and does no I/O of its own; the
episode reader (:mod:`feedline.episodes`) and the token reader (:mod:`feedline.text`) stand on
it (:mod:`feedline.streaming.reader`) and never on each other.
"""
