"""The write-ahead log: the one way data enters millpond."""

from millpond.log.log import Channel, Log, Transaction, check_channel_name
from millpond.log.state import Appended, ChannelInfo, Piece, read_pieces

__all__ = ["Appended", "Channel", "ChannelInfo", "Log", "Piece", "Transaction", "check_channel_name", "read_pieces"]
