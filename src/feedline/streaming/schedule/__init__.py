"""Which anchors a worker reads, in which order: pure arithmetic, no I/O, no threads.

``plan`` (rank → worker → whole episodes) → ``pool`` with ``strategies`` (exact-coverage draws:
``spread``, ``remaining``, ``round_robin``), bounded by the floor's byte budget
(:mod:`feedline.streaming.budget`); ``resume``, ``elastic`` and ``state`` turn consumed samples
into a checkpoint of integers and back.
"""
