"""Our own ISO-BMFF reading and writing: box parser, sample tables, mini-MP4 writer."""
