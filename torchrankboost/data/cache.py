"""The binned-data cache: a training file read, binned and stored once, memory-mapped after.

``torchrankboost bin DATA -o data.trbin`` (:func:`build_cache`) reads a training file in
any supported format (SVMlight/LETOR, Parquet, Arrow/Feather, CSV: the reader seam,
:mod:`.readers`), bins its features exactly as the tree learner's
``prepare`` would (:func:`~torchrankboost.kernels.binning.bin_features` with the learner's
``n_bins``, ``bin_sample_count`` and ``seed``, edges from the rows of positive weight) and
writes one safetensors file (atomically, :func:`torchrankboost._io.atomic_path`):

============  =================  ===================================================
tensor        shape, dtype       content
============  =================  ===================================================
``codes``     (n, F) uint8/int16 bin code of every value (uint8 up to 255 value bins,
                                 NaN → 255; int16 above, NaN → ``n_bins``)
``edges``     (F, B) float       upper bin edges (``+inf``-padded)
``num_bins``  (F,) int64         value bins of each feature
``missing``   (F,) bool          the feature has NaNs
``labels``    (n,) float         relevance grades
``offsets``   (G + 1,) int64     query offsets (CSR)
``qid``       (G,) int64         query id of each query
``weights``   (n,) float64       document weights (only when the run has weights)
============  =================  ===================================================

The metadata holds the format and version, the binning parameters (``n_bins``,
``sample_count``, ``seed``), the codes' ``code_dtype`` (``"uint8"`` / ``"int16"``; caches
written before it was recorded hold uint8 codes or say so by the tensor's dtype) and
``missing_code``, the reading options (``zero_based``, ``max_features``,
``normalize``; for a table also its column roles, ``columns``, and its ``feature_names``),
and for every source file (the data file, its ``.query`` and ``.weight`` side files) its size,
modification time and SHA-256, the CRC-32 of each chunk of the codes (``codes_crc32``:
``rows`` rows a chunk, about 4 MiB, and one checksum per chunk), and a SHA-256 over the
metadata (the chunks' checksums included) and every tensor but ``codes``.

:func:`load_cache` maps the file (``mmap``, copy-on-write: nothing is read until used) and
views the tensors in place (``torch.frombuffer``); it refuses, with one line naming the
file, a file that is not such a cache, a corrupt one (any changed byte of the codes
included: every chunk of the rows it returns is checked against its CRC-32, on
``torch.get_num_threads()`` threads, before anything is built on them, and every code is
range-checked), one whose source files changed (size/mtime differ and the SHA-256 differs)
or whose parameters differ from the learner's; a cache written before the codes had
checksums is stale (``train --cache`` rebuilds it).
The result carries the :class:`~torchrankboost.kernels.binning.BinnedFeatures` attached
to a stand-in feature matrix (every value replaced by a representative of its bin: the
bin's upper edge, just above the last finite edge for the top bin, NaN for missing — trees
whose thresholds are bin edges score it exactly as the original values), so a
``Booster.fit`` on it uses the stored bins without binning again: the same model, bit for
bit, as from the text file.

On several processes each rank maps only its own rows: whole queries, cut at the query
boundaries nearest to ``r · n / W`` documents.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from .._errors import first_line
from .._io import atomic_path
from ..kernels.binning import MAX_INT16_BINS, BinnedFeatures, attach_bins, bin_features
from ..groups import Groups
from .binned_read import load_binned
from .dataset import RankingData, normalize_per_query
from .readers import Columns, ReadOptions, reader_for
from .sources import fold_split, read_run_files, resolve_data_path
from .svmlight import weights_path

__all__ = ["BinSpec", "CacheError", "StaleCacheError", "CachedData", "build_cache",
           "is_table_file",
           "load_cache", "cache_status", "bin_spec_of", "training_file", "realized", "run_sources",
           "representatives", "write_cache"]

FORMAT = "torchrankboost.bincache"
VERSION = 1
_DTYPES = {"U8": torch.uint8, "I16": torch.int16, "I64": torch.int64, "F32": torch.float32,
           "F64": torch.float64, "BOOL": torch.bool, "F16": torch.float16,
           "BF16": torch.bfloat16}
#: the stored codes' dtype, named in the metadata (``code_dtype``; absent in older caches)
_CODE_NAMES = {torch.uint8: "uint8", torch.int16: "int16"}
_HASH_CHUNK = 1 << 22
_CRC_CHUNK = 1 << 22  # bytes of codes per checksum chunk (whole rows)
_CHUNK = 1 << 16
_REP_CHUNK = 1 << 20  # values per chunk of the stand-in features


class CacheError(ValueError):
    """A file that is not a readable bin cache (one line naming it)."""


class StaleCacheError(CacheError):
    """A cache whose source files or binning parameters differ from the run's."""


