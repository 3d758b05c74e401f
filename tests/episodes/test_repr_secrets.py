"""A reader's repr() shows where it reads from without the URL's credentials (over nginx, which
ignores the user:password a URL carries)."""

from __future__ import annotations

from feedline.episodes import EpisodeDataset, StreamingEpisodeDataset


def test_repr_hides_user_password(h264_http: str) -> None:
    url = h264_http.replace("http://", "http://user:s3cretpw@", 1)
    for reader in (StreamingEpisodeDataset(root=url), EpisodeDataset(root=url)):
        shown = repr(reader)
        assert "s3cretpw" not in shown and "http://***@127.0.0.1" in shown, shown
        assert reader.num_episodes > 0  # it did open through the credentialed URL
