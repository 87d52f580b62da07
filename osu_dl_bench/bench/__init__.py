"""The OSU-style benchmark harness: options, timing, records and the OSU text table."""
