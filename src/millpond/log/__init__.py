"""The write-ahead log: the one way data enters millpond."""

from millpond.log.channel import Channel, Log, Segment

__all__ = ["Channel", "Log", "Segment"]
