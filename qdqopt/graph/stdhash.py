"""Emulation of libstdc++'s ``std::unordered_map<std::string, T>`` iteration order.

ONNX Runtime (built with GCC on Linux) keeps several things in
``std::unordered_map<std::string, ...>`` and serialises them in the map's
iteration order: the model metadata map (``ModelProto.metadata_props``), node
attributes (``NodeAttributes``), and a few optimizer-internal maps.  To produce
byte-identical output we must reproduce that order, which depends on

1. the hash of each key, and
2. the exact sequence of bucket-array sizes and node relinking performed by
   libstdc++'s ``_Hashtable`` (unique keys, hash code cached in the node).

Hash (``std::hash<std::string>``)
---------------------------------
``std::_Hash_bytes(data, len, seed=0xc70f6907)`` for a 64-bit ``size_t`` is a
MurmurHash2-style function (libsupc++/hash_bytes.cc).  With ``m =
0xc6a4a7935bd1e995`` and ``shift_mix(v) = v ^ (v >> 47)``:

* ``h = seed ^ (len * m)``;
* every full little-endian 8-byte word ``w``: ``h = (h ^ (shift_mix(w*m)*m)) * m``;
* a 1..7 byte tail, read little-endian into an integer ``t``: ``h = (h ^ t) * m``;
* finally ``h = shift_mix(shift_mix(h) * m)``.

All arithmetic is modulo 2**64.  The bucket of a key is ``hash % bucket_count``.

Table layout
------------
All nodes live on one singly linked list that starts at a sentinel
(``_M_before_begin``); iteration walks that list.  ``buckets[b]`` does not
point at the first node of bucket ``b`` but at the node *before* it (for the
bucket holding the list head, that is the sentinel).  Nodes of one bucket are
always contiguous in the list.

* Insertion of a new key (``operator[]``, ``emplace``, ``insert``,
  ``try_emplace``): first the rehash policy is asked whether one more element
  fits; if not, the table is rehashed (below) and the key's bucket recomputed.
  Then the node is put at the *front of its bucket*: if the bucket already has
  nodes it is linked right after ``buckets[b]``; if the bucket is empty the node
  becomes the new head of the whole list, the bucket that previously owned the
  head now gets the new node as its "before" pointer, and ``buckets[b]`` becomes
  the sentinel.  Inserting an existing key changes nothing (the GCC >= 12
  "small size" linear scan for <= 20 elements only changes how the existing key
  is found, never where a new node goes).
* Rehash to ``n`` buckets (unique keys): walk the old list from the head and
  relink each node: into an empty new bucket it goes to the head of the new
  list (and the bucket that had the previous head is pointed at it), into a
  non-empty bucket it goes right after that bucket's "before" node.
* Erase unlinks the node and repairs the "before" pointers of its own bucket
  and of the following node's bucket; it never shrinks the table.
* Copy construction / copy assignment (``_M_assign``) copy the bucket count,
  the rehash-policy state and the node list in iteration order, so a copy
  iterates exactly like the original.

Prime rehash policy (``_Prime_rehash_policy``, max_load_factor 1.0)
--------------------------------------------------------------------
State: ``next_resize`` (element count that triggers the next growth), initially
0; a default-constructed table has one (static) bucket.

* ``next_bkt(n)``: ``n == 0`` -> 1 (state untouched); ``n < 14`` -> the
  small table ``(2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13)[n]``;
  otherwise the first prime ``>= n`` of libstdc++'s fixed prime list (searched
  from its 7th entry, never past the second-to-last one).  It sets
  ``next_resize = floor(result * max_load_factor)`` (or SIZE_MAX at the end of
  the list).
* ``need_rehash(n_bkt, n_elt, n_ins)``: nothing to do while
  ``n_elt + n_ins <= next_resize``.  Otherwise ``min_bkts = max(n_elt + n_ins,
  11 if next_resize == 0 else 0) / max_load_factor``; if ``min_bkts >= n_bkt``
  grow to ``next_bkt(max(floor(min_bkts) + 1, 2 * n_bkt))``, else just set
  ``next_resize = floor(n_bkt * max_load_factor)``.  So a default table grows
  1 -> 13 on its first insertion, then 29, 59, 127, 257, 541, 1109, ...
* ``rehash(n)``: ``n = next_bkt(max(bkt_for_elements(size + 1), n))``; rehash
  only if that differs from the current count (otherwise the policy state is
  restored).  ``reserve(n)`` is ``rehash(ceil(n / max_load_factor))``.
* The ``unordered_map(n)`` constructor allocates ``next_bkt(n)`` buckets when
  that is more than one.

How ONNX Runtime 1.32 fills its maps (verified empirically, see tests/test_stdhash.py)
--------------------------------------------------------------------------------------
* ``ModelProto.metadata_props``: ``Model`` builds a default-constructed map with
  ``model_metadata_[key] = value`` for each prop in proto order, and the saved
  model lists the map in iteration order: ``iteration_order(keys)``.  A
  repeated key keeps its first position and its last value.
* Node attributes (``Graph::AddNode(const NodeProto&)``): a map is
  ``reserve(attribute_size())``-ed, filled with ``operator[]`` in proto order,
  and copied into the node (a copy iterates identically).  ``Resolve`` then
  adds every schema attribute that is missing and has a default value, in the
  iteration order of ``OpSchema::attributes()``.  Since ONNX 1.18 that is a
  ``std::unordered_map`` filled by ``emplace`` in ``.Attr()`` declaration
  order, so the default-fill order is ``iteration_order(attrs_in_declaration_order)``;
  from Python it is simply the key order of
  ``onnx.defs.get_schema(...).attributes`` (pybind11 builds that dict by
  iterating the C++ map).  ``node_attribute_order`` applies the rule.  Nodes
  copied from another node (``Graph::AddNode(..., &other.GetAttributes(), ...)``,
  e.g. the DequantizeLinear duplicated by ``EnsureUniqueDQForNodeUnit``) get a
  copy of the map and so keep the original's order.

Version notes
-------------
``_Hash_bytes``, ``next_bkt`` and ``need_rehash`` are not inlined: they are
exported from ``libstdc++.so.6`` and so come from the libstdc++ that is loaded
at run time, whatever GCC compiled ORT (the onnxruntime 1.32.0 manylinux wheel
was built with GCC 14.2.1, Red Hat gcc-toolset-14, and imports these three
symbols).  The policy described here is the one in the GCC 13 and current
libstdc++ sources, and it was verified by running GCC 12.2's libstdc++ (and
ORT 1.32.0 on it).  Older sources (the 2017 file, i.e. GCC 7) had a different
policy (``next_bkt`` searching for ``n + 1``, a ``>=`` threshold, no "11 on
first insertion" rule), which gives different orders; GCC 8-11 were not
checked.  This module does not emulate the old policy.  The inline parts
(node insertion, rehash relinking, erase, copy), compiled into ORT from the
GCC 14 headers, are the same as in GCC 12.  GCC 12's ``__small_size_threshold``
(a linear scan for maps of at most 20 ``std::string`` keys) only changes how
an existing key is found, never where a new node goes.
"""