@dataclass(frozen=True)
class BinSpec:
    """What the cached bins depend on besides the data: the learner's binning
    (``n_bins``, ``sample_count``, ``seed``) and the reading options (``columns``: a
    table's column roles, ``None`` for SVMlight)."""

    n_bins: int = 255
    sample_count: int = 200_000
    seed: int = 0
    zero_based: object = "auto"
    max_features: Optional[int] = None
    normalize: bool = False
    columns: Optional[Columns] = None

    def as_dict(self) -> dict:
        out = {"n_bins": int(self.n_bins), "sample_count": int(self.sample_count),
               "seed": int(self.seed), "zero_based": self.zero_based,
               "max_features": self.max_features, "normalize": bool(self.normalize)}
        if self.columns is not None:  # a table's column roles (SVMlight caches: none)
            out["columns"] = self.columns.as_dict()
        return out

    def read_options(self) -> ReadOptions:
        """The :class:`~.readers.ReadOptions` of the spec."""
        return ReadOptions(zero_based=self.zero_based, max_features=self.max_features,
                           columns=self.columns or Columns())


def bin_spec_of(learner, **reading) -> BinSpec:
    """The :class:`BinSpec` of a histogram learner (any object with ``n_bins``,
    ``bin_sample_count`` and ``seed``, as the tree learners have); ``ValueError`` for a
    learner that bins no features this way."""
    if not all(hasattr(learner, a) for a in ("n_bins", "bin_sample_count", "seed")):
        raise ValueError(f"--cache: the learner {type(learner).__name__} does not train on "
                         f"binned features (the tree learner does); train from the text file")
    return BinSpec(n_bins=int(learner.n_bins), sample_count=int(learner.bin_sample_count),
                   seed=int(learner.seed), **reading)


def training_file(data) -> Path:
    """The training file of ``data``: the file itself, or a fold folder's ``train`` file
    (``train.txt``, ``train.parquet``, ...)."""
    p = resolve_data_path(data)
    if p.is_dir():
        p = fold_split(p, "train") or p / "train.txt"
    if not p.is_file():
        raise FileNotFoundError(f"file not found: {data} (the bin cache is built from a data "
                                f"file or a fold folder's train file)")
    return p


# ============================================================================ sources
def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_HASH_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _fingerprint(path: Path) -> dict:
    st = os.stat(path)
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "sha256": _sha256_file(path)}


def _source_paths(train: Path, weights: Optional[Path]) -> List[Path]:
    side = [Path(str(train) + ".query")]
    paths = [train] + [p for p in side if p.is_file()]
    return paths + ([weights] if weights is not None else [])


def _changed(source: dict) -> Optional[str]:
    """Why a recorded source differs from the file now (``None``: the same). Size and
    mtime equal → the same; an equal size with a new mtime → compared by SHA-256."""
    p = Path(source["path"])
    try:
        st = os.stat(p)
    except OSError:
        return f"its source {p} is gone"
    if st.st_size != source["size"]:
        return f"its source {p} changed (size)"
    if st.st_mtime_ns != source["mtime_ns"] and _sha256_file(p) != source["sha256"]:
        return f"its source {p} changed (content)"
    return None


