"""Whole forecasters, all with ``forward(x (B, M, N, C), coords (B, N, L)) -> (B, J, N, C)``."""

from cloudlstm.models.agcrn import AGCRN
from cloudlstm.models.base import ForecastModel, values_to_cloud
from cloudlstm.models.cloudcnn import CloudCNN
from cloudlstm.models.cloudlstm import CloudSeq2Seq
from cloudlstm.models.cnn import CNN2D
from cloudlstm.models.cnn3d import CNN3D
from cloudlstm.models.convlstm import ConvLSTM
from cloudlstm.models.dcrnn import DCRNN
from cloudlstm.models.defcnn import DefCNN
from cloudlstm.models.graph_wavenet import GraphWaveNet
from cloudlstm.models.grid_base import GridForecaster
from cloudlstm.models.knn_lstm import KNNLSTM
from cloudlstm.models.knn_mlp import KNNMLP
from cloudlstm.models.linear import TimeLinear
from cloudlstm.models.lstm import SeqLSTM
from cloudlstm.models.mlp import MLP
from cloudlstm.models.naive import Persistence, SeasonalNaive
from cloudlstm.models.pointcnn import PointCNN
from cloudlstm.models.pointlstm import PointLSTM
from cloudlstm.models.predrnnpp import PredRNNpp
from cloudlstm.models.staeformer import STAEformer
from cloudlstm.models.stgcn import STGCN
from cloudlstm.models.stid import STID

__all__ = [
    "AGCRN",
    "CNN2D",
    "CNN3D",
    "CloudCNN",
    "CloudSeq2Seq",
    "ConvLSTM",
    "DCRNN",
    "DefCNN",
    "ForecastModel",
    "GraphWaveNet",
    "GridForecaster",
    "KNNLSTM",
    "KNNMLP",
    "MLP",
    "Persistence",
    "PointCNN",
    "PointLSTM",
    "PredRNNpp",
    "STAEformer",
    "STGCN",
    "STID",
    "SeasonalNaive",
    "SeqLSTM",
    "TimeLinear",
    "values_to_cloud",
]
