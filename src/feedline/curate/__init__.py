"""feedline.curate."""
