"""feedline.episodes."""