# ============================================================================ writing
def _digest(meta_text: str, tensors: Dict[str, Tensor]) -> str:
    """SHA-256 of the metadata text and every tensor but ``codes`` (name, dtype, shape,
    bytes, in name order)."""
    h = hashlib.sha256(meta_text.encode())
    for name in sorted(tensors):
        if name == "codes":
            continue
        t = tensors[name].contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _crc_rows(codes: Tensor) -> int:
    """Rows per checksum chunk of an ``(n, F)`` code matrix: about ``_CRC_CHUNK`` bytes."""
    row = max(1, codes.shape[1] * codes.element_size())
    return max(1, _CRC_CHUNK // row)


def code_checksums(codes: Tensor, rows: int, chunks: Tuple[int, int]) -> List[int]:
    """The CRC-32 of the chunks ``[k0, k1)`` of ``codes`` (chunk ``k``: rows
    ``[k·rows, (k+1)·rows)``, row-major bytes), on ``torch.get_num_threads()`` threads
    (``zlib.crc32`` releases the GIL)."""
    flat = codes.contiguous()

    def crc(k: int) -> int:
        part = flat[k * rows:(k + 1) * rows].reshape(-1).view(torch.uint8)
        return zlib.crc32(memoryview(part.numpy())) if part.numel() else 0

    ks = range(*chunks)
    workers = max(1, min(torch.get_num_threads(), len(ks)))
    if workers == 1:
        return [crc(k) for k in ks]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(crc, ks))


def build_cache(out, data, *, spec: BinSpec = BinSpec(), weights=None) -> Path:
    """Read ``data`` (a file or a fold folder's ``train`` file, in any supported format),
    bin it as ``spec`` says and write the cache to ``out`` atomically; returns the path.
    ``weights``: a weights file (default: the data file's ``.weight`` side file when there
    is one; a table's weight column instead).

    Memory: a file of more than ``spec.sample_count`` rows is read straight into bin codes
    (:func:`~.binned_read.load_binned`: the codes plus one block or chunk; no float
    matrix), unless ``spec.normalize`` or zero weights need the values; then it is read
    whole."""
    train = training_file(data)
    got = None if spec.normalize else load_binned(
        train, n_bins=spec.n_bins, sample_count=spec.sample_count, seed=spec.seed,
        options=spec.read_options(), stream_only=True)
    if got is not None:
        d, b = got.data, got.binned
        w = _weights(train, weights, d)
        if w is not None and not bool((w > 0).all()):
            got = None  # the edges come from the rows of positive weight: read it whole
    if got is None:
        d, b, w = _read_and_bin(train, spec, weights)
    return write_cache(out, b, d, w, spec=spec, sources=_source_paths(train, weights_path(
        train, weights)))


def _weights(train: Path, weights, d: RankingData) -> Optional[Tensor]:
    """The documents' weights: a table's weight column, or the weights file (``weights``,
    else the ``.weight`` side file); a table's position and group weight columns are not
    kept in a cache (``ValueError``)."""
    from .svmlight import document_weights

    for role in ("position", "group_weight"):
        if getattr(d, role) is not None:
            raise ValueError(f"{train}: the bin cache keeps weights but not a {role} column; "
                             f"train from the file (without --cache)")
    if d.weight is not None:
        if weights:
            raise ValueError(f"{train}: has a weight column and --weights {weights} was "
                             f"given; use one")
        return d.weight
    return document_weights(train, weights, d)


def _read_and_bin(train: Path, spec: BinSpec, weights):
    """``(data, binned, weights)`` of the file read whole (float ``X``), then binned."""
    from ..parallel.context import DistContext

    opts = spec.read_options()
    d = read_run_files([train], context=DistContext(), zero_based=opts.zero_based,
                       max_features=opts.max_features, columns=opts.columns)[0]
    if d.X.shape[0] == 0:
        raise ValueError(f"{train}: no data rows to cache")
    X = normalize_per_query(d.X, d.groups) if spec.normalize else d.X
    w = _weights(train, weights, d)
    rows = None if w is None or bool((w > 0).all()) else torch.nonzero(w > 0).reshape(-1)
    b = bin_features(X, n_bins=spec.n_bins, sample_count=spec.sample_count, seed=spec.seed,
                     max_bins=MAX_INT16_BINS, rows=rows)
    return d, b, w


