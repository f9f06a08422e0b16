"""Operators and recurrent cells on point clouds."""

from cloudlstm.nn.attention import CloudAttention
from cloudlstm.nn.cells import CELLS, CloudGRUCell, CloudLSTMCell, CloudRNNCell
from cloudlstm.nn.dconv import DConv, channel_neighbours, gather_neighbourhoods
from cloudlstm.nn.knn import NeighbourCountError, check_k, knn, knn_reference

__all__ = [
    "CELLS",
    "CloudAttention",
    "CloudGRUCell",
    "CloudLSTMCell",
    "CloudRNNCell",
    "DConv",
    "NeighbourCountError",
    "channel_neighbours",
    "check_k",
    "gather_neighbourhoods",
    "knn",
    "knn_reference",
]
