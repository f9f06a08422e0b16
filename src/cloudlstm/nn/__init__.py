"""Operators and recurrent cells on point clouds (and the baselines' grid / graph operators)."""

from cloudlstm.nn.knn import NeighbourCountError, check_k, check_k_option, knn, knn_reference  # noqa: I001
from cloudlstm.nn.attention import CloudAttention
from cloudlstm.nn.cells import CELLS, CloudGRUCell, CloudLSTMCell, CloudRNNCell
from cloudlstm.nn.conv_rnn import CausalLSTMCell, ConvLSTMCell, GradientHighwayUnit
from cloudlstm.nn.dconv import DConv, channel_neighbours, gather_neighbourhoods, shared_neighbours
from cloudlstm.nn.deform_conv import DeformConv2d
from cloudlstm.nn.graph import ChebGraphConv, DistanceGraph, scaled_laplacian
from cloudlstm.nn.xconv import XConv, dilated_neighbours

__all__ = [
    "CELLS",
    "CausalLSTMCell",
    "ChebGraphConv",
    "CloudAttention",
    "CloudGRUCell",
    "CloudLSTMCell",
    "CloudRNNCell",
    "ConvLSTMCell",
    "DConv",
    "DeformConv2d",
    "DistanceGraph",
    "GradientHighwayUnit",
    "NeighbourCountError",
    "XConv",
    "channel_neighbours",
    "check_k",
    "check_k_option",
    "dilated_neighbours",
    "gather_neighbourhoods",
    "knn",
    "knn_reference",
    "scaled_laplacian",
    "shared_neighbours",
]
