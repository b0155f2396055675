"""The Nexmark event generator: people, auctions and bids, deterministic and vectorized.

Events are numbered 0, 1, 2, …; in every run of 50 events the first is a person, the next 3 are
auctions and the other 46 are bids (the standard 1:3:46 proportions). Every field of an event is
drawn from a counter-based hash of ``(seed, event id, field)``, so any range of events
regenerates identically on its own, however the ids are sliced, with no state carried between
calls. Each call works on whole columns (numpy and Arrow; no per-event Python); strings are
views into a seeded random text, copied once into the result.

>>> t = generate(0, 100)
>>> [t[k].num_rows for k in ("person", "auction", "bid")]
[2, 6, 92]
>>> generate(40, 20)["bid"].equals(generate(0, 100)["bid"].slice(36, 16))
True

Field semantics follow the public Nexmark generators (Apache Beam's / nexmark's
``NexmarkGenerator``, RisingWave's ``nexmark-rs``), re-implemented here:

- ids start at 1000 (people, auctions) and categories at 10 (5 categories); an event's own
  person/auction id is 1000 plus the number of people/auctions generated before it.
- event time: ``BASE_TIME + event_id / events_per_second`` in whole milliseconds (10,000 events/s
  by default, Nexmark's default rate); in event-id order (no out-of-order groups).
- a seller is, with probability 3/4, the *hot* seller (the first person of the last block of 100
  people), else one of the last 1,000 people; a bid is for the hot auction (first of the last
  block of 100 auctions) with probability 1/2, else one of the last 100 auctions; a bidder is the
  hot bidder (the second person of the last block of 100) with probability 3/4, else one of the
  last 1,000 people.
- prices are ``round(10 ** U(0, 6) * 100)`` (cents); ``reserve = initial_bid + price``; an auction
  expires 1 ms to twice the time of 100 more auctions (1,667 events) after it opens.
- channel/url: with probability 1/2 one of 4 hot channels (Google, Facebook, Baidu, Apple), each
  with its own url, else ``channel-<i>`` of 10,000, whose url carries ``&channel_id=<i with its 32
  bits reversed>`` in 9 cases out of 10; urls are ``https://www.nexmark.com/<a>/<b>/<c>/item.htm?query=1``.
- names, emails (``<3-6 chars>@<3-4 chars>.com``), 16-digit credit cards, cities and states
  (lower case, as RisingWave's), item names (3-19 chars), descriptions (3-99 chars); ``extra``
  pads each event to the standard average sizes (person 200, auction 500, bid 100 bytes).

One deliberate difference: the reference generators let a random auction or person id run up
to 10 ids *ahead* of the last one generated (so that some bids arrive before their auction).
Here every seller and every bid's auction exists before the event that names it, so joins
over everything inserted so far are exact. (The hot bidder, as in the reference, may be the
person about to be created.)
"""

from __future__ import annotations

import functools
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["generate", "SCHEMAS", "BASE_TIME", "EVENTS_PER_SECOND", "PROPORTIONS"]

PROPORTIONS = (1, 3, 46)  # person, auction, bid in every run of 50 events
_PERSON, _AUCTION, _BID = PROPORTIONS
_RUN = sum(PROPORTIONS)
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
CATEGORIES = 5
ACTIVE_PEOPLE = 1000
IN_FLIGHT_AUCTIONS = 100
HOT_BLOCK = 100  # a hot id is the first (seller, auction) or second (bidder) of the last block of 100
HOT_SELLER_RATIO, HOT_AUCTION_RATIO, HOT_BIDDER_RATIO, HOT_CHANNEL_RATIO = 4, 2, 4, 2
AVG_BYTES = {"person": 200, "auction": 500, "bid": 100}
CHANNELS = 10_000
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
FIRST_NAMES = ("peter", "paul", "luke", "john", "saul", "vicky", "kate", "julie", "sarah", "deiter", "walter")
LAST_NAMES = ("shultz", "abrams", "spencer", "white", "bartels", "walton", "smith", "jones", "noris")
CITIES = ("phoenix", "los angeles", "san francisco", "boise", "portland", "bend", "redmond", "seattle", "kent",
          "cheyenne")
STATES = ("az", "ca", "id", "or", "wa", "wy")
BASE_TIME = datetime(2024, 1, 1, tzinfo=timezone.utc)
EVENTS_PER_SECOND = 10_000
_BASE_MS = int(BASE_TIME.timestamp() * 1000)