from __future__ import annotations

import bisect
import itertools
import math
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import Final

__all__ = [
    "HASH_SEED",
    "PrimeRehashPolicy",
    "StdUnorderedMap",
    "iteration_order",
    "node_attribute_order",
    "std_hash_bytes",
    "std_hash_string",
]

_MASK64 = (1 << 64) - 1
_MUL = 0xC6A4A7935BD1E995
HASH_SEED = 0xC70F6907
"""Seed used by ``std::hash<std::string>`` (``static_cast<size_t>(0xc70f6907UL)``)."""

SIZE_MAX = _MASK64


def _shift_mix(v: int) -> int:
    return v ^ (v >> 47)


def std_hash_bytes(data: bytes, seed: int = HASH_SEED) -> int:
    """libstdc++ ``std::_Hash_bytes`` for a 64-bit ``size_t`` (an unsigned 64-bit int)."""
    length = len(data)
    h = (seed ^ (length * _MUL)) & _MASK64
    aligned = length & ~7
    for word in struct.unpack_from(f"<{aligned >> 3}Q", data):
        mixed = (word * _MUL) & _MASK64
        mixed = ((mixed ^ (mixed >> 47)) * _MUL) & _MASK64
        h = ((h ^ mixed) * _MUL) & _MASK64
    if length & 7:
        tail = int.from_bytes(data[aligned:], "little")
        h = ((h ^ tail) * _MUL) & _MASK64
    h = (_shift_mix(h) * _MUL) & _MASK64
    return _shift_mix(h)