def is_table_file(path) -> bool:
    """Whether ``path`` is read as a table (column roles apply) rather than SVMlight."""
    return reader_for(path).tabular


def write_cache(out, binned: BinnedFeatures, data: RankingData, weights: Optional[Tensor], *,
                spec: BinSpec, sources: List[Path]) -> Path:
    """Write a cache of ``binned`` (the codes of ``data``'s rows), ``data``'s labels and
    queries, ``weights`` ``(n,)`` or ``None``, binning ``spec`` and the fingerprints of the
    ``sources`` files (e.g. data generated in chunks: the script that made it) to ``out``,
    atomically; returns the path. The codes are written as they are (no copy)."""
    b, g = binned, data.groups
    tensors = {"codes": b.codes.contiguous(), "edges": b.edges.contiguous(),
               "num_bins": b.num_bins, "missing": b.has_missing,
               "labels": data.labels.contiguous(), "offsets": g.offsets.to(torch.int64),
               "qid": data.qid[g.offsets[:-1]].contiguous()}
    if weights is not None:
        tensors["weights"] = weights.to(torch.float64).contiguous()
    codes = tensors["codes"]
    rows = _crc_rows(codes)
    info = {"format": FORMAT, "version": VERSION, "spec": spec.as_dict(),
            "codes_crc32": {"rows": rows, "chunks": code_checksums(
                codes, rows, (0, -(-codes.shape[0] // rows)))},
            "missing_code": b.missing_code, "code_dtype": _CODE_NAMES[b.codes.dtype],
            "zero_based": data.zero_based,
            "sources": [_fingerprint(Path(p)) for p in sources]}
    if data.feature_names is not None:
        info["feature_names"] = list(data.feature_names)
    text = json.dumps(info, sort_keys=True)
    with atomic_path(out) as tmp:
        _save(tensors, tmp, {"torchrankboost": text, "sha256": _digest(text, tensors)})
    return Path(out)


_ST_NAMES = {torch.uint8: "U8", torch.int16: "I16", torch.int64: "I64", torch.float32: "F32",
             torch.float64: "F64", torch.bool: "BOOL", torch.float16: "F16",
             torch.bfloat16: "BF16"}


def _save(tensors: Dict[str, Tensor], path, metadata: Dict[str, str]) -> None:
    """A safetensors file written tensor by tensor from the tensors' memory (the library's
    ``save_file`` first copies every tensor into a ``bytes``)."""
    header, pos = {"__metadata__": metadata}, 0
    names = sorted(tensors)
    for name in names:
        t = tensors[name]
        size = t.numel() * t.element_size()
        header[name] = {"dtype": _ST_NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [pos, pos + size]}
        pos += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text)
        for name in names:
            t = tensors[name].contiguous()
            if t.numel():
                flat = t.reshape(-1).view(torch.uint8) if t.dtype != torch.bool else \
                    t.reshape(-1).to(torch.uint8)
                for s in range(0, flat.numel(), _HASH_CHUNK * 16):
                    fh.write(memoryview(flat[s:s + _HASH_CHUNK * 16].numpy()))


# ============================================================================ reading
def _bad(path, why: str) -> CacheError:
    return CacheError(f"{path}: not a valid torchrankboost bin cache ({why})"[:400])


def _map(path: Path):
    """``(info, tensors)`` of the file, every tensor a view of a private mapping."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size < 8:
                raise _bad(path, "too short")
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    except OSError as exc:
        raise CacheError(f"{path}: cannot read the bin cache: {exc.strerror or exc}") from None
    try:
        (hlen,) = struct.unpack("<Q", mm[:8])
        if hlen > size - 8:
            raise ValueError("header past the end")
        header = json.loads(bytes(mm[8:8 + hlen]))
        meta = header.pop("__metadata__", None) or {}
        if "torchrankboost" not in meta:
            raise ValueError("no bin-cache metadata")
        info = json.loads(meta["torchrankboost"])
        tensors = {}
        for name, e in header.items():
            dt = _DTYPES[e["dtype"]]
            b0, b1 = (int(v) for v in e["data_offsets"])
            count = 1
            for s in e["shape"]:
                count *= int(s)
            if not 0 <= b0 <= b1 <= size - 8 - hlen or b1 - b0 != count * dt.itemsize:
                raise ValueError(f"tensor {name} outside the file")
            t = torch.frombuffer(mm, dtype=dt, count=count, offset=8 + hlen + b0) if count \
                else torch.empty(0, dtype=dt)
            tensors[name] = t.reshape([int(s) for s in e["shape"]])
    except CacheError:
        raise
    except Exception as exc:  # noqa: BLE001 - any damage is one line
        raise _bad(path, first_line(exc, default=type(exc).__name__)) from None
    if info.get("format") != FORMAT:
        raise _bad(path, f"format {info.get('format')!r}")
    if info.get("version") != VERSION:
        raise _bad(path, f"format version {info.get('version')!r}, this library reads {VERSION}")
    if meta.get("sha256") != _digest(meta["torchrankboost"], tensors):
        raise _bad(path, "checksum mismatch")
    return info, tensors


def column_max(codes: Tensor, *, group: int = 64, reduce=torch.amax) -> Tensor:
    """``codes.amax(0)`` of an ``(n, F)`` code matrix (``reduce=torch.amin``: the minima),
    the same values ~30x faster: torch reduces the outer axis of a narrow row-major matrix
    one column at a time (21 s for 10M x 220 bytes here), so ``group`` rows are first taken
    as one wide row (a contiguous ``(n / group, group·F)`` view, reduced with wide vector
    loads) and the ``group`` partial results folded after; the ``n mod group`` last rows are
    folded in directly."""
    n, F = codes.shape
    m = n // group * group
    if m == 0 or not codes.is_contiguous():
        return reduce(codes, 0)
    top = reduce(reduce(codes[:m].reshape(m // group, group * F), 0).view(group, F), 0)
    return reduce(torch.stack([top, reduce(codes[m:], 0)]), 0) if m < n else top


def _check_tensors(path, info: dict, t: Dict[str, Tensor], rows_of=None) -> None:
    """Shapes agree, offsets are a valid CSR, every code of the rows ``rows_of(offsets) =
    (r0, r1)`` (default: all; a rank checks the rows it trains on, so it never touches the
    other ranks' pages) is a value bin or the missing code (a damaged code would index past
    a histogram)."""
    need = ("codes", "edges", "num_bins", "missing", "labels", "offsets", "qid")
    if any(k not in t for k in need):
        raise _bad(path, "missing tensors")
    n, F = t["codes"].shape
    off = t["offsets"]
    ok = (t["edges"].shape[0] == F and t["num_bins"].shape == (F,)
          and t["missing"].shape == (F,) and t["labels"].shape == (n,)
          and off.numel() == t["qid"].numel() + 1 and int(off[0]) == 0 and int(off[-1]) == n
          and bool((off[1:] >= off[:-1]).all())
          and ("weights" not in t or t["weights"].shape == (n,)))
    if not ok:
        raise _bad(path, "inconsistent shapes")
    codes, miss, nb = t["codes"], int(info["missing_code"]), t["num_bins"]
    if (codes.dtype not in _CODE_NAMES or info.get("code_dtype", _CODE_NAMES.get(codes.dtype))
            != _CODE_NAMES.get(codes.dtype) or not 0 <= miss <= torch.iinfo(codes.dtype).max):
        raise _bad(path, f"bin codes of dtype {codes.dtype} (missing code {miss})")
    r0, r1 = rows_of(off) if rows_of is not None else (0, n)
    _check_crc(path, info, codes, r0, r1)
    codes = codes[r0:r1]
    n = codes.shape[0]
    if n == 0:
        return
    if codes.dtype.is_signed:  # int16: the low end too (a negative code is damage)
        bad = column_max(codes, reduce=torch.amin) < 0
    else:
        bad = torch.zeros(F, dtype=torch.bool)
    top = column_max(codes).to(torch.int64)  # one pass; columns topped by NaN's code: a second
    bad |= (top >= nb) & (top != miss)
    cols = torch.nonzero((top == miss) & (nb < miss)).reshape(-1)
    for s in range(0, n if cols.numel() else 0, _CHUNK):
        c = codes[s:s + _CHUNK].index_select(1, cols).to(torch.int64)
        bad[cols] |= ((c >= nb[cols]) & (c != miss)).any(0)
    if bool(bad.any()):
        raise _bad(path, "a bin code out of range")


def _check_crc(path, info: dict, codes: Tensor, r0: int, r1: int) -> None:
    """The chunks of ``codes`` that hold the rows ``[r0, r1)`` against their CRC-32."""
    crc = info.get("codes_crc32")
    n = codes.shape[0]
    try:
        rows, chunks = int(crc["rows"]), [int(c) for c in crc["chunks"]]
        ok = rows >= 1 and len(chunks) == -(-n // rows)
    except (TypeError, KeyError, ValueError):
        ok = False
    if not ok:
        raise _bad(path, "malformed checksums of the bin codes")
    if r1 <= r0:
        return
    k0, k1 = r0 // rows, -(-r1 // rows)
    got = code_checksums(codes, rows, (k0, k1))
    bad = next((k for k, c in zip(range(k0, k1), got) if c != chunks[k]), None)
    if bad is not None:
        raise _bad(path, f"checksum mismatch in the bin codes of rows {bad * rows:,} to "
                         f"{min(n, (bad + 1) * rows) - 1:,}")


def run_sources(data, weights=None) -> List[str]:
    """The source files a cache of ``data`` (with ``weights``) records, resolved."""
    from .svmlight import weights_path

    train = training_file(data)
    return [str(p.resolve()) for p in _source_paths(train, weights_path(train, weights))]


def cache_status(path, spec: Optional[BinSpec] = None, sources=None) -> Optional[str]:
    """Why the cache at ``path`` cannot be used for ``spec`` and the ``sources``
    (:func:`run_sources`; ``None``: not compared) — missing, stale —, or ``None`` when it is
    fresh. A corrupt file raises :class:`CacheError`."""
    p = Path(path)
    if not p.exists():
        return "it does not exist"
    info, _ = _map(p)
    return _stale_reason(info, spec, sources)


def _stale_reason(info: dict, spec: Optional[BinSpec], sources=None) -> Optional[str]:
    if "codes_crc32" not in info:
        return "it was written before the bin codes had checksums"
    recorded = [s["path"] for s in info["sources"]]
    if sources is not None and list(sources) != recorded:
        return f"it was built from {', '.join(recorded)}"
    if spec is not None and info["spec"] != spec.as_dict():
        diff = [f"{k}={info['spec'].get(k)!r} (run: {v!r})" for k, v in spec.as_dict().items()
                if info["spec"].get(k) != v]
        return f"it was built with {', '.join(diff)}"
    for source in info["sources"]:
        why = _changed(source)
        if why:
            return why
    return None


@dataclass
class CachedData:
    """A loaded cache (this rank's rows): ``data`` (the stand-in features with the bins
    attached, labels, groups), ``weights`` ((n,) float64 or ``None``), ``binned`` and the
    stored ``info``."""

    data: RankingData
    weights: Optional[Tensor]
    binned: BinnedFeatures
    info: dict


def _rank_rows(off: Tensor, rank: int, world: int):
    """Query range ``[q0, q1)`` of ``rank``: cuts at the query boundaries nearest to
    ``r · n / W`` documents."""
    n = int(off[-1])
    targets = torch.tensor([n * r // world for r in (rank, rank + 1)], dtype=torch.int64)
    q = torch.searchsorted(off, targets, side="left")
    return int(q[0]), int(q[1]) if rank + 1 < world else off.numel() - 1


def representatives(binned: BinnedFeatures) -> Tensor:
    """(n, F) stand-in values of the codes: ``edges[f, c]`` for a value bin below the top,
    the float after the last finite edge for the top bin (0 for a feature of one bin), NaN
    for the missing code. For any threshold ``edges[f, t]``: ``x̃ <= edges[f, t]`` ⇔
    ``code <= t`` — the test the trees make, so their scores are those of the raw values."""
    e, nb, miss = binned.edges, binned.num_bins, binned.missing_code
    F, B = e.shape
    width = miss + 1
    table = torch.full((F, width), float("nan"), dtype=e.dtype)
    table[:, :B] = e
    top = nb - 1
    below = e.gather(1, (top - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    last = torch.where(top > 0, torch.nextafter(below, torch.full_like(below, float("inf"))),
                       torch.zeros_like(below))
    table[torch.arange(F), top] = last
    flat, base = table.reshape(-1), torch.arange(F, dtype=torch.int32) * width
    codes = binned.codes
    out = torch.empty(codes.shape, dtype=e.dtype)
    step = max(1, _REP_CHUNK // max(F, 1))  # rows per chunk: small int32 temporaries
    for s in range(0, codes.shape[0], step):
        idx = codes[s:s + step].to(torch.int32).add_(base)
        torch.index_select(flat, 0, idx.reshape(-1), out=out[s:s + step].view(-1))
    return out


def _stand_in(binned: BinnedFeatures) -> Tensor:
    """An (n, F) tensor of zeros that takes no memory (stride 0): the features of a fit
    that needs only their bins; :func:`realized` turns it into the representatives."""
    return torch.zeros((), dtype=binned.edges.dtype).expand(binned.codes.shape)


def realized(data: RankingData) -> RankingData:
    """``data`` with stand-in features (``load_cache(values=False)``) replaced by the
    bins' representatives (:func:`representatives`), e.g. to score the training data
    after the fit; any other data is returned as it is."""
    found = getattr(data.X, "_torchrankboost_bins", None)
    if found is None or data.X.stride() != (0, 0):
        return data
    X = attach_bins(representatives(found[0]), found[0], key=found[1])
    return RankingData(X, data.labels, data.groups, data.qid, data.row, data.zero_based)


def load_cache(path, *, spec: Optional[BinSpec] = None, sources=None, context=None,
               values: bool = True) -> CachedData:
    """The cache at ``path``, memory-mapped: this rank's rows (``context``: a
    :class:`~torchrankboost.parallel.DistContext`; ``None``: one process, all rows).
    ``spec``: the run's binning (a different one is :class:`StaleCacheError`, as are
    changed source files, and other ``sources`` than recorded, see :func:`run_sources`);
    ``CacheError`` for a damaged file. ``values=False``: the
    features are a stand-in that takes no memory (enough for a fit of the tree learner,
    which uses the bins only; :func:`realized` gives values to score them)."""
    p = Path(path)
    info, t = _map(p)
    why = _stale_reason(info, spec, sources)
    if why:
        raise StaleCacheError(f"{p}: stale bin cache: {why}; rebuild it with "
                              f"`torchrankboost bin` (or train with --cache to rebuild)")
    rank, world = (0, 1) if context is None else (context.rank, context.world_size)

    def rows_of(off):
        q0, q1 = _rank_rows(off, rank, world)
        return int(off[q0]), int(off[q1])

    _check_tensors(p, info, t, rows_of)
    off = t["offsets"]
    q0, q1 = _rank_rows(off, rank, world)
    r0, r1 = int(off[q0]), int(off[q1])
    binned = BinnedFeatures(codes=t["codes"][r0:r1], edges=t["edges"], num_bins=t["num_bins"],
                            has_missing=t["missing"], missing_code=int(info["missing_code"]),
                            n_bins=int(info["spec"]["n_bins"]))
    X = attach_bins(representatives(binned) if values else _stand_in(binned), binned,
                    key=(binned.n_bins, info["spec"]["sample_count"], info["spec"]["seed"]))
    groups = Groups(off[q0:q1 + 1] - r0)
    qid = torch.repeat_interleave(t["qid"][q0:q1], groups.sizes)
    names = info.get("feature_names")
    data = RankingData(X, t["labels"][r0:r1], groups, qid, None, info["zero_based"],
                       None if names is None else tuple(names))
    w = t["weights"][r0:r1] if "weights" in t else None
    return CachedData(data=data, weights=w, binned=binned, info=info)
