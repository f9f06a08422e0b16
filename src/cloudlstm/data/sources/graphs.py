"""A graph of the points read from a file (a road network's), for the models that take one.

Two forms users have:

* DCRNN's ``adj_mx.pkl`` (METR-LA, PEMS-BAY): a Python pickle of ``(sensor_ids,
  sensor_id_to_ind, adj_mx)``, ``adj_mx`` an ``(N, N)`` array of weights whose row and
  column ``sensor_id_to_ind[id]`` belong to sensor ``id``. Written by Python 2, so it is
  read with ``encoding="latin1"``. A pickle can run code when it is loaded: read only files
  you trust;
* an ``(N, N)`` matrix without ids, in the order of the data file's point columns: a CSV
  with no header (T-GCN's ``los_adj.csv``, any pandas compression; separated by commas,
  or by tabs or semicolons as :func:`~cloudlstm.data.sources.tables.csv_dialect` finds
  them) or a ``.npy`` file. DCRNN's ``adj_mx`` may be a SciPy sparse matrix (made dense).

:func:`read_graph` reads and checks either (square, finite, non-negative, as many ids as
rows); :func:`graph_among` takes the ``(N, N)`` block of a stream's points, in the stream's
order, by id. Weights are kept as the file gives them (self-loops and direction too): each
model decides what it makes of them (:class:`~cloudlstm.models.stgcn.STGCN` drops the
self-loops and keeps the larger weight of each pair of directions).
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cloudlstm.data.sources.cut_short import refuse_cut_short
from cloudlstm.data.sources.tables import (
    DAMAGED,
    SEPARATOR_NAMES,
    csv_dialect,
    damaged_file,
    id_hint,
    id_text,
    line_numbers,
)
from cloudlstm.errors import MissingFileError, UserError

__all__ = ["GRAPH_SUFFIXES", "graph_among", "read_graph"]

log = logging.getLogger(__name__)

GRAPH_SUFFIXES = (".pkl", ".pickle", ".csv", ".npy")
OPTION = "data.source.graph"


def read_graph(path: Path, column_ids: Sequence[str] | None) -> tuple[list[str], np.ndarray]:
    """The ids and the ``(G, G)`` float64 weights of the graph file ``path``.

    Args:
        path: DCRNN's pickle (``.pkl``, ``.pickle``), or a matrix without ids (``.csv``
            with compression suffixes, ``.npy``).
        column_ids: the data file's point ids in its column order: the ids of a matrix
            without ids (None: such a file is refused).

    Raises:
        MissingFileError: no such file.
        UserError: an unknown suffix, an unreadable file, a pickle that is not DCRNN's
            triple, a matrix that is not square, not as large as the ids, with NaN, inf or
            negative weights, without an edge between distinct points, or ids repeated.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"{OPTION}={path.resolve()}: no such file.")
    kind = _kind(path)
    if kind == "pickle":
        ids, matrix = _read_dcrnn_pickle(path)
    else:
        matrix = _read_matrix(path, kind)
        if column_ids is None:
            raise UserError(
                f"{OPTION}={path}: a matrix without ids needs the data file's column order, "
                "which this data source does not have; give DCRNN's adj_mx.pkl instead."
            )
        ids = [str(i) for i in column_ids]
        if matrix.shape[0] == matrix.shape[1] != len(ids):
            raise UserError(
                f"{OPTION}={path} is {matrix.shape[0]} x {matrix.shape[1]}, but the data file "
                f"has {len(ids)} point columns: a matrix without ids must have one row and "
                "column per point column, in the file's order."
            )
    check_weights(matrix, f"{OPTION}={path}")
    if len(ids) != matrix.shape[0]:
        raise UserError(
            f"{OPTION}={path} names {len(ids)} ids for a {matrix.shape[0]} x "
            f"{matrix.shape[1]} matrix: they must agree."
        )
    repeated = pd.Index(ids)[pd.Index(ids).duplicated()].unique().tolist()
    if repeated:
        raise UserError(f"{OPTION}={path} names the id(s) {repeated[:5]} more than once.")
    return ids, matrix


# DCRNN ships its road distances as such a list (distances_la_2012.csv: from, to, cost)
_EDGE_LIST = (
    " (a list of edges, one 'from, to, weight' per row, as DCRNN's distances_la_2012.csv? "
    "The graph is a square weight matrix: DCRNN's adj_mx.pkl, which its gen_adj_mx.py builds "
    "from those distances, or a CSV of the bare weights)"
)


