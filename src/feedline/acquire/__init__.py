"""feedline.acquire."""
