"""Whole forecasters, all with ``forward(x (B, M, N, C), coords (B, N, L)) -> (B, J, N, C)``."""

from cloudlstm.models.base import Forecaster, values_to_cloud
from cloudlstm.models.cloudcnn import CloudCNN
from cloudlstm.models.cloudlstm import CloudSeq2Seq
from cloudlstm.models.knn_lstm import KNNLSTM

__all__ = ["CloudCNN", "CloudSeq2Seq", "Forecaster", "KNNLSTM", "values_to_cloud"]