def check_weights(matrix: np.ndarray, what: str) -> None:
    """Refuse a weight matrix that is not square, holds NaN, inf or a negative weight, or
    has no edge between two distinct points (of two points or more).

    Raises:
        UserError: naming the first offending entry.
    """
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        shape = " x ".join(str(s) for s in matrix.shape)
        hint = ""
        if matrix.ndim == 2 and matrix.shape[0] == matrix.shape[1] + 1:
            hint = " (a header row? A CSV adjacency has none)"
        elif matrix.ndim == 2 and matrix.shape[1] == matrix.shape[0] + 1:
            hint = (
                " (an index column, as DataFrame.to_csv writes by default? A CSV adjacency "
                "has none)"
            )
        elif matrix.ndim == 2 and matrix.shape[1] == 3 and matrix.shape[0] > 4:
            hint = _EDGE_LIST
        raise UserError(f"{what} is {shape}, not a square matrix{hint}.")
    for bad, words in ((~np.isfinite(matrix), "not finite"), (matrix < 0, "negative")):
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise UserError(
                f"{what}: {int(bad.sum())} weight(s) are {words}, e.g. {matrix[i, j]} at row "
                f"{i}, column {j}; a graph's weights are finite and >= 0 (0: no edge)."
            )
    if len(matrix) > 1 and not _has_edge(matrix):
        raise UserError(
            f"{what}: its {len(matrix)} x {len(matrix)} weights have no edge between two "
            "distinct points (every weight off the diagonal is 0): a graph without edges is "
            "most likely the wrong file, or one thresholded too high; give the graph of the "
            "points, or leave data.source.graph out."
        )


def _has_edge(matrix: np.ndarray) -> bool:
    """Whether a square weight matrix has a weight between two distinct points (self-loops
    on the diagonal are no edges)."""
    return bool((matrix - np.diag(np.diag(matrix))).any())


def graph_among(
    ids: Sequence[str], matrix: np.ndarray, point_ids: Sequence[str], what: str
) -> np.ndarray:
    """The ``(N, N)`` weights among ``point_ids``, in their order, from the graph
    ``(ids, matrix (G, G))``; the graph may have more nodes than the points.

    A warning where the points, a part of the graph (``data.num_points``), have no edge
    among them: the graph models then see no neighbour.

    Raises:
        UserError: some points are not in the graph.
    """
    where = {str(i): k for k, i in enumerate(ids)}
    lost = [p for p in point_ids if str(p) not in where]
    if lost:
        raise UserError(
            f"{what}: {len(lost)} point(s) of the data are not in the graph, e.g. "
            f"{lost[:5]}; the graph has {len(ids)} node(s), e.g. {list(ids[:3])}. Give the "
            f"graph of these points.{id_hint(lost, [str(i) for i in ids], 'the graph')}"
        )
    order = np.array([where[str(p)] for p in point_ids], dtype=np.int64)
    block = np.asarray(matrix, dtype=np.float64)[np.ix_(order, order)]
    if len(block) > 1 and not _has_edge(block):
        log.warning(
            "%s: the graph has no edge among the %d points of the data (of its %d nodes), so "
            "the models that read the graph see no neighbour; choose points that are "
            "connected, or all of the graph's.",
            what,
            len(block),
            len(ids),
        )
    return block