SCHEMAS = {
    "person": pa.schema([("id", pa.int64()), ("name", pa.string()), ("email_address", pa.string()),
                         ("credit_card", pa.string()), ("city", pa.string()), ("state", pa.string()),
                         ("date_time", pa.timestamp("us")), ("extra", pa.string())]),
    "auction": pa.schema([("id", pa.int64()), ("item_name", pa.string()), ("description", pa.string()),
                          ("initial_bid", pa.int64()), ("reserve", pa.int64()), ("date_time", pa.timestamp("us")),
                          ("expires", pa.timestamp("us")), ("seller", pa.int64()), ("category", pa.int64()),
                          ("extra", pa.string())]),
    "bid": pa.schema([("auction", pa.int64()), ("bidder", pa.int64()), ("price", pa.int64()),
                      ("channel", pa.string()), ("url", pa.string()), ("date_time", pa.timestamp("us")),
                      ("extra", pa.string())]),
}


# -- counter-based randomness -----------------------------------------------------------------
def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer: a bijection of uint64 that scrambles every bit (wraps mod 2^64)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class _Draws:
    """Independent uniform draws per (event id, field), the same whatever range is generated."""

    def __init__(self, ids: np.ndarray, seed: int):
        self.keys = _mix(ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
                         + _mix(np.array([seed], np.uint64) + np.uint64(0x632BE59BD9B4E019)))
        self.stream = 0

    def _next(self) -> np.ndarray:
        self.stream += 1
        return _mix(self.keys ^ _mix(np.array([self.stream], np.uint64)))

    def uniform(self) -> np.ndarray:
        return (self._next() >> np.uint64(11)).astype(np.float64) * 2.0 ** -53

    def below(self, n: np.ndarray | int) -> np.ndarray:
        """Integers in ``[0, n)``."""
        return np.floor(self.uniform() * n).astype(np.int64)


# -- strings ----------------------------------------------------------------------------------
_TEXT_BYTES = 1 << 20


@functools.lru_cache(maxsize=8)
def _text(seed: int, special: bytes) -> np.ndarray:
    """A seeded random text of lower-case letters, ``special`` (if any) at 1 in 13 positions."""
    rng = np.random.default_rng([seed, len(special), *special])
    text = rng.integers(ord("a"), ord("z") + 1, _TEXT_BYTES, dtype=np.uint8)
    if special:
        text[rng.random(_TEXT_BYTES) < 1 / 13] = special[0]
    return text


def _views(text: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Arrow string views (16 bytes: length, then the bytes inline if at most 12, else a prefix,
    buffer 0 and an offset) of ``text[starts[i] : starts[i] + lengths[i]]``: no bytes copied."""
    n = len(lengths)
    views = np.zeros((n, 4), np.int32)
    views[:, 0] = lengths
    head = sliding_window_view(text, 12)[starts] if n else np.zeros((0, 12), np.uint8)
    views.view(np.uint8).reshape(n, 16)[:, 4:] = np.where(np.arange(12) < lengths[:, None], head, 0)
    long = lengths > 12  # these keep their 4-byte prefix (already in place) and point into text
    views[long, 2] = 0
    views[long, 3] = starts[long]
    return views


def _strings(views: np.ndarray, text: np.ndarray) -> pa.StringArray:
    """Views into ``text`` as an ordinary string array (Arrow copies each string once)."""
    data = pa.py_buffer(np.ascontiguousarray(views))
    return pa.Array.from_buffers(pa.string_view(), len(views), [None, data, pa.py_buffer(text)]).cast(pa.string())


def _cut(text: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.StringArray:
    """``text[starts[i] : starts[i] + lengths[i]]`` for every i, as one string array."""
    return _strings(_views(text, starts, lengths.astype(np.int32)), text)


def _words(d: _Draws, seed: int, max_length: int, *, special: bytes = b" ") -> pa.StringArray:
    """Nexmark's ``nextString``: 3 to ``max_length - 1`` random characters, trimmed."""
    lengths = 3 + d.below(max_length - 3)
    starts = d.below(_TEXT_BYTES - max(max_length, 12))
    words = _cut(_text(seed, special), starts, lengths)
    return pc.utf8_trim(words, characters=" ") if special == b" " else words


def _extra(d: _Draws, seed: int, used: np.ndarray, average: int) -> pa.StringArray:
    """Padding so that an event's size is ``average`` bytes on average (± 20% of the rest)."""
    rest = np.maximum(average - used, 0)
    delta = np.round(rest * 0.2).astype(np.int64)
    lengths = rest - delta + d.below(np.maximum(2 * delta, 1)) * (delta > 0)
    return _cut(_text(seed, b""), d.below(_TEXT_BYTES - 2 * average), lengths)


class _Choices:
    """A fixed list of strings to pick from by index, as views into one buffer (no per-row copy
    before the final one)."""

    def __init__(self, options: pa.StringArray):
        options = pa.concat_arrays([options.cast(pa.string())])  # one contiguous, zero-offset array
        _, offsets, data = options.buffers()
        self.text = np.concatenate([np.frombuffer(data, np.uint8), np.zeros(12, np.uint8)])
        starts = np.frombuffer(offsets, np.int32)[:len(options) + 1]
        self.views = _views(self.text, starts[:-1], np.diff(starts))

    def pick(self, index: np.ndarray) -> pa.StringArray:
        return _strings(self.views[index], self.text)


@functools.lru_cache(maxsize=None)
def _choices(options: tuple[str, ...]) -> _Choices:
    return _Choices(pa.array(options, pa.string()))


def _pick(options: tuple[str, ...], index: np.ndarray) -> pa.Array:
    return _choices(options).pick(index)


def _lengths(a: pa.Array) -> np.ndarray:
    return pc.binary_length(a).to_numpy(zero_copy_only=False).astype(np.int64)


def _digits(values: np.ndarray, groups: int) -> pa.StringArray:
    """``groups`` zero-padded 4-digit numbers per row, space-separated (``values``: n x groups)."""
    n = len(values)
    width = 5 * groups - 1
    chars = np.full((n, 5 * groups), ord(" "), np.uint8)
    for g in range(groups):  # per digit position, not per row
        for k, div in enumerate((1000, 100, 10, 1)):
            chars[:, 5 * g + k] = ord("0") + values[:, g] // div % 10
    data = np.ascontiguousarray(chars[:, :width]).reshape(-1)
    offsets = (np.arange(n + 1) * width).astype(np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))


