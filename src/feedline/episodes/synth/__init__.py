"""Small but real LeRobot v3 datasets whose pixels name their camera, episode and frame.

``writer`` writes the dataset, ``video`` encodes the MP4s as LeRobot's recorder does, ``identity``
puts and reads the (camera, episode, frame) marks, ``bulk`` writes 100,000 to 1,000,000 short
episodes in minutes for scale tests. The demo, the tests and the benchmarks use it.
"""
