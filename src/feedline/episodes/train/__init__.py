"""feedline.episodes.train: ``feedline train`` is lerobot-train streaming through feedline.

LeRobot's own training loop (policies, optimizer, scheduler, checkpoints, logging) runs with the
dataset built by feedline: flags (``flags``) → the source checked within seconds (``source``) →
the loop with feedline's reader plugged in (``bridge``, over ``view``) → the data order saved
beside LeRobot's ``training_state/`` (``order``) and feedline's counters in LeRobot's log line
(``metrics``). Only ``bridge`` and ``view`` import LeRobot (Python >= 3.12,
``pip install 'feedline[lerobot]'``).
"""

from __future__ import annotations
