"""The write-ahead log: the one way data enters millpond."""

from millpond.log.log import SEQ, TICK, Appended, Channel, ChannelInfo, Log, Piece, Transaction, read_pieces

__all__ = ["Appended", "Channel", "ChannelInfo", "Log", "Piece", "Transaction", "read_pieces", "SEQ", "TICK"]