def _kind(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in (".pkl", ".pickle"):
        return "pickle"
    if suffixes and suffixes[-1] == ".npy":
        return "npy"
    if ".csv" in suffixes:
        return "csv"
    raise UserError(
        f"{OPTION}={path}: unknown graph format (suffix {path.suffix!r}); give DCRNN's "
        "adj_mx.pkl, or an N x N matrix as a CSV without header (.csv, .csv.gz) or .npy."
    )


def _read_dcrnn_pickle(path: Path) -> tuple[list[str], np.ndarray]:
    """``(ids in matrix order, matrix)`` of DCRNN's ``(sensor_ids, sensor_id_to_ind,
    adj_mx)``."""
    try:
        with path.open("rb") as f:
            held = pickle.load(f, encoding="latin1")  # noqa: S301 (the user's own file)
    except Exception as err:  # pickle raises anything a damaged file makes it do
        raise UserError(f"Cannot read {OPTION}={path} as a pickle: {err!r}") from None
    if not (isinstance(held, (tuple, list)) and len(held) == 3):
        raise UserError(
            f"{OPTION}={path} holds a {type(held).__name__}, not DCRNN's triple (sensor_ids, "
            "sensor_id_to_ind, adj_mx)."
        )
    sensor_ids, to_index, adj = held
    matrix = _as_matrix(adj, f"{OPTION}={path} (its adj_mx)")
    ids = [id_text(s) for s in sensor_ids]
    if isinstance(to_index, Mapping) and to_index:
        ids = _ids_in_matrix_order(ids, to_index, len(matrix), path)
    return ids, matrix


def _ids_in_matrix_order(
    ids: list[str], to_index: Mapping[Any, Any], size: int, path: Path
) -> list[str]:
    """The ids by their matrix row (``sensor_id_to_ind``), which must index every row once."""
    rows = {id_text(k): v for k, v in to_index.items()}
    try:
        order = sorted(rows, key=lambda k: int(rows[k]))
        places = sorted(int(v) for v in rows.values())
    except (TypeError, ValueError):
        raise UserError(
            f"{OPTION}={path}: sensor_id_to_ind must map each id to its row number."
        ) from None
    if places != list(range(size)) or set(order) != set(ids):
        raise UserError(
            f"{OPTION}={path}: sensor_id_to_ind does not give each of the {len(ids)} "
            f"sensor_ids one row of the {size} x {size} matrix."
        )
    return order


def _read_matrix(path: Path, kind: str) -> np.ndarray:
    if kind == "npy":
        try:
            return _as_matrix(np.load(path, allow_pickle=False), f"{OPTION}={path}")
        except (OSError, ValueError) as err:
            raise UserError(f"Cannot read {OPTION}={path} as a .npy array: {err}") from None
    dialect = csv_dialect(path, "the graph")  # its first row stands for a header: tabs, semicolons
    refuse_cut_short(path, "the graph", dialect.get("sep", ","))
    try:
        table = pd.read_csv(path, header=None, **dialect)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise UserError(f"Cannot read {OPTION}={path} as CSV: {err}") from None
    except DAMAGED as err:
        raise damaged_file(path, OPTION, err) from None
    numbers = table.apply(pd.to_numeric, errors="coerce")
    bad = numbers.isna() & table.notna()
    if bad.to_numpy().any():
        i, j = np.argwhere(bad.to_numpy())[0]
        cell = str(table.iat[i, j])
        separators = [name for sep, name in SEPARATOR_NAMES.items() if sep in cell]
        if separators:
            hint = (
                f" (it holds {separators[0]}: a file separated by {separators[0]} is read as "
                "such where its first row has no comma; write its decimals with a dot)"
            )
        elif i == 0 and table.shape[1] == 3 and len(table) > 4:
            hint = _EDGE_LIST
        else:
            hint = " (a header row? A CSV adjacency has none)" if i == 0 else ""
        # the matrix's row, and where an editor finds it (blank lines are not rows)
        (line,) = line_numbers(path, [int(i)], header=False, sep=dialect.get("sep", ","))
        raise UserError(
            f"{OPTION}={path}: the cell at row {i}, column {j} (line {line}) is "
            f"{table.iat[i, j]!r}, not a number{hint}."
        )
    _refuse_labels(numbers.to_numpy(dtype=np.float64), path)
    return numbers.to_numpy(dtype=np.float64)


def _refuse_labels(matrix: np.ndarray, path: Path) -> None:
    """Refuse a CSV matrix whose first row and first column hold the same numbers after an
    empty corner: labels (the point ids, as ``DataFrame(adj, index=ids, columns=ids)
    .to_csv()`` writes them), which would be read as weights, the corner as a NaN one.

    Raises:
        UserError: naming the labels and how to save the bare weights.
    """
    if matrix.shape[0] < 3 or matrix.shape[0] != matrix.shape[1] or not np.isnan(matrix[0, 0]):
        return
    row, column = matrix[0, 1:], matrix[1:, 0]
    if not (np.isfinite(row).all() and np.array_equal(row, column)):
        return
    labels = [id_text(v) for v in row[:3]]
    raise UserError(
        f"{OPTION}={path}: its first row and first column hold the same {len(row)} labels "
        f"after an empty corner (e.g. {labels}), as DataFrame.to_csv writes a matrix's columns "
        "and index: a CSV adjacency is the bare weights, in the order of the table's point "
        "columns; save it with to_csv(header=False, index=False), or give DCRNN's adj_mx.pkl."
    )


def _as_matrix(value: Any, what: str) -> np.ndarray:
    """``value`` as a float64 array: a NumPy array, nested lists, or a SciPy sparse matrix
    or array (as graphs are often stored), made dense."""
    if type(value).__module__.startswith("scipy.sparse"):
        value = value.toarray()  # the module of a sparse matrix loaded is importable
    try:
        matrix = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise UserError(f"{what} is not a matrix of numbers.") from None
    if matrix.ndim != 2:
        raise UserError(f"{what} has {matrix.ndim} dimension(s), not 2 (an N x N matrix).")
    return matrix