@functools.lru_cache(maxsize=8)
def _channels(seed: int) -> tuple[_Choices, _Choices]:
    """Channel names and urls: the 4 hot channels first, then ``channel-0`` … ``channel-9999``."""
    n = len(HOT_CHANNELS) + CHANNELS
    d = _Draws(np.arange(n, dtype=np.int64), seed ^ 0x5EED)
    parts = [_words(d, seed, 5, special=b"_") for _ in range(3)]
    url = pc.binary_join_element_wise("https://www.nexmark.com", *parts, "item.htm?query=1", "/")
    numbers = np.arange(CHANNELS, dtype=np.uint32)
    reversed_bits = np.zeros(CHANNELS, np.uint32)
    for bit in range(32):  # the channel's number with its 32 bits reversed, as RisingWave/Beam do
        reversed_bits |= ((numbers >> np.uint32(bit)) & np.uint32(1)) << np.uint32(31 - bit)
    tagged = d.below(10)[len(HOT_CHANNELS):] > 0
    suffix = pc.if_else(pa.array(tagged), pa.array(np.char.add("&channel_id=", reversed_bits.astype(str))), "")
    url = pa.concat_arrays([url[:len(HOT_CHANNELS)],
                            pc.binary_join_element_wise(url[len(HOT_CHANNELS):], suffix, "")])
    names = pa.concat_arrays([pa.array(HOT_CHANNELS), pa.array(np.char.add("channel-", numbers.astype(str)))])
    return _Choices(names), _Choices(url)


# -- ids and times ----------------------------------------------------------------------------
def _last_person(ids: np.ndarray) -> np.ndarray:
    """Base-0 id of the last person generated at or before each event."""
    return ids // _RUN * _PERSON + np.minimum(ids % _RUN, _PERSON - 1)


def _last_auction(ids: np.ndarray) -> np.ndarray:
    """Base-0 id of the last auction generated at or before each event (-1 before the first)."""
    run, offset = ids // _RUN, ids % _RUN
    return np.where(offset < _PERSON, (run - 1) * _AUCTION + _AUCTION - 1,
                    run * _AUCTION + np.minimum(offset - _PERSON, _AUCTION - 1))


def _someone(d: _Draws, ids: np.ndarray) -> np.ndarray:
    """A random person among the last ``ACTIVE_PEOPLE`` (base 0)."""
    people = _last_person(ids) + 1
    active = np.minimum(people, ACTIVE_PEOPLE)
    return people - active + d.below(active)


def _millis(ids: np.ndarray, rate: int) -> np.ndarray:
    return _BASE_MS + ids * 1000 // rate


def _timestamps(ms: np.ndarray) -> pa.Array:
    return pa.array(ms * 1000, pa.timestamp("us"))


def _price(d: _Draws) -> np.ndarray:
    return np.round(10.0 ** (d.uniform() * 6.0) * 100.0).astype(np.int64)


