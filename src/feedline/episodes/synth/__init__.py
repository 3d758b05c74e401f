"""Small but real LeRobot v3 datasets whose pixels name their camera, episode and frame.

``writer`` writes the dataset, ``video`` encodes the MP4s as LeRobot's recorder does, ``identity``
puts and reads the (camera, episode, frame) marks. The demo, the tests and the benchmarks use it.
"""