def std_hash_string(key: str | bytes) -> int:
    """``std::hash<std::string>`` of ``key`` (a ``str`` is taken as its UTF-8 bytes)."""
    if isinstance(key, str):
        code = _STR_HASHES.get(key)
        if code is None:
            code = _STR_HASHES[key] = std_hash_bytes(key.encode("utf-8"))
            if len(_STR_HASHES) > _STR_HASHES_MAX:  # a bound, not a policy: the oldest half goes
                for old in list(itertools.islice(_STR_HASHES, _STR_HASHES_MAX // 2)):
                    del _STR_HASHES[old]
        return code
    return std_hash_bytes(bytes(key))


#: hashes of the strings met so far (attribute and value names repeat across maps, graphs and runs)
_STR_HASHES: Final[dict[str, int]] = {}
_STR_HASHES_MAX = 1 << 20


# libstdc++'s __prime_list for 64-bit unsigned long: 256 + 48 primes plus a
# repeated last entry (sentinel).  Stored as data.
_PRIME_LIST: tuple[int, ...] = (
    2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67,
    71, 73, 79, 83, 89, 97, 103, 109, 113, 127, 137, 139, 149, 157, 167, 179,
    193, 199, 211, 227, 241, 257, 277, 293, 313, 337, 359, 383, 409, 439, 467,
    503, 541, 577, 619, 661, 709, 761, 823, 887, 953, 1031, 1109, 1193, 1289,
    1381, 1493, 1613, 1741, 1879, 2029, 2179, 2357, 2549, 2753, 2971, 3209,
    3469, 3739, 4027, 4349, 4703, 5087, 5503, 5953, 6427, 6949, 7517, 8123,
    8783, 9497, 10273, 11113, 12011, 12983, 14033, 15173, 16411, 17749, 19183,
    20753, 22447, 24281, 26267, 28411, 30727, 33223, 35933, 38873, 42043,
    45481, 49201, 53201, 57557, 62233, 67307, 72817, 78779, 85229, 92203,
    99733, 107897, 116731, 126271, 136607, 147793, 159871, 172933, 187091,
    202409, 218971, 236897, 256279, 277261, 299951, 324503, 351061, 379787,
    410857, 444487, 480881, 520241, 562841, 608903, 658753, 712697, 771049,
    834181, 902483, 976369, 1056323, 1142821, 1236397, 1337629, 1447153,
    1565659, 1693859, 1832561, 1982627, 2144977, 2320627, 2510653, 2716249,
    2938679, 3179303, 3439651, 3721303, 4026031, 4355707, 4712381, 5098259,
    5515729, 5967347, 6456007, 6984629, 7556579, 8175383, 8844859, 9569143,
    10352717, 11200489, 12117689, 13109983, 14183539, 15345007, 16601593,
    17961079, 19431899, 21023161, 22744717, 24607243, 26622317, 28802401,
    31160981, 33712729, 36473443, 39460231, 42691603, 46187573, 49969847,
    54061849, 58488943, 63278561, 68460391, 74066549, 80131819, 86693767,
    93793069, 101473717, 109783337, 118773397, 128499677, 139022417,
    150406843, 162723577, 176048909, 190465427, 206062531, 222936881,
    241193053, 260944219, 282312799, 305431229, 330442829, 357502601,
    386778277, 418451333, 452718089, 489790921, 529899637, 573292817,
    620239453, 671030513, 725980837, 785430967, 849749479, 919334987,
    994618837, 1076067617, 1164186217, 1259520799, 1362662261, 1474249943,
    1594975441, 1725587117, 1866894511, 2019773507, 2185171673, 2364114217,
    2557710269, 2767159799, 2993761039, 3238918481, 3504151727, 3791104843,
    4101556399, 4294967291,
    6442450933, 8589934583, 12884901857, 17179869143, 25769803693,
    34359738337, 51539607367, 68719476731, 103079215087, 137438953447,
    206158430123, 274877906899, 412316860387, 549755813881, 824633720731,
    1099511627689, 1649267441579, 2199023255531, 3298534883309,
    4398046511093, 6597069766607, 8796093022151, 13194139533241,
    17592186044399, 26388279066581, 35184372088777, 52776558133177,
    70368744177643, 105553116266399, 140737488355213, 211106232532861,
    281474976710597, 562949953421231, 1125899906842597, 2251799813685119,
    4503599627370449, 9007199254740881, 18014398509481951,
    36028797018963913, 72057594037927931, 144115188075855859,
    288230376151711717, 576460752303423433, 1152921504606846883,
    2305843009213693951, 4611686018427387847, 9223372036854775783,
    18446744073709551557, 18446744073709551557,
)  # fmt: skip

_FAST_BKT: tuple[int, ...] = (2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13)
_N_PRIMES = len(_PRIME_LIST) - 1  # without the sentinel
_LAST_PRIME_INDEX = _N_PRIMES - 1  # lower_bound never looks at or past this
_GROWTH_FACTOR = 2


def _as_float32(x: float) -> float:
    """Round to IEEE single precision (``_M_max_load_factor`` is a ``float``)."""
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def _to_size_t(x: float) -> int:
    """C++ conversion of a finite non-negative double to ``size_t``."""
    return min(int(x), SIZE_MAX)


class PrimeRehashPolicy:
    """libstdc++ ``__detail::_Prime_rehash_policy`` (current algorithm)."""

    __slots__ = ("max_load_factor", "next_resize")

    def __init__(self, max_load_factor: float = 1.0) -> None:
        self.max_load_factor = _as_float32(max_load_factor)
        self.next_resize = 0

    def copy(self) -> PrimeRehashPolicy:
        other = PrimeRehashPolicy(self.max_load_factor)
        other.next_resize = self.next_resize
        return other

    def bkt_for_elements(self, n: int) -> int:
        """Bucket count needed for ``n`` elements: ``ceil(n / max_load_factor)``."""
        return _to_size_t(math.ceil(n / self.max_load_factor))

    def next_bkt(self, n: int) -> int:
        """Smallest allowed bucket count ``>= n`` (updates ``next_resize``)."""
        if n < len(_FAST_BKT):
            if n == 0:
                # First initialisation with a zero hint: keep next_resize at 0 so
                # the first insertion allocates.
                return 1
            self.next_resize = _to_size_t(math.floor(_FAST_BKT[n] * self.max_load_factor))
            return _FAST_BKT[n]
        idx = bisect.bisect_left(_PRIME_LIST, n, 6, _LAST_PRIME_INDEX)
        if idx == _LAST_PRIME_INDEX:
            self.next_resize = SIZE_MAX
        else:
            self.next_resize = _to_size_t(math.floor(_PRIME_LIST[idx] * self.max_load_factor))
        return _PRIME_LIST[idx]

    def need_rehash(self, n_bkt: int, n_elt: int, n_ins: int) -> tuple[bool, int]:
        """Whether inserting ``n_ins`` elements into ``n_elt`` needs more than ``n_bkt`` buckets."""
        if n_elt + n_ins > self.next_resize:
            floor_elems = 0 if self.next_resize else 11
            min_bkts = max(n_elt + n_ins, floor_elems) / self.max_load_factor
            if min_bkts >= n_bkt:
                wanted = max(_to_size_t(math.floor(min_bkts) + 1), n_bkt * _GROWTH_FACTOR)
                return True, self.next_bkt(wanted)
            self.next_resize = _to_size_t(math.floor(n_bkt * self.max_load_factor))
            return False, 0
        return False, 0


class _Node:
    """A list node; the sentinel ``_M_before_begin`` is a ``_Node`` with ``key=None``."""

    __slots__ = ("code", "key", "nxt")

    def __init__(self, key: str | None, code: int) -> None:
        self.key = key
        self.code = code
        self.nxt: _Node | None = None


class _State:
    """An immutable snapshot of a small map (its keys and hash codes in iteration order, bucket count and rehash
    policy state: all that decides what it does next), with the snapshots each operation on it led to so far."""

    __slots__ = ("bucket_count", "codes", "gen", "keys", "max_load_factor", "next", "next_resize")

    def __init__(self, table: StdUnorderedMap) -> None:
        keys: list[str] = []
        codes: list[int] = []
        node = table._before_begin.nxt
        while node is not None:
            assert node.key is not None
            keys.append(node.key)
            codes.append(node.code)
            node = node.nxt
        self.keys = tuple(keys)
        self.codes = tuple(codes)
        self.bucket_count = table._bucket_count
        self.max_load_factor = table._policy.max_load_factor
        self.next_resize = table._policy.next_resize
        self.next: dict[tuple[object, ...], _State] = {}
        self.gen = _MEMO.gen


class _Memo:
    """The snapshots of small maps (a map in ``memo`` mode moves from one to the next; see :class:`StdUnorderedMap`),
    bounded: past :attr:`BUDGET` snapshots, a new generation starts and the old one is left to the maps using it."""

    BUDGET = 20_000

    def __init__(self) -> None:
        self.gen = 0
        self.count = 0
        self.roots: dict[tuple[int, float], _State] = {}

    def remember(self, state: _State, op: tuple[object, ...], result: _State) -> None:
        if state.gen != self.gen:
            return
        state.next[op] = result
        self.count += 1
        if self.count > self.BUDGET:
            self.gen += 1
            self.count = 0
            self.roots = {}


_MEMO = _Memo()
#: a map in ``memo`` mode keeps to snapshots up to this size, then goes on as a plain (linked) table
_SMALL_MAX = 24


class StdUnorderedMap:
    """Key-order model of ``std::unordered_map<std::string, T>`` (libstdc++, 64-bit).

    Only keys are tracked (values never influence the order).  Keys are
    ``str`` (hashed as their UTF-8 bytes).

    ``bucket_hint`` models the ``unordered_map(size_type n)`` constructor; the
    default (0) is the default constructor (one bucket, nothing allocated).

    ``memo``: for the many small maps that go through the same operations (a node's attributes: the same names, in
    the same order, for every Conv of a model), the map is kept as a shared immutable snapshot while it has at most
    ``_SMALL_MAX`` keys, and each operation's result is remembered per snapshot, so that copying is free and an
    operation met before costs a dict lookup. The order is the same either way.
    """

    __slots__ = ("_before_begin", "_bucket_count", "_buckets", "_index", "_keys", "_policy", "_state")

    def __init__(self, bucket_hint: int = 0, max_load_factor: float = 1.0, *, memo: bool = False) -> None:
        self._state: _State | None = None
        if memo:
            key = (bucket_hint, max_load_factor)
            root = _MEMO.roots.get(key)
            if root is None:
                root = _MEMO.roots[key] = _State(StdUnorderedMap(bucket_hint, max_load_factor))
            self._state = root
            return
        self._policy = PrimeRehashPolicy(max_load_factor)
        self._before_begin = _Node(None, 0)
        self._index: dict[str, _Node] = {}
        self._keys: list[str] | None = []  # the iteration order, kept until the next change
        self._bucket_count = 1
        self._buckets: list[_Node | None] = [None]
        if bucket_hint:
            count = self._policy.next_bkt(bucket_hint)
            if count > self._bucket_count:
                self._bucket_count = count
                self._buckets = [None] * count

    # -- memo mode -------------------------------------------------------
    def _step(self, op: tuple[object, ...]) -> None:
        """Apply ``op`` to a map in memo mode: the remembered result, else the result worked out on a linked copy
        (which the map keeps, leaving memo mode, once it is past ``_SMALL_MAX`` keys)."""
        state = self._state
        assert state is not None
        found = state.next.get(op)
        if found is not None:
            self._state = found
            return
        table = _thaw(state)
        kind = op[0]
        if kind == "i":
            table.insert(op[1])  # type: ignore[arg-type]
        elif kind == "h":
            table.insert_hashed(op[1], op[2])  # type: ignore[arg-type]
        elif kind == "e":
            table.erase(op[1])  # type: ignore[arg-type]
        elif kind == "c":
            table.clear()
        elif kind == "r":
            table.rehash(op[1])  # type: ignore[arg-type]
        else:
            table.reserve(op[1])  # type: ignore[arg-type]
        if len(table) > _SMALL_MAX:
            self._state = None
            self._policy = table._policy
            self._before_begin = table._before_begin
            self._index = table._index
            self._keys = table._keys
            self._bucket_count = table._bucket_count
            self._buckets = table._buckets
            return
        found = _State(table)
        _MEMO.remember(state, op, found)
        self._state = found

    # -- observers ---------------------------------------------------------
    def snapshot(self) -> object | None:
        """For a map in memo mode, its current snapshot (immutable: another map, or this one later, holding the
        very same object iterates the same keys in the same order); None for a linked table."""
        return self._state

    def __len__(self) -> int:
        if self._state is not None:
            return len(self._state.keys)
        return len(self._index)

    def __contains__(self, key: object) -> bool:
        if self._state is not None:
            return key in self._state.keys
        return key in self._index

    def __iter__(self) -> Iterator[str]:
        if self._state is not None:
            return iter(self._state.keys)
        return iter(self._order())

    def keys(self) -> list[str]:
        """Keys in iteration order (``begin()`` to ``end()``)."""
        if self._state is not None:
            return list(self._state.keys)
        return list(self._order())

    def _order(self) -> list[str]:
        keys = self._keys
        if keys is None:
            keys = []
            node = self._before_begin.nxt
            while node is not None:
                assert node.key is not None
                keys.append(node.key)
                node = node.nxt
            self._keys = keys
        return keys

    @property
    def bucket_count(self) -> int:
        if self._state is not None:
            return self._state.bucket_count
        return self._bucket_count

    @property
    def next_resize(self) -> int:
        if self._state is not None:
            return self._state.next_resize
        return self._policy.next_resize

    def bucket(self, key: str) -> int:
        """``bucket(key)``: the bucket index the key hashes to."""
        return std_hash_string(key) % self.bucket_count

    # -- modifiers ---------------------------------------------------------
    def insert(self, key: str) -> bool:
        """Insert ``key`` if absent (``operator[]`` / ``emplace`` / ``insert``).

        Returns True if a node was inserted, False if the key already existed
        (in which case nothing changes).
        """
        state = self._state
        if state is not None:
            if key in state.keys:
                return False
            self._step(("i", key))
            return True
        if key in self._index:
            return False
        return self.insert_hashed(key, std_hash_string(key))

    def insert_hashed(self, key: str, code: int) -> bool:
        """Insert ``key`` with the hash ``code`` (a map whose keys hash otherwise, as :class:`StdUnorderedIndexSet`)."""
        state = self._state
        if state is not None:
            if key in state.keys:
                return False
            self._step(("h", key, code))
            return True
        if key in self._index:
            return False
        node = _Node(key, code)
        self._keys = None
        if len(self._index) + 1 > self._policy.next_resize:  # need_rehash's own first test, inlined
            do_rehash, count = self._policy.need_rehash(self._bucket_count, len(self._index), 1)
            if do_rehash:
                self._rehash_unique(count)
        self._insert_bucket_begin(code % self._bucket_count, node)
        self._index[key] = node
        return True

    def update(self, keys: Iterable[str]) -> None:
        """``operator[]`` for each key in turn."""
        if self._state is not None:
            for key in keys:
                self.insert(key)
            return
        # a linked table: insert_hashed's steps inlined (a NodeArg map takes thousands of names at once)
        index, policy, hashes = self._index, self._policy, _STR_HASHES
        for key in keys:
            if key in index:
                continue
            code = hashes.get(key)
            if code is None:
                code = std_hash_string(key)
            node = _Node(key, code)
            if len(index) + 1 > policy.next_resize:
                do_rehash, count = policy.need_rehash(self._bucket_count, len(index), 1)
                if do_rehash:
                    self._rehash_unique(count)
            self._insert_bucket_begin(code % self._bucket_count, node)
            index[key] = node
        self._keys = None

    def erase(self, key: str) -> bool:
        """``erase(key)``; returns whether the key was present."""
        state = self._state
        if state is not None:
            if key not in state.keys:
                return False
            self._step(("e", key))
            return True
        node = self._index.pop(key, None)
        if node is None:
            return False
        self._keys = None
        bkt = node.code % self._bucket_count
        prev = self._buckets[bkt]
        assert prev is not None
        while prev.nxt is not node:
            assert prev.nxt is not None
            prev = prev.nxt
        nxt = node.nxt
        if prev is self._buckets[bkt]:
            # node was the first of its bucket
            if nxt is None:
                self._buckets[bkt] = None
            else:
                next_bkt = nxt.code % self._bucket_count
                if next_bkt != bkt:
                    self._buckets[next_bkt] = self._buckets[bkt]
                    self._buckets[bkt] = None
        elif nxt is not None:
            next_bkt = nxt.code % self._bucket_count
            if next_bkt != bkt:
                self._buckets[next_bkt] = prev
        prev.nxt = nxt
        node.nxt = None
        return True

    def clear(self) -> None:
        """``clear()``: drop all nodes, keep the bucket count and policy state."""
        if self._state is not None:
            self._step(("c",))
            return
        self._index.clear()
        self._keys = []
        self._before_begin.nxt = None
        self._buckets = [None] * self._bucket_count

    def rehash(self, count: int) -> None:
        """``rehash(count)``."""
        if self._state is not None:
            self._step(("r", count))
            return
        saved = self._policy.next_resize
        count = max(self._policy.bkt_for_elements(len(self._index) + 1), count)
        count = self._policy.next_bkt(count)
        if count != self._bucket_count:
            self._rehash_unique(count)
        else:
            self._policy.next_resize = saved

    def reserve(self, n: int) -> None:
        """``reserve(n)``."""
        if self._state is not None:
            self._step(("v", n))
            return
        self.rehash(self._policy.bkt_for_elements(n))

    def copy(self) -> StdUnorderedMap:
        """Copy construction / copy assignment: same buckets, policy and order."""
        # (the native constructor, then the fields set: __new__ called by name goes through the interpreter)
        other = StdUnorderedMap(memo=True)
        other._state = self._state
        if self._state is not None:  # a snapshot is never edited: shared
            return other
        other._policy = self._policy.copy()
        other._before_begin = _Node(None, 0)
        other._index = {}
        other._keys = self._keys  # never edited in place: replaced on the next change
        other._bucket_count = self._bucket_count
        other._buckets = [None] * self._bucket_count
        prev = other._before_begin
        node = self._before_begin.nxt
        while node is not None:
            assert node.key is not None
            clone = _Node(node.key, node.code)
            prev.nxt = clone
            bkt = clone.code % other._bucket_count
            if other._buckets[bkt] is None:
                other._buckets[bkt] = prev
            other._index[node.key] = clone
            prev = clone
            node = node.nxt
        return other

    # -- internals ---------------------------------------------------------
    def _insert_bucket_begin(self, bkt: int, node: _Node) -> None:
        before = self._buckets[bkt]
        if before is not None:
            node.nxt = before.nxt
            before.nxt = node
            return
        head = self._before_begin.nxt
        node.nxt = head
        self._before_begin.nxt = node
        if head is not None:
            # The bucket of the former head pointed at the sentinel.
            self._buckets[head.code % self._bucket_count] = node
        self._buckets[bkt] = self._before_begin

    def _rehash_unique(self, count: int) -> None:
        new_buckets: list[_Node | None] = [None] * count
        self._keys = None
        node = self._before_begin.nxt
        self._before_begin.nxt = None
        bbegin_bkt = 0
        while node is not None:
            nxt = node.nxt
            bkt = node.code % count
            before = new_buckets[bkt]
            if before is None:
                node.nxt = self._before_begin.nxt
                self._before_begin.nxt = node
                new_buckets[bkt] = self._before_begin
                if node.nxt is not None:
                    new_buckets[bbegin_bkt] = node
                bbegin_bkt = bkt
            else:
                node.nxt = before.nxt
                before.nxt = node
            node = nxt
        self._buckets = new_buckets
        self._bucket_count = count


def _thaw(state: _State) -> StdUnorderedMap:
    """A linked (plain) map in the snapshot's state."""
    table = StdUnorderedMap.__new__(StdUnorderedMap)
    table._state = None
    policy = table._policy = PrimeRehashPolicy.__new__(PrimeRehashPolicy)
    policy.max_load_factor = state.max_load_factor
    policy.next_resize = state.next_resize
    table._before_begin = prev = _Node(None, 0)
    table._index = {}
    table._keys = list(state.keys)
    count = table._bucket_count = state.bucket_count
    buckets: list[_Node | None] = [None] * count
    table._buckets = buckets
    for key, code in zip(state.keys, state.codes, strict=True):
        node = _Node(key, code)
        prev.nxt = node
        bkt = code % count
        if buckets[bkt] is None:
            buckets[bkt] = prev
        table._index[key] = node
        prev = node
    return table


class StdUnorderedIndexSet:
    """Key order of a libstdc++ ``std::unordered_set<NodeIndex>``: integer keys hash to themselves, and the list and
    buckets behave as :class:`StdUnorderedMap`'s (a new key at the front of its bucket's run, or at the head of the
    list if its bucket is empty; a rehash relinks in the old order; erase only unlinks)."""

    __slots__ = ("_map",)

    def __init__(self) -> None:
        self._map = StdUnorderedMap()

    def insert(self, key: int) -> bool:
        return self._map.insert_hashed(str(key), key)

    def erase(self, key: int) -> bool:
        return self._map.erase(str(key))

    def __iter__(self) -> Iterator[int]:
        return (int(k) for k in self._map)


def iteration_order(keys_in_insertion_order: Iterable[str], reserve: int | None = None) -> list[str]:
    """Iteration order of a default-constructed map after ``operator[]`` of each key in turn.

    Repeated keys keep their first position.  ``reserve`` (if given) is the
    argument of a ``reserve()`` call made on the empty map before the insertions.
    """
    table = StdUnorderedMap()
    if reserve is not None:
        table.reserve(reserve)
    table.update(keys_in_insertion_order)
    return table.keys()


def node_attribute_order(proto_attribute_names: Sequence[str], schema_defaults: Iterable[str]) -> list[str]:
    """Attribute order ORT writes for a node loaded from a NodeProto and resolved.

    ``proto_attribute_names``: the node's attribute names in NodeProto order.
    ``schema_defaults``: the names of the schema attributes that have a default
    value, in ``OpSchema::attributes()`` iteration order (the key order of
    ``onnx.defs.get_schema(op, version, domain).attributes``); names already
    present are skipped.
    """
    table = StdUnorderedMap()
    table.reserve(len(proto_attribute_names))
    table.update(proto_attribute_names)
    table.update(schema_defaults)
    return table.keys()
