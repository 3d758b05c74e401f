"""Which anchors a worker reads, in which order: pure arithmetic, no I/O, no threads.

``plan`` (rank → worker → whole episodes) → ``pool`` with ``strategies`` (exact-coverage draws) →
``admission`` (count + exact-byte budget) ; ``resume`` and ``state`` turn consumed samples into a
checkpoint of integers and back.
"""