# -- events -----------------------------------------------------------------------------------
def _person(ids: np.ndarray, seed: int, rate: int) -> pa.Table:
    d = _Draws(ids, seed)
    name = pc.binary_join_element_wise(_pick(FIRST_NAMES, d.below(len(FIRST_NAMES))),
                                       _pick(LAST_NAMES, d.below(len(LAST_NAMES))), " ")
    email = pc.binary_join_element_wise(_words(d, seed, 7), "@", _words(d, seed, 5), ".com", "")
    card = _digits(np.stack([d.below(10_000) for _ in range(4)], axis=1), 4)
    city = _pick(CITIES, d.below(len(CITIES)))
    state = _pick(STATES, d.below(len(STATES)))
    used = 8 + sum(_lengths(a) for a in (name, email, card, city, state))
    return pa.table([pa.array(_last_person(ids) + FIRST_PERSON_ID), name, email, card, city, state,
                     _timestamps(_millis(ids, rate)), _extra(d, seed, used, AVG_BYTES["person"])],
                    schema=SCHEMAS["person"])


def _auction(ids: np.ndarray, seed: int, rate: int) -> pa.Table:
    d = _Draws(ids, seed)
    ms = _millis(ids, rate)
    hot = d.below(HOT_SELLER_RATIO) > 0
    seller = np.where(hot, _last_person(ids) // HOT_BLOCK * HOT_BLOCK, _someone(d, ids))
    item, description = _words(d, seed, 20), _words(d, seed, 100)
    initial = _price(d)
    # an auction lasts on average as long as it takes to open IN_FLIGHT_AUCTIONS more
    horizon = _millis(ids + IN_FLIGHT_AUCTIONS * _RUN // _AUCTION, rate) - ms
    expires = ms + 1 + d.below(np.maximum(2 * horizon, 1))
    used = 8 + _lengths(item) + _lengths(description) + 5 * 8
    return pa.table([pa.array(_last_auction(ids) + FIRST_AUCTION_ID), item, description, pa.array(initial),
                     pa.array(initial + _price(d)), _timestamps(ms), _timestamps(expires),
                     pa.array(seller + FIRST_PERSON_ID), pa.array(FIRST_CATEGORY_ID + d.below(CATEGORIES)),
                     _extra(d, seed, used, AVG_BYTES["auction"])], schema=SCHEMAS["auction"])


def _bid(ids: np.ndarray, seed: int, rate: int) -> pa.Table:
    d = _Draws(ids, seed)
    last = _last_auction(ids)
    hot_auction = d.below(HOT_AUCTION_RATIO) > 0
    low = np.maximum(last - IN_FLIGHT_AUCTIONS, 0)
    auction = np.where(hot_auction, last // HOT_BLOCK * HOT_BLOCK, low + d.below(last - low + 1))
    hot_bidder = d.below(HOT_BIDDER_RATIO) > 0
    bidder = np.where(hot_bidder, _last_person(ids) // HOT_BLOCK * HOT_BLOCK + 1, _someone(d, ids))
    price = _price(d)
    hot_channel = d.below(HOT_CHANNEL_RATIO) > 0
    channel = np.where(hot_channel, d.below(len(HOT_CHANNELS)), len(HOT_CHANNELS) + d.below(CHANNELS))
    names, urls = _channels(seed)
    used = np.full(len(ids), 4 * 8)
    return pa.table([pa.array(auction + FIRST_AUCTION_ID), pa.array(bidder + FIRST_PERSON_ID), pa.array(price),
                     names.pick(channel), urls.pick(channel),
                     _timestamps(_millis(ids, rate)), _extra(d, seed, used, AVG_BYTES["bid"])],
                    schema=SCHEMAS["bid"])


def generate(first_event: int, count: int, *, seed: int = 0,
             events_per_second: int = EVENTS_PER_SECOND) -> dict[str, pa.Table]:
    """The person, auction and bid events among event ids ``[first_event, first_event + count)``."""
    if first_event < 0 or count < 0 or seed < 0 or events_per_second <= 0:
        raise ValueError(f"generate({first_event}, {count}, seed={seed}, events_per_second={events_per_second}): "
                         "the range and the seed must not be negative, the rate must be positive")
    ids = np.arange(first_event, first_event + count, dtype=np.int64)
    kind = ids % _RUN
    return {
        "person": _person(ids[kind < _PERSON], seed, events_per_second),
        "auction": _auction(ids[(kind >= _PERSON) & (kind < _PERSON + _AUCTION)], seed, events_per_second),
        "bid": _bid(ids[kind >= _PERSON + _AUCTION], seed, events_per_second),
    }
