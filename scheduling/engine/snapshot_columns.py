"""The columns of a snapshot (``Cluster``, cluster.py): the array types and codes they use, and
the per-allocation (slot) and per-entry columns with how they grow. An allocation holds a slot;
each node of its placement holds an entry (its slot, its node and its amounts there)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from .model import Allocation
from .slot_entries import SlotEntries

EPS = 1e-9
FArr = npt.NDArray[np.float64]
IArr = npt.NDArray[np.int64]
BArr = npt.NDArray[np.bool_]

CHECKPOINT_CODE = {"auto": 0, "manual": 1, "none": 2}
JOBTYPE_BIT = {"exclusive": 1, "forced": 2, "backfill": 4}
NO_VC = -1
MIXED = -2
ID_WIDTH = 128  # characters of an id the snapshot keeps
ID_START_WIDTH = 16


NO_KEY = -1  # an id without an integer key (see id_key)
DEAD_KEY = np.iinfo(np.int64).max  # above every key: dead slots sort last


def id_key(ident: str) -> int:
    """An integer ordered as the id is in code-point order, for ids of at most 8 ASCII characters
    without NUL: the bytes, padded with NULs (which sort before any character), read big-endian.
    Any other id gets NO_KEY and the order falls back to sorting the strings."""
    if len(ident) > 8 or not ident.isascii() or "\0" in ident:
        return NO_KEY
    return int.from_bytes(ident.encode("ascii").ljust(8, b"\0"), "big")




def floor_limit(count: int, pct: float) -> int:
    return math.floor(count * pct + EPS)


class SlotColumns:
    """The slot and entry columns of a snapshot and the counters its caches are keyed by."""

    def _init_slots(self, size: int, n_res: int) -> None:
        self.objs: list[Allocation | None] = [None] * size
        self.slot_of: dict[str, int] = {}
        self._free_slots: list[int] = []
        self._next_slot = 0
        self.alive = np.zeros(size, dtype=bool)
        # Ids as wide as the longest so far (at most ID_WIDTH): a 500,000-row U128 column is 256 MB.
        self.a_ids = np.zeros(size, dtype=f"U{ID_START_WIDTH}")
        self.a_idkey = np.full(size, NO_KEY, dtype=np.int64)  # see _id_key
        self.a_class = np.zeros(size, dtype=np.int64)
        self.a_prio = np.zeros(size, dtype=np.int64)
        self.a_running = np.zeros(size, dtype=bool)
        self.a_start = np.full(size, np.nan)
        self.a_wall = np.full(size, np.nan)
        self.a_ckpt = np.zeros(size, dtype=np.int64)
        self.a_ckpt_min = np.zeros(size)
        self.a_last_ckpt = np.full(size, np.nan)
        self.a_sens = np.zeros(size, dtype=bool)
        self.a_prot = np.full(size, -np.inf)
        self.a_preemptible = np.zeros(size, dtype=bool)
        self.a_jobtypes = np.zeros(size, dtype=np.int64)
        self.a_pcount = np.zeros(size, dtype=np.int64)
        self.a_tenant = np.zeros(size, dtype=np.int64)
        self.a_user = np.zeros(size, dtype=np.int64)
        self.a_vc = np.full(size, NO_VC, dtype=np.int64)
        self.a_st = np.zeros(size, dtype=np.int64)
        self.a_rank = np.zeros(size, dtype=np.int64)  # its own rank, else its session type's
        self.a_held = np.zeros((size, n_res))
        self.a_nnodes = np.zeros(size, dtype=np.int64)
        self.a_first_gpu = np.zeros(size)
        self.a_on_borrowed = np.zeros(size, dtype=bool)
        self.a_borrow_home = np.full(size, NO_VC, dtype=np.int64)
        self.a_entries = SlotEntries()
        # Per slot set by ``add``: the id and the fields (``_SLOT_FIELDS``) its columns were written from.
        self._slot_src: dict[int, tuple[str, tuple[Any, ...]]] = {}

    _SLOT_ARRAYS = ("alive", "a_ids", "a_idkey", "a_class", "a_prio", "a_running", "a_start", "a_wall", "a_ckpt",
                    "a_ckpt_min", "a_last_ckpt", "a_sens", "a_prot", "a_preemptible", "a_jobtypes",
                    "a_pcount", "a_tenant", "a_user", "a_vc", "a_st", "a_rank", "a_held", "a_nnodes", "a_first_gpu",
                    "a_on_borrowed", "a_borrow_home")
    _FILL = {"a_start": np.nan, "a_wall": np.nan, "a_last_ckpt": np.nan, "a_prot": -np.inf,
             "a_vc": NO_VC, "a_borrow_home": NO_VC, "a_idkey": NO_KEY}

    def _grow_slots(self) -> None:
        old = len(self.objs)
        new = old * 2
        self.objs.extend([None] * (new - old))
        for name in self._SLOT_ARRAYS:
            arr = getattr(self, name)
            shape = (new - old, *arr.shape[1:])
            fill = np.full(shape, self._FILL.get(name, 0), dtype=arr.dtype)
            setattr(self, name, np.concatenate([arr, fill]))

    def _init_entries(self, size: int, n_res: int) -> None:
        self.e_alloc = np.full(size, -1, dtype=np.int64)
        self.e_node = np.zeros(size, dtype=np.int64)
        self.e_res = np.zeros((size, n_res))
        self.e_alive = np.zeros(size, dtype=bool)
        self._free_entries: list[int] = []
        self._next_entry = 0

    def _grow_entries(self) -> None:
        old = len(self.e_alloc)
        self.e_alloc = np.concatenate([self.e_alloc, np.full(old, -1, dtype=np.int64)])
        self.e_node = np.concatenate([self.e_node, np.zeros(old, dtype=np.int64)])
        self.e_res = np.concatenate([self.e_res, np.zeros((old, self.e_res.shape[1]))])
        self.e_alive = np.concatenate([self.e_alive, np.zeros(old, dtype=bool)])

    def _init_versions(self) -> None:
        self.version = 0
        self.state_version = 0  # bumped by state-only changes, which leave cached values in place
        self._cache: dict[Any, Any] = {}
        # Values kept across allocation changes and patched on the nodes those touched (``kept``):
        # the nodes each add/remove touched, in order, and a version of everything else.
        self._node_log: list[int] = []
        self._log_base = 0  # what _node_log[0] is the position of
        self.struct_version = 0
        self._kept: dict[Any, tuple[int, int, Any]] = {}
        self._share_cols: tuple[int, list[tuple[int, float]]] = (-1, [])  # (struct_version, share_of's columns)
